#!/bin/sh
# tests/cluster/test_node.sh CLIENT SCENARIO [PORT]
# Storage nodes started by `nearattn node` / `nearattn launch` / mpirun, served
# to tests/cluster/node_client.c (CLIENT). s0's, s1's and an extra node's ports
# are picked free at run time (na_free_port, tests/cluster/proc.sh), so that
# overlapping runs never collide; PORT is accepted and ignored (older callers).
#   basic      s0 (head partition over 2 slots) and s1: attention checked against
#              the ref kernels (f32 and f16 on the wire); SIGTERM -> clean exit
#   request    the same with request partition
#   launch     `nearattn launch` of the layout; SIGTERM -> every node exits 0;
#              a node that fails (port taken) is named and launch exits non-zero
#   mpirun     `mpirun -n 3 nearattn node --config F` (ranks from the environment),
#              and `nearattn launch --mpirun` stopped by SIGTERM
#   kill       kill -9 of a client holding a request: the node frees it (peer
#              lost) and serves the next client
#   kill-shm   the same over tls shm (errmode cm: posix/sysv shared memory, no
#              UCX peer-failure handling; docs/transport.md)
#   secret     a client with a wrong secret is refused; the node keeps serving
#   garbage    a malformed message drops that connection only
#   heartbeat  a silent client is dropped after peer_timeout_ms
#   tier       kv.tier dram: `nearattn node` creates no SSD file (kv.dat) and
#              reports no SSD tier; and the node answers STATS/ECHO while a
#              large batch computes (node_client --scenario busy); its
#              node.decode_ns is at most the busy client's life
#   flood      a client that sends decode batches without reading answers is
#              dropped past `node --max-batches` with the reason; node serves on
#   refuse     a request past the SSD budget is refused with a reason, others run
#   late       a compute node's directory (compute-node/storage_dir.h) picks up
#              s1 started by hand later, and an extra node once it is added to
#              the layout file; the extra node also serves a client directly
# Exit 0 pass, 1 fail, 77 skipped. NA_TEST_KEEP=DIR keeps a copy of the logs.
set -u
CLIENT=$1
SCEN=$2
. "$(dirname "$0")/proc.sh"
na_test_init na_node_test
NA_LOGS="*.log logs/*.log" NA_TAIL=40     # what fail shows
PORT0=$(na_free_port) && PORT1=$(na_free_port "$PORT0") && PORT2=$(na_free_port "$PORT0" "$PORT1") ||
    { echo "FAIL: no free TCP port found"; exit 1; }
[ -f "$SHARED/models/stories260K.bin" ] || { echo "SKIPPED: no $SHARED/models/stories260K.bin"; exit 77; }
node() {        # NAME [ARGS...]: start a storage node and wait for READY
    nm=$1
    shift
    na_start "$nm" "$BIN" node --config "$DIR/layout.yaml" --name "$nm" "$@"
    na_wait_line "$DIR/$nm.log" "^READY" 15 || fail "node $nm did not start"
}
term_ok() {     # NAME WHAT: SIGTERM to PID_NAME, which must exit 0
    eval "p=\$PID_$1"
    kill -TERM "$p"
    wait "$p"
    rc=$?
    [ "$rc" -eq 0 ] || fail "$2 exited $rc after SIGTERM"
}
stop_node() {   # NAME: SIGTERM, must exit 0 with a clean stop
    term_ok "$1" "node $1"
    grep -q "stopped cleanly" "$DIR/$1.log" || fail "node $1 did not stop cleanly"
}
client() {      # LOGNAME ARGS...: run the client to completion, require exit 0
    name=$1
    shift
    na_spawn "$DIR/$name.log" timeout $((60 * NA_TS)) "$CLIENT" --config "$DIR/layout.yaml" --name "$name" "$@"
    wait "$NA_PID"     # interruptible (a foreground run would defer the traps)
    rc=$?
    [ "$rc" -eq 0 ] || fail "client $name ($*) exited $rc"
}
holder() {      # NODE: a client holding one request on NODE (pid in PID_holder)
    na_start holder "$CLIENT" --config "$DIR/layout.yaml" --name holder --node "$1" --scenario hold
    na_wait_line "$DIR/holder.log" "^HELD" 20 || fail "holder did not open its request"
}
serves_then_stops() {   # NODE: a fresh client is served by NODE, then stop_node NODE
    client cl_a --node "$1" --scenario basic --requests 2 --steps 2
    stop_node "$1"
}
stat() {        # NODE KEY -> value on stdout
    timeout $((30 * NA_TS)) "$CLIENT" --config "$DIR/layout.yaml" --name stat --node "$1" --scenario stat \
        --stat "$2" 2>>"$DIR/stat.log" | sed -n "s/^STAT $2 //p"
}

