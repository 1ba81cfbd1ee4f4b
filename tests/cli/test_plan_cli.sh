#!/bin/sh
# tests/cli/test_plan_cli.sh — `nearattn check-config FILE --plan --rates R`
# (common/plan.c, cli/plan_rates.c): with a rates file the plan is
# deterministic (two runs print the same bytes), covers 9 batch/context rows,
# suggests batches in flight >= 2 (for batches > 1) and >= 1 storage node, and its numbers are
# self-consistent: more link bandwidth never lowers predicted offload tokens/s
# and the kv-fetch bytes grow with the context. A bad rates file fails with
# file:line; --rates measured runs (no figures are checked).
set -u
SRC=${NA_SOURCE_DIR:?NA_SOURCE_DIR is not set}
SHARED=${NA_SHARED_DIR:-$SRC/../shared}
. "$(dirname "$0")/lib.sh"
na_cli_init nearattn-plan
export NA_KV_DIR=$TMP/kv
[ -f "$SHARED/models/stories260K.bin" ] || { echo "SKIPPED: no stories260K.bin"; exit 77; }

cat > "$TMP/l.yaml" <<EOY
cluster: { name: plan, secret_file: "$SRC/cluster-configs/dev.secret" }
model: { path: "$SHARED/models/stories260K.bin" }
compute:
  - { name: c0, host: 127.0.0.1 }
storage:
  - name: s0
    host: 127.0.0.1
    port: 14999
    devices:
      - { path: "$TMP/kv/s0", dram_mb: 64, ssd_mb: 64 }
parallel: { partition: request, batches_in_flight: 2 }
EOY
cat > "$TMP/slow.rates" <<EOR
# a slow link
gemv_Bps 2e10
gemm_flops 9e10
attn_Bps 1e10
disk_Bps 1e9
link_Bps 1.25e8
link_rtt_s 1e-4
step_overhead_s 2e-5
EOR
sed 's/^link_Bps .*/link_Bps 1.25e9/' "$TMP/slow.rates" > "$TMP/fast.rates"

"$BIN" check-config "$TMP/l.yaml" --plan --rates "$TMP/slow.rates" > "$TMP/a" 2>&1 || fail "plan exit $?: $(cat "$TMP/a")"
"$BIN" check-config "$TMP/l.yaml" --plan --rates "$TMP/slow.rates" > "$TMP/b" 2>&1 || fail "second plan failed"
cmp -s "$TMP/a" "$TMP/b" || fail "the plan is not deterministic for a given rates file"
grep -q '^plan (given rates' "$TMP/a" || fail "no plan header: $(cat "$TMP/a")"
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ \|' "$TMP/a")
[ "$rows" = 9 ] || fail "expected 9 plan rows, got $rows"
# columns: B ctx | t_m t_a KB | mono kvf off | bif nodes tok/s
awk -F'|' '/^ +[0-9]+ +[0-9]+ \|/ { split($1, k, " "); split($4, s, " ");
                                    if ((k[1] > 1 && s[1] < 2) || s[2] < 1) bad = 1 }
           END { exit bad }' "$TMP/a" || fail "a suggestion has bif < 2 for a batch > 1, or no storage node"
"$BIN" check-config "$TMP/l.yaml" --plan --rates "$TMP/fast.rates" > "$TMP/c" 2>&1 || fail "fast plan failed"
paste -d'#' "$TMP/a" "$TMP/c" | awk -F'#' '/^ +[0-9]+ +[0-9]+ \|/ {
    split($1, a, "|"); split($2, b, "|"); split(a[3], x, " "); split(b[3], y, " ");
    if (y[3] + 1e-9 < x[3] || y[2] + 1e-9 < x[2]) bad = 1 } END { exit bad }' \
    || fail "more link bandwidth lowered a predicted tokens/s"
# kv-fetch tokens/s falls with the context at a fixed batch (its bytes grow)
awk -F'|' '/^ +1 +512 \|/ { split($3, t, " "); a = t[2] } /^ +1 +8192 \|/ { split($3, t, " "); b = t[2] }
           END { exit !(a > 0 && b > 0 && b < a) }' "$TMP/a" \
    || fail "kv-fetch tokens/s does not fall from context 512 to 8192"
printf 'gemv_Bps 1e10\nbogus_key 3\n' > "$TMP/bad.rates"
"$BIN" check-config "$TMP/l.yaml" --plan --rates "$TMP/bad.rates" > "$TMP/d" 2>&1
[ $? = 1 ] || fail "a bad rates file did not exit 1"
grep -q 'bad.rates:2: unknown key' "$TMP/d" || fail "bad rates: message: $(cat "$TMP/d")"
"$BIN" check-config "$TMP/l.yaml" --plan > "$TMP/e" 2>&1 || fail "measured plan failed: $(cat "$TMP/e")"
grep -q '^plan (measured rates' "$TMP/e" || fail "no measured plan"
[ "$FAILS" = 0 ] && echo "ok: plan"
[ "$FAILS" = 0 ]
