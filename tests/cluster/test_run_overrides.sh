#!/bin/sh
# tests/cluster/test_run_overrides.sh SCENARIO
# `nearattn run` options that change the model or the KV type reach the
# storage nodes run starts (cluster/setup.h), and a running cluster that
# cannot follow them refuses them before generating.
#   model   the layout names stories260K (5 layers, 8/4 heads); run --model a
#           generated model of another shape (2 layers, 4/2 heads, head_dim
#           16): --cluster start (nodes get --shape), the kv-fetch baseline,
#           inproc, and rotational pipelining (the compute replica run starts
#           gets --model) give the monolithic text; --cluster connect to nodes
#           of the layout's model is refused with a reason, nothing generated;
#           connect with a model of the layout's shape (other weights) runs;
#           connect to running compute replicas with another model is refused
#   kvdtype run --kv-dtype f32 (layout: f16): start and inproc give the
#           monolithic --kv-dtype f32 text and the nodes say "kv f32"; without
#           the option they say "kv f16"; kv-fetch with --kv-dtype f32 as
#           well; connect to f16 nodes with --kv-dtype
#           f32 is refused with a reason, with --kv-dtype f16 it runs
#   bf16    bf16 KV: run --kv-dtype bf16 (start, inproc, kv-fetch) and a
#           layout saying bf16 (nodes from `nearattn launch`, connect) give
#           the monolithic --kv-dtype bf16 text (the same rounding everywhere;
#           bf16 itself is checked against f32 in tests/unit/test_kernels.c)
# Exit 0 pass, 1 fail, 77 skipped.
set -u
SCEN=$1
. "$(dirname "$0")/proc.sh"
na_cluster_test na_overrides_test 4 "*.err logs/*.log nearattn-run-*.log"

# layout NAME [rotational|fixed [KV_DTYPE]]: two storage nodes (request
# partition) serving stories260K, KV_DTYPE (f16) KV; rotational: a second
# compute node (replica) as well
layout() {
    f="$DIR/$1.yaml"
    {
        na_layout_head "$1" ", kv_dtype: ${3:-f16}" "timeout_ms: 5000, heartbeat_ms: 200, peer_timeout_ms: 2000"
        echo "compute:"
        if [ "${2:-}" = rotational ]; then
            echo "  - { name: c0, host: 127.0.0.1, port: $((PORT + 2)) }"
            echo "  - { name: c1, host: 127.0.0.1, port: $((PORT + 3)) }"
        else
            echo "  - { name: c0, host: 127.0.0.1 }"
        fi
        echo "storage:"
        for i in 0 1; do
            echo "  - name: s$i"
            echo "    host: 127.0.0.1"
            echo "    port: $((PORT + i))"
            echo "    devices:"
            echo "      - { path: \"$DIR/kv/$1/s$i\", dram_mb: 32, ssd_mb: 64 }"
        done
        echo "parallel: { partition: request, batches_in_flight: 2, pipelining: ${2:-fixed} }"
    } > "$f"
    echo "$f"
}
printf 'Once upon a time\nThe cat sat\nLily and Tom went to the park\nA big red ball\n' > "$DIR/prompts.txt"

# launch NAME LAYOUT [N GLOB]: `nearattn launch` of the layout's nodes (the
# layout's model), waited for until N of the logs GLOB (2, s*.log: the storage
# nodes) say READY; pid in LP
launch() {
    mkdir -p "$DIR/logs"
    na_bg "$DIR/$1.launch" "$DIR/$1.launch" "$BIN" launch "$2" --log-dir "$DIR/logs"
    LP=$NA_PID
    na_wait_count 30 "${3:-2}" READY "logs/${4:-s*.log}" || fail "$1: launched nodes not ready"
}
# refused NAME WHAT PATTERN ARGS...: `run ARGS` exits 1 with PATTERN on stderr, no text
refused() {
    _rn=$1
    _rw=$2
    _rp=$3
    shift 3
    na_fg "$DIR/$_rn.off" "$DIR/$_rn.err" timeout $((60 * NA_TS)) "$BIN" run "$@" \
        --prompts "$DIR/prompts.txt" -n 8 --temp 0 --threads 1
    rc=$?
    [ $rc -eq 1 ] || fail "$_rn: $_rw: exit $rc, expected 1"
    grep -q "$_rp" "$DIR/$_rn.err" || fail "$_rn: $_rw: no clear reason ('$_rp')"
    [ -s "$DIR/$_rn.off" ] && fail "$_rn: $_rw: text generated before the refusal"
    echo "ok: $_rn: $_rw refused: $(grep "$_rp" "$DIR/$_rn.err" | head -1)"
}

