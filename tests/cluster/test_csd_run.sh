#!/bin/sh
# tests/cluster/test_csd_run.sh SCENARIO: `nearattn run` with storage slots of
# engine csd (storage-node/attn_csd.c) against real storage-node processes,
# XRT noop + the C model (XILINX_XRT = the build tree's shim root), compared
# with `nearattn run --mode monolithic` and with engine cpu (greedy).
#   match   identical text to monolithic and to engine cpu: stories260K on 2
#           nodes x 2 CSD slots (request partition), 2 nodes x 1 CSD slot with
#           head partition and KV forced to the SSD (spill 1: P2P reads
#           happen, the summary says "XRT noop + C model"), a generated MHA
#           model (head partition over 2 CSD slots of one node) and a GQA one
#           (8/2 heads, KV on SSD), a node with one cpu and one csd slot
#   errors  a node with a cpu slot and a csd slot that cannot run (missing
#           xclbin, malformed xclbin, wrong device index, XILINX_XRT unset,
#           XCL_EMULATION_MODE unset without an FPGA): the node refuses to
#           start, naming the slot and the reason (and, for the environment,
#           how to run the C model: XCL_EMULATION_MODE=noop XILINX_XRT=...),
#           instead of failing the requests placed there mid-run
#   faults  NA_FAULTS csd (test doubles): a corrupted KV page, a run that
#           never completes: errors on the affected requests only
#   bench   `bench storage --engine csd --quick` with the SmartSSD rates file:
#           every figure present, labelled noop / modelled, JSON written;
#           --engine warp refused
# Exit 0 pass, 1 fail, 77 skipped (no XRT, no model).
set -u
SCEN=$1
. "$(dirname "$0")/proc.sh"
na_test_init na_csd_test
export NA_KV_DIR="$DIR/kv"
export TMPDIR="$DIR"
NA_LOGS="*.err nearattn-run-*.log"
[ -f "$SHARED/models/stories260K.bin" ] || { echo "SKIPPED: no $SHARED/models/stories260K.bin"; exit 77; }
[ -n "${NA_XRT_ROOT:-}" ] && [ -d "$NA_XRT_ROOT/lib" ] || { echo "SKIPPED: XRT not built"; exit 77; }
export XILINX_XRT="$NA_XRT_ROOT" XCL_EMULATION_MODE=noop
XCLBIN="$DIR/na_csd.xclbin"
"$BIN" csd-xclbin --out "$XCLBIN" >/dev/null || fail "csd-xclbin failed"
PORT=$(na_free_ports 3) || fail "no free ports"
STORIES="$SHARED/models/stories260K.bin"
STOK="$SHARED/models/tok512.bin"
printf 'Once upon a time\nThe cat sat\nLily and Tom went to the park\nA big red ball\nTim had a dog\nThe sun was hot\n' > "$DIR/prompts.txt"

# layout NAME NODES PARTITION TIER SPILL MODEL TOK "ENGINES" [XCLBIN [DEVICE]]:
# ENGINES is the slots of every node ("csd csd", "cpu csd"); csd slot i has
# device i (or DEVICE) and XCLBIN (default the metadata one)
layout() {
    f="$DIR/$1.yaml"
    xb=${9:-$XCLBIN}
    {
        echo "cluster: { name: $1, secret_file: \"$SRC/cluster-configs/dev.secret\" }"
        echo "model: { path: \"$6\", tokenizer: \"$7\", kv_dtype: f16 }"
        echo "transport: { tls: shm, timeout_ms: 5000, heartbeat_ms: 200, peer_timeout_ms: 2000 }"
        echo "compute:"
        echo "  - { name: c0, host: 127.0.0.1 }"
        echo "storage:"
        i=0
        while [ $i -lt "$2" ]; do
            echo "  - name: s$i"
            echo "    host: 127.0.0.1"
            echo "    port: $((PORT + i))"
            echo "    devices:"
            d=0
            for eng in $8; do
                if [ "$eng" = csd ]; then     # csd keys only on csd slots (refused elsewhere)
                    echo "      - { path: \"$DIR/kv/$1/s$i/d$d\", engine: $eng, dram_mb: 64, ssd_mb: 64,"
                    echo "          csd_device: \"${10:-$d}\", xclbin: \"$xb\" }"
                else
                    echo "      - { path: \"$DIR/kv/$1/s$i/d$d\", engine: $eng, dram_mb: 64, ssd_mb: 64 }"
                fi
                d=$((d + 1))
            done
            i=$((i + 1))
        done
        echo "parallel: { partition: $3, batches_in_flight: 2 }"
        echo "kv: { block_tokens: 16, spill_interval: $5, tier: $4 }"
    } > "$f"
    echo "$f"
}

