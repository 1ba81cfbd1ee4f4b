#!/bin/sh
# tests/cli/test_bench_prefix.sh — `nearattn bench prefix` small (8 requests
# sharing 200 tokens): it exits 0 (the greedy tokens with reuse on and off
# are identical, or it fails), writes the JSON, prefills fewer prompt tokens
# with reuse on (the first prompt whole, then what follows the shared whole
# blocks, 12 x 16 = 192 tokens: 216 + 7 x 24 = 384 of 1728) and says how many a
# node held (7 x 192); usage errors
# exit 2. No timing is checked.
set -u
. "$(dirname "$0")/lib.sh"
na_cli_init nearattn-pfx-test

TMPDIR=$TMP "$BIN" bench prefix --requests 8 --prefix 200 --new 4 --threads 1 \
    --json "$TMP/p.json" > "$TMP/out" 2> "$TMP/err"
rc=$?
[ $rc = 0 ] || fail "bench prefix exit $rc: $(tail -n 20 "$TMP/err")"
[ -s "$TMP/p.json" ] || fail "no JSON written"
row() { grep "^$1" "$TMP/out" | head -n 1; }
row "prompt tokens prefilled on the compute node, reuse on" | grep -q " 384.000 tokens .* 1728.000 " ||
    fail "prefilled tokens: $(row 'prompt tokens prefilled')"
row "prompt tokens a storage node held already" | grep -q " 1344.000 tokens" ||
    fail "held tokens: $(row 'prompt tokens a storage node held')"
row "greedy tokens identical" | grep -q " 1.000 " || fail "tokens differ: $(row 'greedy tokens')"
ls "$TMP" | grep -q nearattn-pfx- && fail "temporary directory left behind"

usage_err "bench prefix: --requests expects a whole number in \[1, 100000\], got '0'" \
    bench prefix --requests 0
usage_err "--prefix expects a whole number" bench prefix --prefix x
usage_err "--new needs a value" bench prefix --new
usage_err "bench prefix: unknown option '--bogus'" bench prefix --bogus

[ $FAILS = 0 ] && echo "test_bench_prefix: ok"
exit $((FAILS > 0))
