#!/bin/sh
# tests/cli/test_rdma_plan.sh — `check-config --plan` ends with this
# machine's RDMA devices (rdma/ibv.c): on a machine without any, the line
# "no RDMA device: UCX uses shm/tcp", and exit 0 (not an error). Needs NA_BIN,
# NA_SOURCE_DIR (set by ctest).
set -u
BIN=${NA_BIN:?NA_BIN is not set}
SRC=${NA_SOURCE_DIR:?NA_SOURCE_DIR is not set}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/nearattn-rdmaplan-XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
printf 'gemv_Bps 2e10\ngemm_flops 9e10\nattn_Bps 1e10\ndisk_Bps 1e9\nlink_Bps 1.25e9\nlink_rtt_s 1e-4\nstep_overhead_s 2e-5\n' \
    > "$TMP/rates"
OUT=$(NA_KV_DIR="$TMP/kv" "$BIN" check-config "$SRC/cluster-configs/local.yaml" --plan \
      --rates "$TMP/rates" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL: check-config --plan exit $rc: $OUT" >&2; exit 1; }
echo "$OUT" | grep -q "^rdma devices (this machine, libibverbs)$" ||
    { echo "FAIL: no rdma section: $OUT" >&2; exit 1; }
if ! ls /sys/class/infiniband/* >/dev/null 2>&1; then
    echo "$OUT" | grep -q "^  no RDMA device: UCX uses shm/tcp$" ||
        { echo "FAIL: no 'no RDMA device' line: $OUT" >&2; exit 1; }
fi
echo "test_rdma_plan: ok"
