#!/bin/sh
# tests/cluster/test_faults.sh SCENARIO: storage nodes started with NA_FAULTS
# (docs/fault-injection.md) serving `nearattn run --cluster connect`; each
# fault ends in the monolithic text or a per-request failure with a reason,
# within a bounded time (timeout 120), never a hang or a crash.
#   kv      KV on SSD (spill 1); s0 with KV I/O faults: EIO after N
#           operations, short reads, ENOSPC mid-run (at most a few
#           injections); s1 clean. The node log says TEST DOUBLE; every
#           request either prints the monolithic text or "[i] FAILED" with
#           a reason; with one node and unlimited EIO every request fails
#           with a reason and run exits 1
#   xp      s0 with transport faults on what it sends (s1 clean): a corrupted
#           or truncated message (refused by the compute's decoder, s0
#           dropped, its requests re-placed on s1), a dropped one (the
#           ATTN_OUT's deadline, peer_timeout_ms, passes: s0 lost and its
#           requests re-placed, within 6 s, not 6 x timeout_ms), a stall
#           of s0 past peer_timeout_ms, duplicates, a delay on every message;
#           every request ends with the monolithic text or a reason, and the
#           time of each run is printed; then the compute node's own messages
#           corrupted / truncated (the storage node refuses them and drops it),
#           or failing to be sent to s0 from the first request on (its UCX
#           endpoint failed right after the handshake: s0 is marked down and
#           every request placed on s1, no wait at exit)
# NA_FAULTS_ONLY=NAME runs only that xp case (by hand).
# Exit 0 pass, 1 fail, 77 skipped.
set -u
SCEN=$1
. "$(dirname "$0")/proc.sh"
na_cluster_test na_faults_test 2 "*.err"

# layout NAME NODES: request partition, KV forced to SSD, spill every token
layout() {
    na_layout_head "$1" "" "tls: tcp, timeout_ms: 3000, heartbeat_ms: 200, peer_timeout_ms: 2000" \
        > "$DIR/$1.yaml"
    cat >> "$DIR/$1.yaml" <<EOF
compute:
  - { name: c0, host: 127.0.0.1 }
parallel: { partition: request, batches_in_flight: 2 }
kv: { block_tokens: 16, spill_interval: 1, tier: ssd }
storage:
EOF
    for i in $(seq 0 $(($2 - 1))); do
        echo "  - { name: s$i, host: 127.0.0.1, port: $((PORT + i)), devices: [ { path: \"$DIR/kv/$1/s$i\", dram_mb: 64, ssd_mb: 64 } ] }"
    done >> "$DIR/$1.yaml"
    echo "$DIR/$1.yaml"
}
i=0
while [ $i -lt 8 ]; do echo "Once upon a time number $i"; i=$((i + 1)); done > "$DIR/prompts.txt"
N=48
"$BIN" run --mode monolithic --model "$STORIES" --tokenizer "$STOK" --prompts "$DIR/prompts.txt" \
    -n $N --temp 0 --threads 1 > "$DIR/mono.txt" 2>/dev/null || fail "monolithic run failed"

# start NAME L NODES FAULTS0: storage nodes of layout L, s0 with NA_FAULTS=FAULTS0
start() {
    s=0
    while [ $s -lt "$3" ]; do
        f=""; [ $s -eq 0 ] && f=$4
        na_bg "$DIR/$1$s.out" "$DIR/$1$s.err" env NA_FAULTS="$f" "$BIN" node --config "$2" --name s$s
        eval "SP$s=$NA_PID"
        s=$((s + 1))
    done
    s=0
    while [ $s -lt "$3" ]; do
        na_wait_line "$DIR/$1$s.out" READY 20 || fail "$1: s$s not ready"
        s=$((s + 1))
    done
}
# records FILE: one line per request ("[i] text" with its newlines as \n)
records() {
    awk '/^\[[0-9]+\] /{if (r != "") print r; r = $0; next} {r = r "\\n" $0} END{if (r != "") print r}' "$1"
}
# check NAME: every request of NAME.off is its monolithic text or "[i] FAILED"
# with a line "request i failed (...): REASON" on stderr; FAILED count in NFAIL
check() {
    records "$DIR/mono.txt" > "$DIR/mono.rec"
    records "$DIR/$1.off" > "$DIR/$1.rec"
    [ "$(wc -l < "$DIR/$1.rec")" -eq 8 ] || fail "$1: requests missing from the output"
    NFAIL=0
    while IFS= read -r r; do
        case "$r" in
        *"] FAILED"*)
            n=$(echo "$r" | sed 's/^\[\([0-9]*\)\].*/\1/')
            grep -q "request $n failed ([^)]*): .*[a-z]" "$DIR/$1.err" ||
                fail "$1: request $n failed without a reason"
            NFAIL=$((NFAIL + 1)) ;;
        *) grep -qxF "$r" "$DIR/mono.rec" || fail "$1: wrong text (not the monolithic one): $r" ;;
        esac
    done < "$DIR/$1.rec"
    echo "ok: $1: $((8 - NFAIL)) monolithic text(s), $NFAIL failed with a reason"
}
# stop: end the storage nodes of the last start (SIGTERM), fail on a crash
stop() {
    for p in "$@"; do kill -TERM "$p" 2>/dev/null; wait "$p"; rc=$?
        [ $rc -ge 128 ] && [ $rc -ne 143 ] && fail "storage node died of signal $((rc - 128))"
    done
    return 0
}