case "$SCEN" in
basic|request)
    [ "$SCEN" = basic ] && na_node_layout head || na_node_layout request
    node s0
    node s1
    client cl_a --node s0 --scenario basic --requests 3 --steps 4
    client cl_b --node s0 --scenario basic --requests 5 --steps 3 --dtype f16 --seed 11
    client cl_c --node s1 --scenario basic --requests 2 --steps 3
    [ "$(stat s0 node.requests)" = 0 ] || fail "s0 still holds requests"
    # batches split over messages flagged MORE were computed part by part
    [ "$(stat s0 node.decode_parts_early)" -gt 0 ] || fail "s0 never started a part early"
    stop_node s0
    stop_node s1
    ;;
launch)
    na_node_layout head
    mkdir -p "$DIR/logs"
    na_start launch "$BIN" launch "$DIR/layout.yaml" --log-dir "$DIR/logs"
    na_wait_line "$DIR/logs/s0.log" "^READY" 15 || fail "launch: s0 not ready"
    na_wait_line "$DIR/logs/s1.log" "^READY" 15 || fail "launch: s1 not ready"
    na_wait_line "$DIR/logs/c0.log" "^READY" 15 || fail "launch: c0 not started"
    client cl_a --node s1 --scenario basic --requests 2 --steps 2
    term_ok launch launch
    for nd in s0 s1; do
        grep -q "stopped cleanly" "$DIR/logs/$nd.log" || fail "launch: $nd did not stop cleanly"
    done
    # a node that cannot start (its port is taken) is named, the rest stopped
    node s1
    na_spawn "$DIR/launch2.log" "$BIN" launch "$DIR/layout.yaml" --log-dir "$DIR/logs2"
    wait "$NA_PID"
    rc=$?
    [ "$rc" -ne 0 ] || fail "launch with s1's port taken exited 0"
    grep -q "node s1 failed" "$DIR/launch2.log" || fail "launch did not name the failed node"
    stop_node s1
    "$BIN" launch "$DIR/layout.yaml" --dry-run --mpirun --log-dir "$DIR/logs3" >"$DIR/dry.log" 2>&1 \
        || fail "launch --dry-run --mpirun failed"
    grep -q "^127.0.0.1 slots=3" "$DIR/dry.log" || fail "dry run: no host file line"
    grep -q "mpirun.*--hostfile.*--name c0 : -n 1 --host 127.0.0.1:3 .*--name s0 :" "$DIR/dry.log" \
        || fail "dry run: no mpirun command"
    [ ! -e "$DIR/logs3" ] || fail "launch --dry-run --mpirun created its log directory"
    "$BIN" launch "$DIR/layout.yaml" --dry-run --log-dir "$DIR/logs4" >"$DIR/dry4.log" 2>&1 \
        || fail "launch --dry-run failed"
    grep -q "node --config .* --name s0 > $DIR/logs4/s0.log" "$DIR/dry4.log" \
        || fail "dry run: no node command"
    [ ! -e "$DIR/logs4" ] || fail "launch --dry-run created its log directory"
    ;;