case "$SCEN" in
model)
    "$BIN" gen-model --out "$DIR/g" --dim 64 --hidden 96 --layers 2 --heads 4 --kv-heads 2 \
        --vocab 300 --seq-len 128 --format llama2c --quiet || fail "gen-model failed"
    L=$(layout gm)
    na_vs_mono gmstart offload "$DIR/g.bin" "$DIR/g.tok.bin" 24 --config "$L" --cluster start \
        --model "$DIR/g.bin" --tokenizer "$DIR/g.tok.bin"
    grep -q "2 layers, 4/2 heads, head_dim 16" "$DIR"/nearattn-run-gm-s0-*.log ||
        fail "gmstart: node s0 not sized for the generated model"
    echo "ok: start with --model of another shape"
    na_vs_mono gminproc offload "$DIR/g.bin" "$DIR/g.tok.bin" 24 --config "$L" --cluster inproc \
        --model "$DIR/g.bin" --tokenizer "$DIR/g.tok.bin"
    echo "ok: inproc with --model of another shape"
    na_vs_mono gmkvf kv-fetch "$DIR/g.bin" "$DIR/g.tok.bin" 24 --config "$L" --cluster start \
        --mode kv-fetch --model "$DIR/g.bin" --tokenizer "$DIR/g.tok.bin"
    echo "ok: kv-fetch with --model of another shape"
    R=$(layout gmrot rotational)
    na_vs_mono gmrot offload "$DIR/g.bin" "$DIR/g.tok.bin" 24 --config "$R" --cluster start \
        --model "$DIR/g.bin" --tokenizer "$DIR/g.tok.bin"
    grep -q "^rotational: 2 compute replicas" "$DIR/gmrot.err" || fail "gmrot: no compute replica"
    echo "ok: rotational with --model of another shape"
    launch gm "$L"
    refused gmconnect "--model of another shape" "holds KV for its model" --config "$L" \
        --cluster connect --model "$DIR/g.bin" --tokenizer "$DIR/g.tok.bin"
    # the layout's own model still runs against them, and so does another
    # model of its shape (the nodes hold KV, not weights)
    na_vs_mono gmsame offload "$STORIES" "$STOK" 16 --config "$L" --cluster connect
    "$BIN" gen-model --out "$DIR/s" --dim 64 --hidden 96 --layers 5 --heads 8 --kv-heads 4 \
        --vocab 512 --seq-len 256 --format llama2c --quiet || fail "gen-model (same shape) failed"
    na_vs_mono gmshape offload "$DIR/s.bin" "$DIR/s.tok.bin" 16 --config "$L" --cluster connect \
        --model "$DIR/s.bin" --tokenizer "$DIR/s.tok.bin"
    echo "ok: connect with --model of the layout's shape"
    kill -TERM "$LP"; wait "$LP" || fail "launch did not stop cleanly"
    # running compute replicas compute with the layout's weights: another model is refused
    rm -rf "$DIR/logs"
    launch gmrot "$R" 4 '*.log'     # c0 idles, c1 serves as a replica, s0, s1
    refused gmrotconn "--model with running compute replicas" "running compute replicas" \
        --config "$R" --cluster connect --model "$DIR/s.bin" --tokenizer "$DIR/s.tok.bin"
    kill -TERM "$LP"; wait "$LP" || fail "launch did not stop cleanly"
    ;;
