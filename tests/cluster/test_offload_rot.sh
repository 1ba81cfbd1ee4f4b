#!/bin/sh
# tests/cluster/test_offload_rot.sh PORT
# Rotational pipelining (compute-node/replica.h, sched.c): `nearattn run` as
# compute replica 0 and a second compute replica (`nearattn node`, started by
# run, or by `nearattn launch`) over real storage-node processes on loopback;
# batch j's slice k runs on replica (j + k) mod 2 and its context migrates
# (BATCH_CTX). Greedy text identical to `nearattn run --mode monolithic` on
# stories260K (cluster-configs/test-2c-rotational.yaml: 3 batches in flight;
# and 2 in flight) and on a generated 3-layer MHA model (2 and 3 in flight);
# sampled text (temperature 0.9, fixed seed) identical to the fixed schedule;
# 3 compute replicas; a replica killed with kill -9 ends the run with a clear
# error.
# PORT..PORT+32 are used (and 13381..13384 by the shipped layout). Exit 0 pass, 1 fail, 77 skipped.
set -u
. "$(dirname "$0")/proc.sh"
na_test_init na_rot_test
export NA_KV_DIR="$DIR/kv"
export NA_SHARED_DIR="$SHARED"
export TMPDIR="$DIR"          # logs of the nodes `run` starts
NA_LOGS="*.err logs/*.log nearattn-run-*.log"     # what fail shows
[ -f "$SHARED/models/stories260K.bin" ] || { echo "SKIPPED: no $SHARED/models/stories260K.bin"; exit 77; }
# PORT from the command line is only a fallback: pick free ports at run time
# so overlapping runs (Release and ASan, two developers) never collide.
PORT=$(na_free_ports 34) || PORT=$1

# layout NAME BIF MODEL TOK BASE [PIPELINING [N_COMPUTE]]: N_COMPUTE (2) compute replicas
# (ports BASE+2, BASE+3, ...), 2 storage
# nodes (BASE, BASE+1), request partition; each case its own ports (a port a
# stopped node listened on may sit in TIME_WAIT for a while)
layout() {
    f="$DIR/$1.yaml"
    b=$5
    {
        echo "cluster: { name: $1, secret_file: \"$SRC/cluster-configs/dev.secret\" }"
        echo "model: { path: \"$3\", tokenizer: \"$4\" }"
        echo "transport: { tls: auto, timeout_ms: 5000, heartbeat_ms: 200, peer_timeout_ms: 2000 }"
        echo "compute:"
        i=0
        while [ $i -lt "${7:-2}" ]; do
            echo "  - { name: c$i, host: 127.0.0.1, port: $((b + 2 + i)) }"
            i=$((i + 1))
        done
        echo "storage:"
        for i in 0 1; do
            echo "  - name: s$i"
            echo "    host: 127.0.0.1"
            echo "    port: $((b + i))"
            echo "    devices:"
            echo "      - { path: \"$DIR/kv/$1/s$i\", dram_mb: 64, ssd_mb: 256 }"
        done
        echo "parallel: { partition: request, batches_in_flight: $2, pipelining: ${6:-rotational} }"
        echo "kv: { block_tokens: 16, spill_interval: 2 }"
    } > "$f"
    echo "$f"
}

STORIES="$SHARED/models/stories260K.bin"
STOK="$SHARED/models/tok512.bin"
printf 'Once upon a time\nThe cat sat\nLily and Tom went to the park\nA big red ball\nTom had a dog\n' > "$DIR/prompts.txt"

# rot_vs_mono NAME LAYOUT MODEL TOK N CLUSTER [REPLICAS]
rot_vs_mono() {
    na_vs_mono "$1" rotational "$3" "$4" "$5" --mode offload --config "$2" --cluster "$6"
    grep -q "^rotational: ${7:-2} compute replicas" "$DIR/$1.err" || fail "$1: no rotational summary"
    grep -q "replicas; 0 batch contexts sent" "$DIR/$1.err" && fail "$1: no batch context migrated"
    grep -q "fixed schedule" "$DIR/$1.err" && fail "$1: fell back to the fixed schedule"
    echo "ok: $1 ($(grep '^rotational' "$DIR/$1.err"))"
}

# the shipped layout (its own ports 13381..13384): stories260K, 3 batches in flight
rot_vs_mono shipped "$SRC/cluster-configs/test-2c-rotational.yaml" "$STORIES" "$STOK" 20 start

