#!/bin/sh
# tests/cli/test_bench_kernels.sh — `nearattn bench kernels --part attn --quick`
# runs and prints the in-cache kernel rows (t=1 and t=2) and the TARGET attn
# roof row beside its reference (min of copy and the in-cache kernel at the
# same threads), and the load average line; no timing is checked.
set -u
BIN=${NA_BIN:?NA_BIN is not set}
OUT=$("$BIN" bench kernels --part attn --quick --threads 2 2>&1) || { echo "FAIL: exit $?: $OUT"; exit 1; }
FAILS=0
echo "$OUT" | grep -q "ctx=128 t=1 KV in cache" || { echo "FAIL: no in-cache row"; FAILS=1; }
echo "$OUT" | grep -q "ctx=128 t=2 KV in cache" || { echo "FAIL: no t=2 in-cache row"; FAILS=1; }
echo "$OUT" | grep -q "ctx=8K TARGET attn roof t=2 .*min(copy t=2, in-cache kernel t=2)" ||
    { echo "FAIL: no roof row: $OUT"; FAILS=1; }
# every report says the load it was measured under
echo "$OUT" | grep -q "^load average (1 min, /proc/loadavg): [0-9.]* at the start, [0-9.]* at the end" ||
    { echo "FAIL: no load average line: $OUT"; FAILS=1; }
[ $FAILS = 0 ] && echo "test_bench_kernels: ok"
exit $FAILS