kvdtype)
    L=$(layout kd)
    mono_f32() {
        "$BIN" run --mode monolithic --model "$STORIES" --tokenizer "$STOK" --kv-dtype f32 \
            --prompts "$DIR/prompts.txt" -n 200 --temp 0 --threads 1 > "$DIR/$1.mono" \
            2> "$DIR/$1.mono.err" || fail "$1: monolithic f32 run failed"
    }
    mono_f32 f32
    for c in start inproc kvfetch; do
        cl=$c; m=offload
        [ $c = kvfetch ] && { cl=start; m=kv-fetch; }
        na_fg "$DIR/kd$c.off" "$DIR/kd$c.err" timeout $((120 * NA_TS)) "$BIN" run --config "$L" --cluster $cl \
            --mode $m --kv-dtype f32 --prompts "$DIR/prompts.txt" -n 200 --temp 0 --threads 1 ||
            fail "kd$c: offload --kv-dtype f32 failed"
        na_same_sorted "$DIR/f32.mono" "$DIR/kd$c.off" ||
            fail "kd$c: offload --kv-dtype f32 text differs from monolithic f32"
        echo "ok: $c --kv-dtype f32 equals monolithic f32"
    done
    for s in s0 s1; do
        grep -q "kv f32" "$DIR"/nearattn-run-kd-$s-*.log || fail "kdstart: node $s did not use f32 KV"
    done
    rm -f "$DIR"/nearattn-run-kd-*.log
    na_vs_mono kdf16 offload "$STORIES" "$STOK" 200 --config "$L" --cluster start
    grep -q "kv f16" "$DIR"/nearattn-run-kd-s0-*.log || fail "kdf16: node s0 not on the layout's f16"
    if cmp -s "$DIR/f32.mono" "$DIR/kdf16.mono"; then
        echo "note: f16 and f32 KV give the same greedy text here"
    else
        echo "ok: f16 and f32 KV texts differ, and each offload run matched its own"
    fi
    launch kd "$L"
    refused kdconnect "--kv-dtype f32 against f16 nodes" "keeps model.kv_dtype f16" \
        --config "$L" --cluster connect --kv-dtype f32
    na_vs_mono kdconn16 offload "$STORIES" "$STOK" 16 --config "$L" --cluster connect --kv-dtype f16
    kill -TERM "$LP"; wait "$LP" || fail "launch did not stop cleanly"
    ;;
bf16)
    L=$(layout kb)
    "$BIN" run --mode monolithic --model "$STORIES" --tokenizer "$STOK" --kv-dtype bf16 \
        --prompts "$DIR/prompts.txt" -n 100 --temp 0 --threads 1 > "$DIR/bf16.mono" \
        2> "$DIR/bf16.mono.err" || fail "monolithic bf16 run failed"
    grep -q "kv bf16" "$DIR/bf16.mono.err" || fail "monolithic run not on bf16 KV"
    for c in start inproc kvfetch; do
        cl=$c; m=offload
        [ $c = kvfetch ] && { cl=start; m=kv-fetch; }
        rm -f "$DIR"/nearattn-run-kb-*.log
        na_fg "$DIR/kb$c.off" "$DIR/kb$c.err" timeout $((120 * NA_TS)) "$BIN" run --config "$L" --cluster $cl \
            --mode $m --kv-dtype bf16 --prompts "$DIR/prompts.txt" -n 100 --temp 0 --threads 1 ||
            fail "kb$c: --kv-dtype bf16 failed"
        na_same_sorted "$DIR/bf16.mono" "$DIR/kb$c.off" ||
            fail "kb$c: --kv-dtype bf16 text differs from monolithic bf16"
        [ $cl = start ] && { grep -q "kv bf16" "$DIR"/nearattn-run-kb-s0-*.log ||
            fail "kb$c: node s0 not on bf16 KV"; }
        echo "ok: $c --kv-dtype bf16 equals monolithic bf16"
    done
    B=$(layout kbl fixed bf16)
    "$BIN" check-config "$B" > /dev/null || fail "check-config refuses kv_dtype: bf16"
    launch kbl "$B"
    grep -q "kv bf16" "$DIR"/logs/s0*.log || fail "kbl: launched node not on bf16 KV"
    for m in offload kv-fetch; do       # the layout's dtype, named or not
        for kd in "--kv-dtype bf16" ""; do
            na_fg "$DIR/kbl.off" "$DIR/kbl.err" timeout $((120 * NA_TS)) "$BIN" run --config "$B" \
                --cluster connect --mode $m $kd --prompts "$DIR/prompts.txt" -n 100 --temp 0 \
                --threads 1 || fail "kbl: $m $kd: connect to bf16 nodes failed"
            na_same_sorted "$DIR/bf16.mono" "$DIR/kbl.off" || fail "kbl: $m $kd: text differs"
        done
    done
    echo "ok: a bf16 layout over connect (offload, kv-fetch) equals monolithic bf16"
    kill -TERM "$LP"; wait "$LP" || fail "launch did not stop cleanly"
    ;;
*)
    fail "unknown scenario $SCEN"
    ;;
esac
echo "PASS: $SCEN"