mpirun)
    command -v mpirun >/dev/null 2>&1 || { echo "SKIPPED: no mpirun"; exit 77; }
    na_node_layout head
    na_start mpi mpirun -n 3 --allow-run-as-root --oversubscribe "$BIN" node --config "$DIR/layout.yaml"
    na_wait_line "$DIR/mpi.log" "^READY s0 " 30 || fail "mpirun: s0 not ready"
    na_wait_line "$DIR/mpi.log" "^READY s1 " 30 || fail "mpirun: s1 not ready"
    grep -q "rank 1 from OMPI_COMM_WORLD_RANK\|rank 1 from PMIX_RANK" "$DIR/mpi.log" \
        || fail "mpirun: rank not taken from the environment"
    client cl_a --node s0 --scenario basic --requests 2 --steps 2
    client cl_b --node s1 --scenario basic --requests 2 --steps 2
    # SIGTERM to the ranks themselves (mpirun's children): each stops cleanly,
    # exits 0, and mpirun then ends 0
    ranks=$(pgrep -P "$PID_mpi")
    [ -n "$ranks" ] || fail "mpirun: no rank processes found"
    kill -TERM $ranks
    wait "$PID_mpi"
    rc=$?
    for nd in s0 s1; do
        grep -q "node $nd: stopped cleanly" "$DIR/mpi.log" || fail "mpirun: $nd did not stop cleanly"
    done
    [ "$rc" -eq 0 ] || fail "mpirun exited $rc after its ranks were stopped"
    # `nearattn launch --mpirun`: SIGTERM to the launcher -> SIGUSR1 through mpirun
    # -> every rank stops cleanly -> launch exits 0
    na_start launchmpi "$BIN" launch "$DIR/layout.yaml" --mpirun --log-dir "$DIR/lm"
    na_wait_line "$DIR/launchmpi.log" "^READY s0 " 30 || fail "launch --mpirun: s0 not ready"
    na_wait_line "$DIR/launchmpi.log" "^READY s1 " 30 || fail "launch --mpirun: s1 not ready"
    client cl_c --node s1 --scenario basic --requests 2 --steps 2
    term_ok launchmpi "launch --mpirun"
    grep -q "node s0: stopped cleanly" "$DIR/launchmpi.log" || fail "launch --mpirun: s0 not clean"

    ;;
kill|kill-shm)
    [ "$SCEN" = kill-shm ] && TLS=shm
    na_node_layout head
    grep -q "tls: ${TLS:-auto}" "$DIR/layout.yaml" || fail "layout does not use tls ${TLS:-auto}"
    node s0
    holder s0
    [ "$(stat s0 node.requests)" = 1 ] || fail "s0 does not hold the request"
    kill -9 "$PID_holder"
    na_wait_line "$DIR/s0.log" "peer holder lost" 10 || fail "s0 did not report the lost peer"
    grep -q "freed its 1 request" "$DIR/s0.log" || fail "s0 did not free the request"
    [ "$(stat s0 node.requests)" = 0 ] || fail "s0 still holds the killed client's request"
    serves_then_stops s0
    ;;
tier)
    na_node_layout request
    # kv.tier dram and room for the busy client's 16384-token requests
    sed -i -e 's|prefetch_layers: 1 }|prefetch_layers: 1, tier: dram }|' \
        -e 's|dram_mb: 8, ssd_mb: 32|dram_mb: 256, ssd_mb: 32|' "$DIR/layout.yaml"
    grep -q "tier: dram" "$DIR/layout.yaml" || fail "layout has no kv.tier dram"
    node s0
    t0=$(date +%s%N)
    client cl_busy --node s0 --scenario busy --requests 16
    t_ns=$(( $(date +%s%N) - t0 ))
    grep "^BUSY" "$DIR/cl_busy.log"
    # node.decode_ns is time with decode work: never more than the client's
    # whole life (a part handled while batches compute is counted once)
    dns=$(stat s0 node.decode_ns)
    [ -n "$dns" ] && [ "$dns" -gt 0 ] && [ "$dns" -le "$t_ns" ] ||
        fail "node.decode_ns $dns ns, the busy client lived $t_ns ns"
    for d in s0d0 s0d1; do
        [ ! -e "$DIR/kv/$d/kv.dat" ] || fail "kv.tier dram: $d/kv.dat was created"
    done
    [ "$(stat s0 ssd_size)" = 0 ] || fail "kv.tier dram: a slot has an SSD tier"
    stop_node s0
    # the control: the default tier makes the SSD file (a fresh log to wait on)
    na_node_layout request
    na_start s0b "$BIN" node --config "$DIR/layout.yaml" --name s0
    na_wait_line "$DIR/s0b.log" "^READY" 15 || fail "node s0 (default tier) did not start"
    [ -e "$DIR/kv/s0d0/kv.dat" ] || fail "default tier: no s0d0/kv.dat"
    stop_node s0b
    ;;