# csd_vs NAME LAYOUT_CSD LAYOUT_CPU MODEL TOK N: the csd run equals monolithic
# and the same layout with engine cpu; the summary names the noop mode
csd_vs() {
    na_vs_mono "$1" csd "$4" "$5" "$6" --config "$2" --cluster start
    grep -q "^csd: XRT noop + C model" "$DIR/$1.err" || fail "$1: the summary does not say 'csd: XRT noop + C model'"
    na_fg "$DIR/$1.cpu" "$DIR/$1.cpu.err" timeout $((120 * NA_TS)) "$BIN" run --config "$3" --cluster start \
        --prompts "$DIR/prompts.txt" -n "$6" --temp 0 --threads 1 || fail "$1: engine cpu run failed"
    na_same_sorted "$DIR/$1.cpu" "$DIR/$1.off" || fail "$1: engine csd text differs from engine cpu"
    grep -q "^csd:" "$DIR/$1.cpu.err" && fail "$1: engine cpu run reports csd launches"
    echo "ok: $1"
}

# p2p NAME: the KV bytes SSD -> device buffers of the csd summary
p2p() {
    sed -n 's/^csd: .* kernel launches, \([0-9]*\) KV bytes SSD -> device buffers.*/\1/p' "$DIR/$1.err"
}

# broken NAME WHY "ENGINES" [XCLBIN [DEVICE [UNSET]]]: one node with a cpu slot
# and a broken csd slot (UNSET: the environment variable left out), started by
# hand: it exits 1 at start without READY, its error names the slot and WHY
# (checked at start, not when requests fail mid-run); `run --cluster start`
# of the layout fails at start the same way
broken() {
    L=$(layout "$1" 1 request auto 2 "$STORIES" "$STOK" "$3" "${4:-$XCLBIN}" "${5:-}")
    na_fg "$DIR/$1.node.out" "$DIR/$1.node.err" timeout $((30 * NA_TS)) env ${6:+-u $6} "$BIN" node \
        --config "$L" --name s0
    rc=$?
    [ $rc -eq 1 ] || fail "$1: node exited $rc at start, expected 1"
    grep -q READY "$DIR/$1.node.out" && fail "$1: node said READY with a broken csd slot"
    grep -q "slot .*/d1: engine csd, device .*$2" "$DIR/$1.node.err" ||
        fail "$1: the node's error does not name the slot and '$2': $(cat "$DIR/$1.node.err")"
    na_fg "$DIR/$1.off" "$DIR/$1.err" timeout $((60 * NA_TS)) env ${6:+-u $6} "$BIN" run --config "$L" \
        --cluster start --prompts "$DIR/prompts.txt" -n 24 --temp 0 --threads 1
    rc=$?
    [ $rc -ne 0 ] || fail "$1: run with a broken csd slot exited 0"
    [ -s "$DIR/$1.off" ] && fail "$1: the run printed text before failing: $(head -n 2 "$DIR/$1.off")"
    echo "ok: $1 (refused at start: $(grep -o "engine csd.*" "$DIR/$1.node.err" | cut -c1-80)...)"
}

case "$SCEN" in
match)
    L=$(layout req22 2 request auto 2 "$STORIES" "$STOK" "csd csd")
    C=$(layout req22cpu 2 request auto 2 "$STORIES" "$STOK" "cpu cpu")
    csd_vs req22 "$L" "$C" "$STORIES" "$STOK" 40

    L=$(layout headssd 2 head ssd 1 "$STORIES" "$STOK" "csd")
    C=$(layout headssdcpu 2 head ssd 1 "$STORIES" "$STOK" "cpu")
    csd_vs headssd "$L" "$C" "$STORIES" "$STOK" 40
    [ "$(p2p headssd)" -gt 0 ] || fail "headssd: KV forced to SSD, but no SSD -> device read"

    L=$(layout mixed 2 request auto 2 "$STORIES" "$STOK" "cpu csd")
    C=$(layout mixedcpu 2 request auto 2 "$STORIES" "$STOK" "cpu cpu")
    csd_vs mixed "$L" "$C" "$STORIES" "$STOK" 30

    "$BIN" gen-model --out "$DIR/mha" --dim 128 --hidden 256 --layers 2 --heads 2 --kv-heads 2 \
        --vocab 300 --seq-len 128 --format llama2c --quiet || fail "gen-model mha failed"
    L=$(layout mha 1 head auto 2 "$DIR/mha.bin" "$DIR/mha.tok.bin" "csd csd")
    C=$(layout mhacpu 1 head auto 2 "$DIR/mha.bin" "$DIR/mha.tok.bin" "cpu cpu")
    csd_vs mha "$L" "$C" "$DIR/mha.bin" "$DIR/mha.tok.bin" 24

    "$BIN" gen-model --out "$DIR/gqa" --dim 512 --hidden 256 --layers 2 --heads 8 --kv-heads 2 \
        --vocab 300 --seq-len 128 --format llama2c --quiet || fail "gen-model gqa failed"
    L=$(layout gqa 1 request ssd 1 "$DIR/gqa.bin" "$DIR/gqa.tok.bin" "csd")
    C=$(layout gqacpu 1 request ssd 1 "$DIR/gqa.bin" "$DIR/gqa.tok.bin" "cpu")
    csd_vs gqa "$L" "$C" "$DIR/gqa.bin" "$DIR/gqa.tok.bin" 24
    [ "$(p2p gqa)" -gt 0 ] || fail "gqa: KV forced to SSD, but no SSD -> device read"
    ;;
