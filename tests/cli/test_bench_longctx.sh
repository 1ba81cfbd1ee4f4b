#!/bin/sh
# tests/cli/test_bench_longctx.sh — `nearattn bench longctx --quick` (a tiny
# model, offload prompts of 256 and 1024 tokens, context 512 in both modes):
# it exits 0, writes the JSON, prints each offload prompt's compute peak RSS
# beside its KV, the spread beside the 10 % limit (and within it: the compute
# process holds no prompt KV), TTFT and decode tok/s offload beside
# monolithic (all > 0) and the load average; usage errors exit 2. No timing
# is checked.
set -u
. "$(dirname "$0")/lib.sh"
na_cli_init nearattn-lc-test
# the sanitizer build holds freed memory in its quarantine: none here, so
# the peak RSS follows what is live
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0"

TMPDIR=$TMP "$BIN" bench longctx --quick --threads 1 --json "$TMP/lc.json" > "$TMP/out" 2> "$TMP/err"
rc=$?
[ $rc = 0 ] || fail "bench longctx exit $rc: $(tail -n 20 "$TMP/err")"
[ -s "$TMP/lc.json" ] || fail "no JSON written"
grep -q '"load_avg_start"' "$TMP/lc.json" || fail "no load average in the JSON"
grep -q "^load average" "$TMP/out" || fail "no load average line"
row() { grep "^$1" "$TMP/out" | head -n 1; }
# value of row $1 (the first number after the name)
val() { row "$1" | sed -n "s/^$1 *\([0-9.]*\) .*/\1/p"; }
for n in 256 1024; do
    row "offload compute peak RSS, $n-token prompt" | grep -q "MiB .* the prompt's KV" ||
        fail "no RSS row for $n tokens: $(cat "$TMP/out")"
done
s=$(val "offload compute peak RSS spread, prompts 256..1024")
[ -n "$s" ] || fail "no spread row"
row "offload compute peak RSS spread" | grep -q "limit (flat within 10 %) *10.000" ||
    fail "the spread is not beside its limit: $(row 'offload compute peak RSS spread')"
[ -n "$s" ] && { awk -v s="$s" 'BEGIN { exit !(s < 10) }' || fail "compute RSS spread $s % >= 10 %"; }
for r in "TTFT offload, 512-token prompt" "decode offload at 512 context"; do
    v=$(val "$r")
    [ -n "$v" ] && awk -v v="$v" 'BEGIN { exit !(v > 0) }' || fail "row '$r': '$v'"
    row "$r" | grep -q " monolithic  *[0-9.]*[1-9]" || fail "row '$r' has no monolithic figure"
done
ls "$TMP" | grep -q nearattn-lc- && fail "temporary directory left behind"

# --rss-sizes takes no 0 (there is always a row), --ctx does (no TTFT / decode rows)
usage_err "--rss-sizes expects a list like 1,2,4 \(each 1\.\.1048576, at most 8\)$" \
    bench longctx --rss-sizes 0
usage_err "--ctx expects a list like 1,2,4 \(each 1\.\.1048576, at most 8\), or 0 for none" \
    bench longctx --ctx 8x
usage_err "--ctx expects a list" bench longctx --ctx 1,2,3,4,5,6,7,8,9
usage_err "^nearattn bench longctx: " bench longctx --dim 100 --heads 3

[ $FAILS = 0 ] && echo "test_bench_longctx: ok"
exit $((FAILS > 0))