flood)
    # a peer that sends decode batches without reading the answers: past
    # --max-batches it is dropped with the reason; the node serves on
    na_node_layout request
    sed -i -e 's|prefetch_layers: 1 }|prefetch_layers: 1, tier: dram }|' \
        -e 's|dram_mb: 8, ssd_mb: 32|dram_mb: 256, ssd_mb: 32|' "$DIR/layout.yaml"
    node s0 --max-batches 2
    client cl_flood --node s0 --scenario flood --requests 16 --steps 12
    grep -q "^DROPPED.*decode batches computing" "$DIR/cl_flood.log" ||
        fail "flood: not dropped with the reason: $(grep DROPPED "$DIR/cl_flood.log")"
    grep -q "dropping peer cl_flood.*--max-batches" "$DIR/s0.log" || fail "flood: s0 did not log it"
    grep "^DROPPED" "$DIR/cl_flood.log"
    serves_then_stops s0
    ;;
secret)
    na_node_layout head
    node s0
    printf 'not-the-cluster-secret-0123456789abcdef\n' >"$DIR/wrong.secret"
    client bad --node s0 --scenario secret --secret-file "$DIR/wrong.secret"
    grep -q "REFUSED" "$DIR/bad.log" || fail "wrong secret not refused"
    serves_then_stops s0
    ;;
garbage)
    na_node_layout head
    node s0
    holder s0
    for v in 0 1 2 3; do
        client bad$v --node s0 --scenario garbage$v
        grep -q "dropping peer bad$v" "$DIR/s0.log" || fail "s0 did not drop the garbage$v peer"
    done
    [ "$(stat s0 node.requests)" = 1 ] || fail "the other client's request was touched"
    serves_then_stops s0
    ;;
heartbeat)
    na_node_layout head
    node s0
    client quiet --node s0 --scenario idle
    grep -q "peer quiet lost (silent for" "$DIR/s0.log" || fail "s0 did not drop the silent peer"
    serves_then_stops s0
    ;;
refuse)
    na_node_layout head
    node s1
    holder s1
    client cl_a --node s1 --scenario refuse --requests 2 --steps 2
    grep -q "^REFUSED .*refused request" "$DIR/cl_a.log" || fail "no refusal reason"
    [ "$(stat s1 node.requests)" = 1 ] || fail "the holder's request was touched"
    stop_node s1
    ;;
late)
    na_node_layout head
    node s0
    # a compute node's directory (compute-node/storage_dir.h) sees s0 only
    na_start disc "$CLIENT" --config "$DIR/layout.yaml" --name disc --scenario discover --expect 3
    na_wait_line "$DIR/disc.log" "^CONNECTED s0" 20 || fail "discover: s0 not used"
    node s1                                   # listed in the layout, started by hand later
    na_wait_line "$DIR/disc.log" "^CONNECTED s1" 20 || fail "discover: late s1 not used"
    # an extra node not in the layout, then added to the layout file
    node s9 --listen "127.0.0.1:$PORT2" --kv-dir "$DIR/kv/s9" --ssd-mb 16 --dram-mb 8 \
        --shape 5:8:4:8                       # stories260K's shape, no model file needed
    client cl_c --connect "127.0.0.1:$PORT2" --scenario basic --requests 2 --steps 2
    awk -v p="$PORT2" -v kv="$DIR/kv/s9x" '/^#EXTRA/ {
            print "  - name: s9"; print "    host: 127.0.0.1"; print "    port: " p
            print "    devices:"; print "      - { path: \"" kv "\", dram_mb: 8, ssd_mb: 16 }"
            next } { print }' "$DIR/layout.yaml" >"$DIR/layout.new"
    mv "$DIR/layout.new" "$DIR/layout.yaml"
    na_wait_line "$DIR/disc.log" "^CONNECTED s9" 20 || fail "discover: s9 added to the layout not used"
    wait "$PID_disc"
    rc=$?
    [ "$rc" -eq 0 ] || fail "discover client exited $rc"
    stop_node s9
    stop_node s1
    stop_node s0
    ;;
*)
    echo "unknown scenario $SCEN"
    exit 2
    ;;
esac
echo "PASS $SCEN"
exit 0