errors)
    "$BIN" run --mode monolithic --model "$STORIES" --tokenizer "$STOK" --prompts "$DIR/prompts.txt" \
        -n 24 --temp 0 --threads 1 > "$DIR/mono.txt" 2>/dev/null || fail "monolithic run failed"
    broken noxclbin "missing.xclbin: No such file" "cpu csd" "$DIR/missing.xclbin"
    printf 'garbage, not an xclbin\n' > "$DIR/bad.xclbin"
    broken badxclbin "not a valid xclbin" "cpu csd" "$DIR/bad.xclbin"
    broken baddev "device 9 not found" "cpu csd" "$XCLBIN" 9
    broken noxrt "XILINX_XRT is not set.*XCL_EMULATION_MODE=noop XILINX_XRT=" "cpu csd" "$XCLBIN" "" \
        XILINX_XRT
    broken nomode "xrtDeviceOpen([0-9]*) failed.*XCL_EMULATION_MODE=noop XILINX_XRT=" "cpu csd" "$XCLBIN" "" \
        XCL_EMULATION_MODE
    ;;
faults)
    "$BIN" run --mode monolithic --model "$STORIES" --tokenizer "$STOK" --prompts "$DIR/prompts.txt" \
        -n 24 --temp 0 --threads 1 > "$DIR/mono.txt" 2>/dev/null || fail "monolithic run failed"
    for f in "corrupt_launch=30:checksum mismatch" "hang_launch=30:did not complete"; do
        spec=${f%%:*}
        why=${f#*:}
        name=${spec%%_*}
        L=$(layout "$name" 1 request auto 2 "$STORIES" "$STOK" "csd")
        NA_FAULTS="csd:$spec" na_fg "$DIR/$name.off" "$DIR/$name.err" timeout $((120 * NA_TS)) "$BIN" run \
            --config "$L" --cluster start --prompts "$DIR/prompts.txt" -n 24 --temp 0 --threads 1
        [ $? -eq 1 ] || fail "$name: run did not exit 1"
        grep -q "request .* failed.*$why" "$DIR/$name.err" || fail "$name: no request failed with '$why'"
        n=$(grep -c "request .* failed" "$DIR/$name.err")
        ok=0
        while IFS= read -r line; do
            grep -qxF "$line" "$DIR/mono.txt" && ok=$((ok + 1))
        done < "$DIR/$name.off"
        echo "ok: $name ($n failed, $ok monolithic lines)"
    done
    ;;
bench)
    na_fg "$DIR/bench.out" "$DIR/bench.err" timeout $((250 * NA_TS)) "$BIN" bench storage --engine csd --quick \
        --rates "$SRC/kernels/csd/smartssd.rates" --dir "$DIR" --json "$DIR/bench.json" ||
        fail "bench storage --engine csd failed"
    for w in "csd launches/s (XRT noop + C model)" "per-launch overhead" \
             "SSD -> device bytes per token" "analytic" "modelled SmartSSD attn" "NOT an FPGA"; do
        grep -qF "$w" "$DIR/bench.out" || fail "bench: no '$w' in the report"
    done
    grep -q "modelled SmartSSD" "$DIR/bench.json" || fail "bench: JSON lacks the modelled line"
    na_fg "$DIR/warp.out" "$DIR/warp.err" "$BIN" bench storage --engine warp
    [ $? -eq 2 ] || fail "bench: --engine warp not refused"
    echo "ok: bench"
    ;;
*)
    echo "unknown scenario $SCEN"; exit 2 ;;
esac
exit 0
