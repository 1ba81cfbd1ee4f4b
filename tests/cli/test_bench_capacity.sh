#!/bin/sh
# tests/cli/test_bench_capacity.sh — `nearattn bench capacity --quick` with one
# storage node: it exits 0, writes the JSON and the PNG (when gnuplot is
# there), the compute node's KV bytes per token measured from its RSS are
# within 15 % of the analytic f16 count, the monolithic maximum it ran fits
# the budget, and the offload compute node's RSS at its maximum stays under
# the budget; usage errors exit 2. No timing is checked.
set -u
. "$(dirname "$0")/lib.sh"
na_cli_init nearattn-cap-test

TMPDIR=$TMP "$BIN" bench capacity --quick --nodes 1 --json "$TMP/c.json" > "$TMP/out" 2> "$TMP/err"
rc=$?
[ $rc = 0 ] || fail "bench capacity exit $rc: $(tail -n 20 "$TMP/err")"
[ -s "$TMP/c.json" ] || fail "no JSON written"
if command -v gnuplot > /dev/null; then
    [ -s "$TMP/c-capacity.png" ] || fail "no PNG written"
fi
# ratio column (last) of a row named by its start
ratio() { grep "^$1" "$TMP/out" | head -n 1 | awk '{ r = $NF; sub("%", "", r); print r }'; }
r=$(ratio "monolithic compute-node KV bytes/token")
[ -n "$r" ] && awk -v r="$r" 'BEGIN { exit !(r >= 85 && r <= 115) }' ||
    fail "KV bytes/token not within 15% of analytic: '$r'"
r=$(ratio "monolithic peak RSS at the most requests")
[ -n "$r" ] && awk -v r="$r" 'BEGIN { exit !(r <= 100) }' || fail "monolithic maximum over the budget: '$r'"
r=$(ratio "offload compute peak RSS at the most")
[ -n "$r" ] && awk -v r="$r" 'BEGIN { exit !(r <= 100) }' || fail "offload compute RSS over the budget: '$r'"
grep -q "^offload most concurrent KV tokens, 1 node" "$TMP/out" || fail "no 1-node capacity row"
ls "$TMP" | grep -q nearattn-cap- && fail "temporary directory left behind"

usage_err "bench capacity: --nodes expects a list like 1,2,4 \(each 1\.\.8, at most 8\)$" \
    bench capacity --nodes 0
usage_err "--nodes expects a list" bench capacity --nodes 1,2,3,4,5,6,7,8,1
usage_err "--nodes expects a list" bench capacity --nodes
usage_err "--budget-mb expects a whole number in \[1, 1048576\], got 'x'" bench capacity --budget-mb x

[ $FAILS = 0 ] && echo "test_bench_capacity: ok"
exit $((FAILS > 0))
