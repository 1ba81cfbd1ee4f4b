#!/bin/sh
# tests/cli/test_bench_sweep.sh — `nearattn bench e2e --sweep` end to end on a
# tiny sweep (loopback shared memory, kv-fetch and offload, batch 2, contexts
# 32 and 64, 1 repeat): it exits 0, writes the JSON with every point ok, the
# decode bytes counted by the transport are within 10 % of the analytic count
# for both modes (docs/benchmarks.md; the benchmark itself reports the
# default run's figures), a failing peer binary and an absent one are
# reported as skipped while the run goes on, and usage errors exit 2; each
# row says its load average and a one-repeat row no spread; a plotted sweep
# draws throughput as points at measured batch sizes, names unmeasured
# ablation variants and the load average.
# No timing is checked.
set -u
. "$(dirname "$0")/lib.sh"
na_cli_init nearattn-sweep-test

# from the repository root, as docs/benchmarks.md runs it: the layouts the
# sweep writes under its temporary directory must not name the secret by a
# path relative to the current directory (no NA_SOURCE_DIR, as for a user)
cd "$(dirname "$0")/../.." || exit 1
env -u NA_SOURCE_DIR "$BIN" bench e2e --sweep --links shm --modes kv-fetch,offload --batches 2 --ctxs 32,64 \
    --new 6 --reps 1 --no-plot --llama2c-run /bin/false --json "$TMP/s.json" \
    > "$TMP/out" 2> "$TMP/err"
rc=$?
[ $rc = 0 ] || fail "sweep exit $rc: $(tail -n 20 "$TMP/err")"
[ -s "$TMP/s.json" ] || fail "no JSON written"
n=$(grep -c '"mode": "' "$TMP/s.json")
[ "$n" = 4 ] || fail "expected 4 points in the JSON, got $n"
grep '"mode": "' "$TMP/s.json" | grep -q '"ok": 0' && fail "a point failed: $(grep FAILED "$TMP/out")"
# wire/an column (after the analytic in-bytes) of every shm row
awk '$1 == "shm" { n = split($0, f, "|"); split(f[4], c, " "); r = c[5];
                   if (r < 0.9 || r > 1.1) { print "ratio " r ": " $0; bad = 1 } ; rows++ }
     END { exit bad || rows != 4 }' "$TMP/out" || fail "wire bytes not within 10% of the analytic count"
grep -q 'skipped: peer llama2.c run (/bin/false) failed' "$TMP/out" || fail "failing peer not reported"
grep -q 'skipped: peer llama.cpp llama-bench: not given' "$TMP/out" || fail "absent peer not reported"
# the same table and JSON say the load of each point; one repeat: spread "-"
awk '$1 == "shm" { n = split($0, f, "|"); split(f[2], c, " "); if (c[2] != "-") bad = 1;
                   if ($NF !~ /^[0-9]+\.[0-9][0-9]$/) bad = 1 }
     END { exit bad }' "$TMP/out" || fail "a one-repeat row's spread is not '-' or it has no load: $(grep '^shm' "$TMP/out")"
[ "$(grep -c '"load_avg": [0-9]' "$TMP/s.json")" = 4 ] || fail "the JSON's points lack load_avg"

# the figures (gnuplot): throughput as points at the measured batch sizes only,
# an ablation bar that was not measured is named, not drawn as 0, every figure
# names the load average
if command -v gnuplot >/dev/null 2>&1; then
    env -u NA_SOURCE_DIR "$BIN" bench e2e --sweep --links shm --modes offload,offload+wb --batches 1,4 \
        --ctxs 32 --new 4 --reps 1 --llama2c-run /bin/false --json "$TMP/p.json" > "$TMP/pout" 2> "$TMP/perr" ||
        fail "plotted sweep failed: $(tail -n 5 "$TMP/perr")"
    G=$TMP/p-throughput.gp
    grep -q "with points" "$G" && ! grep -q "linespoints\|with lines" "$G" ||
        fail "throughput: lines drawn between batch sizes: $(grep plot "$G")"
    grep -q "^set xtics (1, 4)" "$G" || fail "throughput: x tics not at the measured batches: $(grep xtics "$G")"
    grep -q '^"shm B=4 (not measured: +wb+pipe, +wb+pipe+xcache)" 1 [0-9.e+-]* ? ?$' "$TMP/p-ablation.dat" ||
        fail "ablation: unmeasured variants not marked: $(cat "$TMP/p-ablation.dat")"
    for g in "$TMP"/p-*.gp; do
        grep -q "load average (1 min) while measured: [0-9.]* to [0-9.]*" "$g" || fail "$g names no load average"
    done
    [ -s "$TMP/p-throughput.png" ] && [ -s "$TMP/p-ablation.png" ] || fail "no PNGs: $(cat "$TMP/pout")"
    grep -q "warning" "$TMP/pout" && fail "gnuplot warned: $(grep warning "$TMP/pout")"
fi
"$BIN" bench e2e --sweep --links nosuchlink > /dev/null 2>&1
[ $? = 2 ] || fail "an unknown link is not a usage error"
"$BIN" bench e2e --sweep --batches 0 > /dev/null 2>&1
[ $? = 2 ] || fail "batch 0 is not a usage error"
# a list longer than the sweep takes (16) is refused, not cut short
"$BIN" bench e2e --sweep --ctxs 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17 > /dev/null 2>&1
[ $? = 2 ] || fail "17 contexts are not a usage error (the 17th was dropped)"
"$BIN" bench e2e --sweep --links shm,shm,shm,shm,shm,shm,shm,shm,shm,shm,shm,shm,shm,shm,shm,shm,shm,shm,shm,shm > /dev/null 2>&1
[ $? = 2 ] || fail "20 links are not a usage error (past the list's room, they were dropped)"
[ "$FAILS" = 0 ] && echo "ok: sweep"
[ "$FAILS" = 0 ]