case "$SCEN" in
kv)
    for fault in "eio_after=40,max=2" "short_after=40,max=2" "enospc_after=30,max=3"; do
        name=$(echo "$fault" | sed 's/_after.*//')
        L=$(layout $name 2)
        start $name "$L" 2 "kv:$fault"
        grep -q "TEST DOUBLE" "$DIR/${name}0.err" || fail "$name: no TEST DOUBLE line in the node log"
        grep -q "TEST DOUBLE" "$DIR/${name}1.err" && fail "$name: s1 says TEST DOUBLE without NA_FAULTS"
        na_fg "$DIR/$name.off" "$DIR/$name.err" timeout $((120 * NA_TS)) "$BIN" run --config "$L" --cluster connect \
            --prompts "$DIR/prompts.txt" -n $N --temp 0 --threads 1
        rc=$?
        [ $rc -eq 124 ] && fail "$name: run hung"
        [ $rc -le 1 ] || fail "$name: run exited $rc"
        check $name
        stop "$SP0" "$SP1"
    done
    # one node, EIO on every operation: each request fails with a reason
    L=$(layout eioall 1)
    start eioall "$L" 1 "kv:eio_after=0"
    na_fg "$DIR/eioall.off" "$DIR/eioall.err" timeout $((120 * NA_TS)) "$BIN" run --config "$L" --cluster connect \
        --prompts "$DIR/prompts.txt" -n $N --temp 0 --threads 1
    rc=$?
    [ $rc -eq 1 ] || fail "eioall: run exited $rc, expected 1"
    check eioall
    [ "$NFAIL" -eq 8 ] || fail "eioall: $NFAIL of 8 failed"
    stop "$SP0"
    # a malformed value is refused, not ignored
    na_fg /dev/null "$DIR/bad.err" env NA_FAULTS="kv:eio_after=x" timeout $((20 * NA_TS)) "$BIN" node --config "$L" --name s0
    [ $? -ne 0 ] && grep -q "NA_FAULTS" "$DIR/bad.err" || fail "malformed NA_FAULTS accepted"
    echo "ok: malformed NA_FAULTS refused"
    ;;
xp)
    # NAME FAULTS ALL: ALL=1 when every request must end with the monolithic text
    for sc in "corrupt xp:corrupt=1,after=40,max=1 1" "truncate xp:truncate=1,after=40,max=1 1" \
              "drop xp:drop=1,after=40,max=1 1" "stall xp:stall_ms=5000,after=40 1" \
              "dup3 xp:dup=0.1,seed=3 1" "dup7 xp:dup=0.1,seed=7 1" "dup11 xp:dup=0.1,seed=11 1" \
              "dup12 xp:dup=0.1,seed=12 1" "dup13 xp:dup=0.1,seed=13 1" "delay xp:delay_ms=2 1" \
              "runcorrupt xp:corrupt=1,after=60,max=1 1 run" "runtruncate xp:truncate=1,after=60,max=1 1 run" \
              "runfail xp:fail=1,to=s0,after=1 1 run" "runfail40 xp:fail=1,to=s0,after=40 1 run"; do
        set -- $sc
        name=$1
        [ -n "${NA_FAULTS_ONLY:-}" ] && [ "$name" != "$NA_FAULTS_ONLY" ] && continue
        L=$(layout $name 2)
        if [ "${4:-}" = run ]; then     # the compute node's messages
            start $name "$L" 2 ""
            rf=$2
        else
            start $name "$L" 2 "$2"
            rf=""
            grep -q "TEST DOUBLE" "$DIR/${name}0.err" || fail "$name: no TEST DOUBLE line in the node log"
        fi
        t0=$(date +%s%N)
        na_fg "$DIR/$name.off" "$DIR/$name.err" env NA_FAULTS="$rf" timeout $((120 * NA_TS)) "$BIN" run --config "$L" \
            --cluster connect --prompts "$DIR/prompts.txt" -n $N --temp 0 --threads 1
        rc=$?
        t1=$(date +%s%N)
        [ $rc -eq 124 ] && fail "$name: run hung"
        [ $rc -le 1 ] || fail "$name: run exited $rc"
        check $name
        [ "$3" = 1 ] && [ "$NFAIL" -ne 0 ] && fail "$name: $NFAIL request(s) failed, s1 could take them"
        fl="$DIR/${name}0.err"; [ "${4:-}" = run ] && fl="$DIR/$name.err"
        [ "$name" = delay ] || grep -q "TEST DOUBLE: .*\(dropped\|corrupted\|truncated\|duplicated\|stalls\|failed the send\)" \
            "$fl" || fail "$name: no fault was injected"
        if [ "$name" = drop ]; then      # found by the answer's deadline, peer_timeout_ms
            grep -q "no answer to DECODE_ATTN within 2000 ms" "$DIR/$name.err" ||
                fail "drop: the lost ATTN_OUT was not found by its peer_timeout_ms deadline"
            [ $(( (t1 - t0) / 1000000 )) -lt 6000 ] || fail "drop: took $(( (t1 - t0) / 1000000 )) ms"
        fi
        if [ "${name#runfail}" != "$name" ]; then   # no wait at exit for the failed node
            [ $(( (t1 - t0) / 1000000 )) -lt 10000 ] || fail "$name: took $(( (t1 - t0) / 1000000 )) ms"
        fi
        echo "ok: $name: run took $(( (t1 - t0) / 1000000 )) ms"
        kill -CONT "$SP0" 2>/dev/null
        stop "$SP0" "$SP1"
    done
    ;;
*) echo "unknown scenario $SCEN"; exit 1 ;;
esac
exit 0
