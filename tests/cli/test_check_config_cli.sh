#!/bin/sh
# tests/cli/test_check_config_cli.sh — `nearattn check-config`: exit 0 and a
# plan for the shipped layouts, exit 1 with one "file:line:col: ..." line for
# a bad layout, exit 2 for usage errors (--plan: tests/cli/test_plan_cli.sh);
# loading a layout creates no directory (KV paths are only checked).
set -u
SRC=${NA_SOURCE_DIR:?NA_SOURCE_DIR is not set}
. "$(dirname "$0")/lib.sh"
na_cli_init nearattn-cfgcli
NA_KV_DIR=$TMP/kv
export NA_KV_DIR
CHECKS=0

# run CODE ARGS... : exit status must be CODE
run() {
    code=$1; shift
    CHECKS=$((CHECKS + 1))
    "$BIN" check-config "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
    [ "$rc" = "$code" ] || fail "check-config $*: exit $rc, expected $code; stderr: $(cat "$TMP/err")"
}

for f in "$SRC"/cluster-configs/*.yaml; do
    # local-csd.yaml: CSD slots on this machine need a nearattn built with XRT
    if [ "${f##*/}" = local-csd.yaml ] && ! "$BIN" csd-xclbin --out "$TMP/x.xclbin" >/dev/null 2>&1; then
        run 1 "$f"
        grep -q "engine csd is not built" "$TMP/err" || fail "$f: no 'not built' error: $(cat "$TMP/err")"
        continue
    fi
    run 0 "$f"
    grep -q '^nodes (rank' "$TMP/out" || fail "$f: no node table in the plan"
done
run 0 "$SRC/cluster-configs/local.yaml"
grep -q 'storage  s1' "$TMP/out" || fail "local.yaml: plan lacks storage node s1: $(cat "$TMP/out")"
# loading a layout creates nothing: the nodes make their KV directories when they start
[ -e "$TMP/kv" ] && fail "check-config created $(find "$TMP/kv" | head -3 | tr '\n' ' ')"
CHECKS=$((CHECKS + 1))
# a KV path that cannot be created (under a regular file) is refused, still creating nothing
: > "$TMP/afile"
NA_KV_DIR=$TMP/afile/sub run 1 "$SRC/cluster-configs/local.yaml"
grep -q "KV directory: '.*afile' cannot hold a directory: Not a directory" "$TMP/err" || fail "KV under a file: $(cat "$TMP/err")"
[ -e "$TMP/afile/sub" ] && fail "check-config created under a file"

# the model's shape comes from its header, GGUF too (key_length as head dim)
"$BIN" gen-model --out "$TMP/q3" --arch qwen3 --dim 64 --heads 4 --kv-heads 2 --head-dim 24 \
    --layers 3 >/dev/null 2>&1 || fail "gen-model qwen3"
cp "$SRC/cluster-configs/dev.secret" "$TMP/dev.secret"
sed "s|^  path: .*stories260K.bin\"|  path: \"$TMP/q3.gguf\"|" "$SRC/cluster-configs/local.yaml" \
    > "$TMP/q3.yaml"
run 0 "$TMP/q3.yaml"
grep -q 'qwen3: dim 64, 3 layers, 4 heads, 2 KV heads, head dim 24' "$TMP/out" ||
    fail "GGUF model: no shape in the plan: $(head -5 "$TMP/out")"

run 1 "$SRC/tests/data/config/port-range.yaml"
[ "$(wc -l <"$TMP/err")" = 1 ] || fail "bad layout: stderr is not one line: $(cat "$TMP/err")"
grep -q 'port-range.yaml:7:11: .*out of range' "$TMP/err" || fail "bad layout: message: $(cat "$TMP/err")"

run 1 "$TMP/no-such-layout.yaml"
run 0 --keys
grep -q 'storage\[\]\.devices\[\]\.dram_mb' "$TMP/out" || fail "--keys lacks a device key"
run 2
run 2 --plan "$SRC/cluster-configs/local.yaml" --rates
grep -q 'rates needs' "$TMP/err" || fail "--rates: message: $(cat "$TMP/err")"
run 2 --bogus "$SRC/cluster-configs/local.yaml"
run 2 a.yaml b.yaml
run 0 --help
# the help says what loading does: KV directories are checked, never created
grep -q 'never created' "$TMP/out" && ! grep -q 'are created' "$TMP/out" ||
    fail "--help does not say KV directories are only checked: $(cat "$TMP/out")"

echo "$CHECKS checks, $FAILS failed"
[ "$FAILS" = 0 ]