L=$(layout st2 2 "$STORIES" "$STOK" "$PORT")
rot_vs_mono st2 "$L" "$STORIES" "$STOK" 20 start

"$BIN" gen-model --out "$DIR/mha" --dim 64 --hidden 128 --layers 3 --heads 4 --kv-heads 4 \
    --vocab 300 --seq-len 128 --format llama2c --quiet || fail "gen-model failed"
L=$(layout mha2 2 "$DIR/mha.bin" "$DIR/mha.tok.bin" $((PORT + 4)))
rot_vs_mono mha2 "$L" "$DIR/mha.bin" "$DIR/mha.tok.bin" 12 start
L=$(layout mha3 3 "$DIR/mha.bin" "$DIR/mha.tok.bin" $((PORT + 8)))
rot_vs_mono mha3 "$L" "$DIR/mha.bin" "$DIR/mha.tok.bin" 12 start

# 3 compute replicas (contexts forwarded through replica 0), 3 in flight
L=$(layout r3 3 "$STORIES" "$STOK" $((PORT + 24)) rotational 3)
rot_vs_mono r3 "$L" "$STORIES" "$STOK" 16 start 3

# sampling (temperature 0.9, fixed seed) stays on replica 0: same text as the fixed schedule
LR=$(layout samp_rot 2 "$STORIES" "$STOK" $((PORT + 16)))
LF=$(layout samp_fix 2 "$STORIES" "$STOK" $((PORT + 20)) fixed)
for l in "$LR" "$LF"; do
    na_fg "$l.raw" "$DIR/samp.err" timeout $((120 * NA_TS)) "$BIN" run --config "$l" --prompts "$DIR/prompts.txt" \
        -n 16 --temp 0.9 --seed 7 --threads 1 || fail "sampled run with $l failed"
    sort "$l.raw" > "$l.out"
done
cmp -s "$LR.out" "$LF.out" || { diff "$LR.out" "$LF.out"; fail "sampled: rotational text differs from fixed"; }
echo "ok: sampled (temperature 0.9) rotational = fixed"

# a compute replica killed with kill -9 mid-generation: the run ends with a
# clear error naming it (exit 1), nothing hangs. 48 prompts: 6 (1382 tokens)
# took 0.5-1 s from "driven by c0" to the end on a loaded machine, and the
# run sometimes ended before the kill
L=$(layout kill1 2 "$STORIES" "$STOK" $((PORT + 29)))
i=1
while [ $i -le 48 ]; do echo "Once upon a time number $i"; i=$((i + 1)); done > "$DIR/long.txt"
na_bg "$DIR/kill1.out" "$DIR/kill1.err" timeout $((60 * NA_TS)) "$BIN" run --config "$L" --prompts "$DIR/long.txt" \
    -n 480 --temp 0 --threads 1
RP=$NA_PID
na_wait_line "$(na_wait_file "$DIR" "nearattn-run-kill1-c1-*.log" 15)" "driven by c0" 15 || fail "kill1: replica c1 never driven"
sleep 0.2
CP=$(pgrep -f "node --config $L --name c1")
[ -n "$CP" ] || fail "kill1: no replica process"
kill -9 $CP
wait "$RP"; rc=$?
[ $rc -eq 0 ] && grep -q "compute replica c1" "$DIR/kill1.err" &&
    fail "kill1: run exited 0 though it names the lost replica c1"
if [ $rc -eq 0 ]; then
    echo "note: kill1: the run ended before the kill reached it (loaded machine); only completion is checked"
else
    [ $rc -eq 1 ] || fail "kill1: run exited $rc (want 1; 124 = hung)"
    grep -q "compute replica c1" "$DIR/kill1.err" || fail "kill1: no message naming the lost replica"
    echo "ok: kill1 (a lost replica ends the run with: $(tail -n 1 "$DIR/kill1.err"))"
fi

# every node from `nearattn launch` (c1 serves as a replica, c0 idles), run --cluster connect
L=$(layout launch3 3 "$STORIES" "$STOK" $((PORT + 12)))
mkdir -p "$DIR/logs"
na_bg "$DIR/launch.out" "$DIR/launch.out" "$BIN" launch "$L" --log-dir "$DIR/logs"
LP=$NA_PID
na_wait_count 30 4 READY 'logs/*.log' || fail "launch: nodes not ready"
rot_vs_mono launch3 "$L" "$STORIES" "$STOK" 16 connect
kill -TERM "$LP"; wait "$LP" || fail "launch did not stop cleanly"
echo "PASS"
