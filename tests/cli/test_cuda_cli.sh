#!/bin/sh
# tests/cli/test_cuda_cli.sh — `nearattn run --backend cuda` in a build with
# CUDA (registered only then). Without a CUDA device (this is what CI and the
# build machines have): one line "nearattn run: no CUDA device: ..." and exit
# 1, for cuda and cuda:N alike; the test then reports skipped (77), as the GPU
# half did not run, and fails if a refusal was wrong. With a device: the greedy text of a generated
# model equals the cpu backend's, and a GPU index that does not exist is
# refused in one line. Bad backend names are refused either way. Needs
# NA_BIN (set by ctest).
set -u
. "$(dirname "$0")/lib.sh"
na_cli_init nearattn-cudacli

# one_line CODE PATTERN ARGS...: exit status CODE, stderr one line matching PATTERN
one_line() {
    code=$1; pat=$2; shift 2
    "$BIN" run --mode monolithic "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
    [ "$rc" -eq "$code" ] || fail "run $*: exit $rc, expected $code ($(cat "$TMP/err"))"
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "run $*: stderr is not one line: $(cat "$TMP/err")"
    grep -Eq "$pat" "$TMP/err" || fail "run $*: stderr '$(cat "$TMP/err")' lacks /$pat/"
}

"$BIN" gen-model --out "$TMP/m" --dim 64 --layers 2 --heads 4 --kv-heads 2 --vocab 300 \
    --seq-len 64 --format llama2c --quiet >/dev/null 2>"$TMP/gen.err" || { cat "$TMP/gen.err" >&2; exit 1; }
MODEL=$TMP/m.bin
ARGS="--model $MODEL -n 12 --temp 0 --prompt hello"

one_line 2 "unknown backend 'gpu'" $ARGS --backend gpu
one_line 1 "device index must be a number" $ARGS --backend cuda:x
# the attention-kernel switch takes tile or warp, nothing else (device or not)
NA_CUDA_ATTN_KERNEL=wrap one_line 1 'NA_CUDA_ATTN_KERNEL is "wrap"; it takes tile' $ARGS --backend cuda
# and the GEMV switch u4, u8 or nb8
NA_CUDA_GEMV=u16 one_line 1 'NA_CUDA_GEMV is "u16"; it takes u4' $ARGS --backend cuda


"$BIN" run --mode monolithic $ARGS --backend cuda >"$TMP/cuda.out" 2>"$TMP/cuda.err" </dev/null
rc=$?
if [ "$rc" -ne 0 ]; then
    # no device: the one clear line, also for an explicit GPU index
    [ "$(wc -l <"$TMP/cuda.err")" -eq 1 ] || fail "no device: stderr: $(cat "$TMP/cuda.err")"
    grep -q "^nearattn run: no CUDA device: " "$TMP/cuda.err" ||
        fail "no device: stderr '$(cat "$TMP/cuda.err")' lacks 'no CUDA device:'"
    one_line 1 "^nearattn run: no CUDA device: " $ARGS --backend cuda:3
    # offload: the layout's compute device cuda (gpu 2) is the default backend
    SRC=${NA_SOURCE_DIR:?NA_SOURCE_DIR is not set}
    sed -e 's|device: cpu, threads: 1|device: cuda, gpu: 2, threads: 1|' \
        -e "s|secret_file: dev.secret|secret_file: $SRC/cluster-configs/dev.secret|" \
        -e "s|path: \"\${NA_KV_DIR[^\"]*/local/|path: \"$TMP/kv/|" \
        "$SRC/cluster-configs/local.yaml" > "$TMP/gpu.yaml"
    grep -q "device: cuda, gpu: 2" "$TMP/gpu.yaml" || fail "layout edit failed"
    one_line 1 "^nearattn run: no CUDA device: " $ARGS --mode offload --config "$TMP/gpu.yaml" \
        --cluster inproc
    "$BIN" bench kernels --backend cuda --quick >"$TMP/out" 2>"$TMP/err"
    rc=$?
    [ "$rc" -eq 1 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] &&
        grep -q "^nearattn bench kernels: no CUDA device: " "$TMP/err" ||
        fail "bench kernels --backend cuda: exit $rc, stderr $(cat "$TMP/err")"
    echo "no CUDA device here: checked the one-line refusal; the cuda = cpu text was not run"
    # the GPU half did not run: report skipped (77), never passed, unless a
    # refusal above was wrong
    [ "$FAILS" -eq 0 ] && exit 77
    exit 1
else
    "$BIN" run --mode monolithic $ARGS --backend cpu >"$TMP/cpu.out" 2>/dev/null </dev/null ||
        fail "cpu run failed"
    cmp -s "$TMP/cuda.out" "$TMP/cpu.out" || fail "cuda text differs from cpu"
    one_line 1 "no CUDA device: gpu 1000 does not exist" $ARGS --backend cuda:1000
    "$BIN" bench kernels --backend cuda --quick --part attn >"$TMP/bench" 2>&1 ||
        fail "bench kernels --backend cuda: $(cat "$TMP/bench")"
    grep -q "cuda attn_decode" "$TMP/bench" || fail "bench kernels: no cuda rows"
fi
[ "$FAILS" -eq 0 ] && echo "test_cuda_cli: ok" && exit 0
exit 1
