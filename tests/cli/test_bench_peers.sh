#!/bin/sh
# tests/cli/test_bench_peers.sh — `nearattn bench e2e --peers --quick`: rows
# for every dtype asked, an absent peer noted as skipped, a failing peer noted
# as failed (the rows stay), a non-executable peer and bad lists are usage
# errors. No timing is checked.
set -u
. "$(dirname "$0")/lib.sh"
na_cli_init nearattn-peers-test

TMPDIR=$TMP "$BIN" bench e2e --peers --quick --dtypes f16,q8_0 --threads-list 1 \
    --json "$TMP/p.json" > "$TMP/out" 2> "$TMP/err"
[ $? = 0 ] || fail "exit $?: $(tail -n 5 "$TMP/err")"
for r in "decode b=1 15M f16 t=1" "prompt 15M f16 t=1" "decode b=1 15M q8_0 t=1" "prompt 15M q8_0 t=1" \
         "decode weight read 15M q8_0 t=1"; do
    grep -q "^$r" "$TMP/out" || fail "no row '$r'"
done
grep "^decode weight read 15M f16 t=1" "$TMP/out" | grep -q "read t=1 (in-run)" ||
    fail "decode weight bytes x tok/s not beside the in-run read bandwidth"
grep "^copy t=1 (in-run, read + write bytes)" "$TMP/out" | grep -q "GB/s" ||
    fail "no in-run copy bandwidth row"
grep -q "^decode b=1 15M f16 t=1 (tg128)" "$TMP/out" || fail "the decode rows are not tg128 by default"
grep -q "skipped: peer llama.cpp llama-bench: not given" "$TMP/out" || fail "absent peer not noted"
[ -s "$TMP/p.json" ] || fail "no JSON"
ls "$TMP" | grep -q nearattn-peers- && fail "temporary directory left behind"

TMPDIR=$TMP "$BIN" bench e2e --peers --quick --dtypes f32 --threads-list 1 --llama-bench /bin/false \
    > "$TMP/out2" 2> "$TMP/err2"
[ $? = 0 ] || fail "failing peer: exit $?"
grep -q "llama-bench failed 1 of 1 runs" "$TMP/out2" || fail "failing peer not noted"

TMPDIR=$TMP "$BIN" bench e2e --peers --quick --dtypes f32 --threads-list 1 --tg 16 \
    > "$TMP/out3" 2> "$TMP/err3"
[ $? = 0 ] || fail "--tg 16: exit $?"
grep -q "^decode b=1 15M f32 t=1 (tg16)" "$TMP/out3" || fail "--tg 16 does not give a tg16 row"
usage_err "bench e2e --peers: --tg expects a whole number" bench e2e --peers --tg 0
# more thread counts than the rows take are refused, not cut short
usage_err "--threads-list expects a list like 1,2,4 \(each 1\.\.256, at most 4\)" \
    bench e2e --peers --threads-list 1,2,3,4,5

usage_err "--llama-bench .*/none: No such file" bench e2e --peers --llama-bench "$TMP/none"
usage_err "--dtypes expects f32, f16, bf16, q8_0" bench e2e --peers --dtypes q4
usage_err "--shapes expects 15m and/or 110m" bench e2e --peers --shapes 7b

[ $FAILS = 0 ] && echo "test_bench_peers: ok"
exit $((FAILS > 0))
