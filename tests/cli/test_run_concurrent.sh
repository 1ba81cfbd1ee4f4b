#!/bin/sh
# tests/cli/test_run_concurrent.sh — `nearattn run` runs coexist on one
# machine: two runs of the default layout (cluster-configs/local.yaml,
# --cluster start) started at the same moment both complete with the
# monolithic text (each starts its storage nodes on free ports with a
# private KV directory), and two with --cluster inproc; afterwards no run
# directory and no node is left, and the layout's own KV path was never
# created; each run's nodes have log files of their own (kept with
# NA_KEEP_LOGS=1, removed without it). A run stopped with SIGTERM
# mid-generation exits 143, stops its nodes and removes its directory.
# Exit 0 pass, 1 fail, 77 skipped.
set -u
BIN=${NA_BIN:?NA_BIN must name the nearattn binary}
SRC=${NA_SOURCE_DIR:?}
SHARED=${NA_SHARED_DIR:-$SRC/../shared}
[ -f "$SHARED/models/stories260K.bin" ] || { echo "SKIPPED: no $SHARED/models/stories260K.bin"; exit 77; }
DIR=$(mktemp -d "${TMPDIR:-/tmp}/na_run_conc.XXXXXX")
export TMPDIR="$DIR"               # where each run makes its private directory
export NA_KV_DIR="$DIR/layout-kv"  # the layout's KV path: must stay absent
export NA_SHARED_DIR="$SHARED"
. "$SRC/tests/cluster/proc.sh"
cleanup() {
    na_reap
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE
FAILS=0
fail() {
    echo "FAIL: $*"
    for f in "$DIR"/*.err; do [ -f "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }; done
    FAILS=$((FAILS + 1))
}
# left_behind: run directories or node processes of runs under $DIR
left_behind() {
    ls -d "$DIR"/nearattn-kv-* 2>/dev/null
    pgrep -f -- "--kv-dir $DIR/nearattn-kv-" 2>/dev/null
}

P="Once upon a time"
"$BIN" run --mode monolithic --prompt "$P" -n 64 --temp 0 --threads 1 > "$DIR/mono.out" \
    2> "$DIR/mono.err" || fail "monolithic run failed"

# two runs at the same moment
na_bg "$DIR/a.out" "$DIR/a.err" "$BIN" run --prompt "$P" -n 64 --temp 0 --threads 1
A=$NA_PID
na_bg "$DIR/b.out" "$DIR/b.err" "$BIN" run --prompt "$P" -n 64 --temp 0 --threads 1
B=$NA_PID
wait "$A"; RA=$?
wait "$B"; RB=$?
[ "$RA" = 0 ] || fail "run a exited $RA"
[ "$RB" = 0 ] || fail "run b exited $RB"
cmp -s "$DIR/a.out" "$DIR/b.out" || fail "the two runs printed different text"
cmp -s "$DIR/a.out" "$DIR/mono.out" || fail "run a's text differs from monolithic"
grep -q "^offload (cluster started here)" "$DIR/a.err" || fail "run a: no offload summary"
[ -z "$(left_behind)" ] || fail "left behind: $(left_behind)"
[ -e "$NA_KV_DIR" ] && fail "the layout's KV directory was created"
# each run's nodes log to files of their own (the run's pid in the name)
for s in s0 s1; do
    n=$(ls "$DIR"/nearattn-run-local-$s-*.log 2>/dev/null | wc -l)
    [ "$n" = 2 ] || fail "node $s: $n log file(s) for two runs, expected 2"
    for f in "$DIR"/nearattn-run-local-$s-*.log; do
        [ "$(grep -c "serving on" "$f")" = 1 ] || fail "$f holds the lines of more than one node"
    done
done
echo "ok: two concurrent runs, identical text, own node logs, nothing left behind"

# without NA_KEEP_LOGS a run that went well removes its nodes' logs; one whose
# node died keeps them and names them
rm -f "$DIR"/nearattn-run-*.log
NA_KEEP_LOGS= "$BIN" run --prompt "$P" -n 16 --temp 0 --threads 1 >"$DIR/nolog.out" 2>"$DIR/nolog.err" ||
    fail "run without NA_KEEP_LOGS failed"
n=$(ls "$DIR"/nearattn-run-*.log 2>/dev/null | wc -l)
[ "$n" = 0 ] || fail "a run that went well left $n node log(s) in \$TMPDIR"

# the same with --cluster inproc (each run's slots keep their KV in a private directory)
na_bg "$DIR/ia.out" "$DIR/ia.err" "$BIN" run --cluster inproc --prompt "$P" -n 64 --temp 0 --threads 1
A=$NA_PID
na_bg "$DIR/ib.out" "$DIR/ib.err" "$BIN" run --cluster inproc --prompt "$P" -n 64 --temp 0 --threads 1
B=$NA_PID
wait "$A"; RA=$?
wait "$B"; RB=$?
[ "$RA" = 0 ] && [ "$RB" = 0 ] || fail "inproc runs exited $RA and $RB"
cmp -s "$DIR/ia.out" "$DIR/mono.out" && cmp -s "$DIR/ib.out" "$DIR/mono.out" || \
    fail "inproc runs' text differs from monolithic"
[ -z "$(left_behind)" ] || fail "inproc left behind: $(left_behind)"
[ -e "$NA_KV_DIR" ] && fail "inproc: the layout's KV directory was created"
echo "ok: two concurrent in-process runs"

# SIGTERM mid-generation: nodes stopped, the private directory removed
i=0
while [ $i -lt 64 ]; do echo "Lily and Tom went to the park number $i"; i=$((i + 1)); done \
    > "$DIR/prompts.txt"
na_bg "$DIR/c.out" "$DIR/c.err" "$BIN" run --prompts "$DIR/prompts.txt" -n 400 --batch 1 \
    --temp 0 --threads 1
C=$NA_PID
n=0
until grep -q '^\[1\]' "$DIR/c.out" 2>/dev/null; do
    n=$((n + 1)); [ $n -gt 300 ] && break; sleep 0.1
done
[ -n "$(ls -d "$DIR"/nearattn-kv-* 2>/dev/null)" ] || fail "no private KV directory while running"
kill -TERM "$C"
wait "$C"; RC=$?
[ "$RC" = 143 ] || fail "run stopped by SIGTERM exited $RC (expected 143)"
grep -q "stopped by signal 15" "$DIR/c.err" || fail "no stop message"
[ -z "$(left_behind)" ] || fail "left behind after SIGTERM: $(left_behind)"
echo "ok: SIGTERM stops the nodes and removes the run directory"

[ "$FAILS" = 0 ] && echo PASS
[ "$FAILS" = 0 ]
