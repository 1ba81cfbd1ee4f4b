#!/bin/sh
# tests/cluster/test_offload_run.sh SCENARIO PORT [BAD_NODE]
# `nearattn run --mode offload` against real storage-node processes, compared
# with `nearattn run --mode monolithic` (greedy, several prompts batched).
#   match   stories260K and a generated MHA model: identical text for
#           request partition over 3 nodes (3 batches in flight, started by
#           run), head partition over 2 nodes over TCP with KV forced to SSD
#           and spill interval 1 (nodes from `nearattn launch`, run --cluster
#           connect), 1 node over UCX shared memory with KV in DRAM, spill 4,
#           1 batch in flight; the kv-fetch baseline over 2 nodes; 20 requests in one batch on one node (its
#           attention messages split into mini-batches); and
#           X-cache on (MHA, head partition)
#   queue   more requests than the storage node's SSD budget holds at once:
#           they queue and all finish with the monolithic text; a prompt
#           longer than the context is refused with a clear message
#   chunks  chunked prefill on the storage nodes (run --prefill-chunk 1, 7,
#           64 and more than any prompt; 7 and 64 also with --prefill-budget
#           weighted; adaptive batches on, and off with
#           --no-adaptive-batches): the monolithic text with request
#           partition over 2 nodes (started by run) and head partition over 2
#           nodes with KV forced to SSD (launch, connect); a storage node
#           killed while long prompts come in chunks of 1: its requests are
#           re-placed (prefilled again in chunks) with the monolithic text
#   longctx the compute process's peak RSS (run's summary, VmHWM) does not
#           grow with the prompt: a generated model with a 4200-token
#           context, prompts of ~1000 and ~4000 tokens, within 3 MiB (a
#           prompt's local KV here would be 6 MiB more); the ~4000-token
#           prompt in one chunk of 4096 queries with peer_timeout_ms 600
#           (the chunk's answer takes seconds, its deadline is its queries x
#           peer_timeout_ms): the same text, no node lost
#   budget  a storage node out of KV budget while a long prompt is admitted
#           (a generated model, 2 KiB of KV a token, 4 short prompts, the
#           long one, 2 more): with room for the long one once the short
#           ones end (ssd_mb 4), it waits (the node refuses it at least
#           once) and every text is the monolithic one; with a budget
#           smaller than the long request alone (ssd_mb 2), it fails at
#           once (refused once, not at every end of another request) with
#           a reason naming the slot's KV budget, and the other requests
#           give the monolithic text; nothing hangs
#   mpirun  storage nodes under `mpirun -n 3 nearattn node` (ranks from the
#           environment), run --cluster connect
#   netns   storage nodes in one network namespace, the compute node in
#           another, joined by a veth pair, UCX over TCP (77 without netns)
#   badshape  one of two storage nodes is tests/cluster/bad_node.c (BAD_NODE),
#           answering with a wrong GQA ratio, with an extra entry, with a
#           wrong or a duplicate request id, with an entry status out of the
#           wire's range (1000) or no na_status_t (-200): it is dropped at
#           once (not by the answer's deadline) with a reason naming it, its
#           requests are re-placed on the other node, every text is the
#           monolithic one, nothing hangs (NA_BAD_MODES picks modes by hand)
#   stop    a storage node stopped with SIGSTOP mid-generation (over shm,
#           then tcp): it is lost after peer_timeout_ms (2 s here), not
#           after 6 x timeout_ms; its requests are re-placed as for kill -9
#           and every text is the monolithic one; the detection time (SIGSTOP
#           to the "s1 lost" line) is printed; SIGCONT at the end
#   ucxlog  UCX's own log never reaches stdout (the generated text): with
#           UCX_LOG_LEVEL=info (shm, tcp) stdout holds exactly the monolithic
#           text and UCX's lines are on stderr (compute and nodes); a
#           UCX_LOG_FILE set by the user is honoured; a failed handshake
#           (wrong secret) ends in exit 1, not an abort inside UCX
#   reclaim a storage node killed with kill -9 leaves its preallocated kv.dat;
#           started again on the same directory it reuses it (no "in use"
#           error, disk usage not doubled) and serves a run
#   silent  s1 SIGSTOPped before `run --cluster connect` (its kernel still
#           accepts the TCP connection, nobody answers the handshake): the
#           connect to it gives up after min(timeout_ms, peer_timeout_ms / 3),
#           s0 does not drop the compute meanwhile, every request runs on s0
#           with the monolithic text within a bounded time; the time to the
#           first token (run -n 1, with and without the silent node) is
#           printed; then a longer run during which s1 wakes (SIGCONT): the
#           background retries never hold the requests, s1 joins
#   late    s1 down when the run starts, started during it: it joins and the
#           texts are the monolithic ones
#   join    scale-out while running: `run --cluster connect` over a copy of
#           a one-node layout (s0); s1, not in it, is started and added to
#           the copy mid-run: the compute node re-reads the file, connects
#           s1 and places new requests on it (s1's log shows them opened);
#           then s1 leaves with SIGTERM (exit 0), its requests are re-placed
#           on s0; every text is the monolithic one. Prints the time from
#           the layout change to s1's first opened request
#   announce  scale-out by a node in no layout: c0 has a port in the layout
#           (run listens there); s8 (wrong shape) and s7 (f32 KV) announce
#           and are refused with the reason; s9 announces, takes new requests
#           (its log, its served counters), leaves by SIGTERM without
#           per-request warnings; every text is the monolithic one; prints the
#           join times
#   rejoin  the compute node's table of storage nodes (64 entries) is not used
#           up by announcements that end (issue 22 item 12): during a run with a
#           compute port, s8 (wrong shape) announces, is refused once, is told
#           why in its own log and stops announcing (one refusal in 4 s; it
#           retried after 1, 2, 4 s before); then 70 storage peers
#           (xp_peer --role storage, 10 at a time) announce and leave at once;
#           then s9 (right shape) announces and takes requests (before, it was
#           refused: "holds at most 64"); the run is stopped then (SIGTERM)
#   recover a storage node stopped (SIGSTOP) a third of the way through a
#           run of 16 prompts x 480 tokens (8 in the sanitizer build; a
#           healthy run first, also the monolithic text, gives the run's
#           length): its requests are prefilled again on s0 over their prompt
#           and the tokens generated so far and continue exactly where they
#           were, every text the monolithic one (issue 22 item 15: prefill,
#           decode and the storage node's attention give a query row the
#           same bits). Then the same with `perplexity` (blocks of 32 tokens),
#           whose mean NLL shows the last bits: to all 17 digits the
#           monolithic one with both nodes and with s1 stopped (before, it
#           differed in both cases; stories260K's greedy text hid it)
#   prefix  prefix reuse (docs/prefix-reuse.md): 8 prompts sharing a
#           ~90-token prefix over 2 storage nodes (block 16): the same text as
#           monolithic with reuse on and with --no-prefix-reuse; on, the run
#           reports prompt tokens held by a node already (> 0) and per node,
#           off none; with NA_FAULTS="prefix:hash_bits=1" (keys collide) the
#           text is still the monolithic one and the nodes count collisions;
#           with kv.tier ssd (blocks read back from the SSD, checksums
#           checked, to be kept) the text is the same and prompts hit; a
#           second run on running nodes
#           (--cluster connect) hits from its first request; s0 stopped
#           (SIGSTOP) once both nodes hold the prefix: its request is
#           re-placed on s1 and attaches the prefix there, monolithic text
#   kill    a storage node killed with kill -9 mid-generation: its requests
#           are re-placed on the other node (re-prefilled) and every text is
#           the monolithic one; then with a single storage node: its requests
#           fail with a reason naming it, run exits 1; nothing hangs
# PORT..PORT+2 are the storage nodes' ports. Exit 0 pass, 1 fail, 77 skipped.
set -u
SCEN=$1
. "$(dirname "$0")/proc.sh"
na_test_init na_offload_test
export NA_KV_DIR="$DIR/kv"
export TMPDIR="$DIR"          # logs of the storage nodes `run` starts
NA_LOGS="*.err logs/*.log nearattn-run-*.log"     # what fail shows
[ -f "$SHARED/models/stories260K.bin" ] || { echo "SKIPPED: no $SHARED/models/stories260K.bin"; exit 77; }
# PORT from the command line is only a fallback: pick free ports at run time
# so overlapping runs (Release and ASan, two developers) never collide.
PORT=$(na_free_ports 5) || PORT=$2

# layout NAME NODES PARTITION BIF TLS TIER SPILL XCACHE MODEL TOK [HOST [SSD_MB]]
layout() {
    f="$DIR/$1.yaml"
    host=${11:-127.0.0.1}
    ssd=${12:-256}
    {
        echo "cluster: { name: $1, secret_file: \"$SRC/cluster-configs/dev.secret\" }"
        echo "model: { path: \"$9\", tokenizer: \"${10}\" }"
        echo "transport: { tls: $5, timeout_ms: 5000, heartbeat_ms: 200, peer_timeout_ms: 2000 }"
        echo "compute:"
        echo "  - { name: c0, host: 127.0.0.1${CPORT:+, port: $CPORT} }"
        echo "storage:"
        i=0
        while [ $i -lt "$2" ]; do
            echo "  - name: s$i"
            echo "    host: $host"
            echo "    port: $((PORT + i))"
            echo "    devices:"
            echo "      - { path: \"$DIR/kv/$1/s$i\", dram_mb: 64, ssd_mb: $ssd }"
            i=$((i + 1))
        done
        echo "parallel: { partition: $3, batches_in_flight: $4 }"
        echo "kv: { block_tokens: 16, spill_interval: $7, tier: $6 }"
        echo "xcache: { enabled: $8, host_mb: 64, share: 0.5 }"
    } > "$f"
    echo "$f"
}

STORIES="$SHARED/models/stories260K.bin"
STOK="$SHARED/models/tok512.bin"
printf 'Once upon a time\nThe cat sat\nLily and Tom went to the park\nA big red ball\n' > "$DIR/prompts.txt"

# offload_vs_mono NAME LAYOUT MODEL TOK N CLUSTER [MODE]: MODE offload (default) or kv-fetch
offload_vs_mono() {
    m=${7:-offload}
    na_vs_mono "$1" "$m" "$3" "$4" "$5" --mode "$m" --config "$2" --cluster "$6"
    grep -q "^$m (" "$DIR/$1.err" || fail "$1: no $m summary"
    [ "$m" = offload ] && { grep -q "^time split of the run: .* storage attention .* storage disk" \
        "$DIR/$1.err" || fail "$1: no time split with the storage nodes' attention and disk"; }
    echo "ok: $1"
}
# run_kill NAME LAYOUT PID: `run --cluster connect` of the prompts (480 new
# tokens) into DIR/NAME.off, .err; PID killed with kill -9 0.4 s in; its exit
# status in rc; fail when it hung
run_kill() {
    na_bg "$DIR/$1.off" "$DIR/$1.err" timeout $((120 * NA_TS)) "$BIN" run --config "$2" --cluster connect \
        --prompts "$DIR/prompts.txt" -n 480 --temp 0 --threads 1
    RP=$NA_PID
    sleep 0.4
    kill -9 "$3"
    wait "$RP"
    rc=$?
    [ $rc -eq 124 ] && fail "$1: offload run hung"
}
# mono NAME N [ARGS...]: greedy monolithic text of stories260K for DIR/prompts.txt in DIR/NAME.mono
mono() {
    _mn=$1
    _mk=$2
    shift 2
    "$BIN" run --mode monolithic --model "$STORIES" --tokenizer "$STOK" --prompts "$DIR/prompts.txt" \
        -n "$_mk" --temp 0 --threads 1 "$@" > "$DIR/$_mn.mono" 2>/dev/null || fail "$_mn: monolithic run failed"
}
# one_node_run NAME NODE_LAYOUT RUN_LAYOUT N: N prompts (N/2 in the sanitizer
# build) in DIR/prompts.txt;
# s0 of NODE_LAYOUT started (DIR/NAME0.out, .err); their monolithic text
# (400 tokens, batch 2) in DIR/NAME.mono; then the same `run --cluster
# connect --config RUN_LAYOUT` in the background (DIR/NAME.off, .err), its
# pid in RP
one_node_run() {
    # half the prompts in the sanitizer build (NA_TS > 1): its run is several
    # times slower, so it still outlasts the node starts the scenarios wait for
    _on=$4
    [ "$NA_TS" -gt 1 ] && _on=$((_on / 2))
    i=0; while [ $i -lt "$_on" ]; do echo "Tom and Lily number $i"; i=$((i + 1)); done > "$DIR/prompts.txt"
    na_bg "$DIR/${1}0.out" "$DIR/${1}0.err" "$BIN" node --config "$2" --name s0
    na_wait_line "$DIR/${1}0.out" READY 20 || fail "$1: s0 not ready"
    mono "$1" 400 --batch 2
    na_bg "$DIR/$1.off" "$DIR/$1.err" timeout $((150 * NA_TS)) "$BIN" run --config "$3" --cluster connect \
        --prompts "$DIR/prompts.txt" -n 400 --temp 0 --threads 1 --batch 2
    RP=$NA_PID
}
# nodes2 P WHAT: storage nodes s0 and s1 of layout $L started (DIR/P0.out,
# .err ...), their pids in SP0 and SP1; fail (naming WHAT) when not ready
nodes2() {
    for s in 0 1; do
        na_bg "$DIR/$1$s.out" "$DIR/$1$s.err" "$BIN" node --config "$L" --name s$s
        eval "SP$s=$NA_PID"
    done
    na_wait_all 20 READY "$DIR/${1}0.out" "$DIR/${1}1.out" ||
        fail "$2: storage nodes not ready: $(cat "$DIR/$1"?.err | tail -n 3)"
}
case "$SCEN" in
match)
    L=$(layout req3 3 request 3 auto auto 2 false "$STORIES" "$STOK")
    offload_vs_mono req3 "$L" "$STORIES" "$STOK" 24 start

    L=$(layout head2tcp 2 head 2 tcp ssd 1 false "$STORIES" "$STOK")
    mkdir -p "$DIR/logs"
    na_bg "$DIR/launch.out" "$DIR/launch.out" "$BIN" launch "$L" --log-dir "$DIR/logs"
    LP=$NA_PID
    na_wait_count 20 2 READY 'logs/s*.log' || fail "launch: storage nodes not ready"
    offload_vs_mono head2tcp "$L" "$STORIES" "$STOK" 24 connect
    grep -q "SSD reads 0 bytes" "$DIR/head2tcp.err" && fail "head2tcp: KV forced to SSD, but no SSD read"
    kill -TERM "$LP"; wait "$LP" || fail "launch did not stop cleanly"

    L=$(layout dram1 1 request 1 shm dram 4 false "$STORIES" "$STOK")
    offload_vs_mono dram1 "$L" "$STORIES" "$STOK" 24 start
    # a symlink and a hard link planted at the node logs' predictable names
    # ($TMPDIR/nearattn-run-CLUSTER-NODE-PID.log; exec keeps the pid): the run
    # writes through neither (the old code truncated the hard link's file)
    echo precious > "$DIR/victim"
    sh -c 'ln "$1/victim" "$1/nearattn-run-dram1-s0-$$.log"; exec "$2" run --config "$3" \
        --cluster start --prompts "$1/prompts.txt" -n 8 --temp 0 --threads 1' \
        sh "$DIR" "$BIN" "$L" > "$DIR/plant.out" 2> "$DIR/plant.err" ||
        fail "plant: run over a planted hard link failed: $(tail -n 2 "$DIR/plant.err")"
    sh -c 'ln -s "$1/victim" "$1/nearattn-run-dram1-s0-$$.log"; exec "$2" run --config "$3" \
        --cluster start --prompts "$1/prompts.txt" -n 8 --temp 0 --threads 1' \
        sh "$DIR" "$BIN" "$L" > "$DIR/plant.out" 2> "$DIR/plant.err" ||
        fail "plant: run over a planted symlink failed: $(tail -n 2 "$DIR/plant.err")"
    [ "$(cat "$DIR/victim")" = precious ] || fail "plant: a run wrote its node log through a planted link"
    echo "ok: node logs never written through a planted link"
    # the kv-fetch baseline (compute-node/attn_kvfetch.h) over 2 storage nodes
    L=$(layout kvf2 2 request 2 shm auto 2 false "$STORIES" "$STOK")
    offload_vs_mono kvf2 "$L" "$STORIES" "$STOK" 24 start kv-fetch

    # 20 requests in one batch on one node: its DECODE_ATTN goes as 4 mini-batches
    cp "$DIR/prompts.txt" "$DIR/prompts4.txt"
    i=0; while [ $i -lt 20 ]; do echo "Tom had a dog number $i"; i=$((i + 1)); done > "$DIR/prompts.txt"
    L=$(layout split1 1 request 1 auto auto 2 false "$STORIES" "$STOK")
    offload_vs_mono split1 "$L" "$STORIES" "$STOK" 12 start
    cp "$DIR/prompts4.txt" "$DIR/prompts.txt"

    "$BIN" gen-model --out "$DIR/mha" --dim 64 --hidden 128 --layers 2 --heads 4 --kv-heads 4 \
        --vocab 300 --seq-len 128 --format llama2c --quiet || fail "gen-model failed"
    L=$(layout mhaxc 2 head 2 auto auto 2 true "$DIR/mha.bin" "$DIR/mha.tok.bin")
    offload_vs_mono mhaxc "$L" "$DIR/mha.bin" "$DIR/mha.tok.bin" 16 start
    grep -q ", 0 via x-cache" "$DIR/mhaxc.err" && fail "mhaxc: no request used the X-cache"
    ;;
chunks)
    L=$(layout chreq 2 request 2 auto auto 2 false "$STORIES" "$STOK")
    for c in 1 7 64 1000; do
        na_vs_mono chreq$c offload "$STORIES" "$STOK" 24 --mode offload --config "$L" \
            --cluster start --prefill-chunk $c --prefill-budget tokens
        grep -q "chunked prefill: $c prompt tokens a step" "$DIR/chreq$c.err" ||
            fail "chreq$c: the summary does not say the chunk size"
        echo "ok: request partition, prefill_chunk $c"
    done
    # the weighted budget (the default): a prompt token costs 1 + position /
    # P_eq, so a step's chunk shrinks with its position (compute-node/sched.c)
    for c in 7 64; do
        na_vs_mono chreqw$c offload "$STORIES" "$STOK" 24 --mode offload --config "$L" \
            --cluster start --prefill-chunk $c --prefill-budget weighted
        grep -q "chunked prefill: at most $c prompt tokens a step, their cost weighed by position" \
            "$DIR/chreqw$c.err" || fail "chreqw$c: the summary does not say the weighted budget"
        echo "ok: request partition, prefill_chunk $c weighted"
    done
    # adaptive batches (the layout's default) say so; --no-adaptive-batches
    # keeps every batch in flight, and the text stays monolithic's
    grep -q "batch(es) in flight (adaptive: [0-9]* batch steps merged, [0-9]* split; split won" \
        "$DIR/chreqw7.err" || fail "chreqw7: the summary does not say the adaptive batches"
    na_vs_mono chreqfix offload "$STORIES" "$STOK" 24 --mode offload --config "$L" \
        --cluster start --no-adaptive-batches
    grep -q "batch(es) in flight: " "$DIR/chreqfix.err" && ! grep -q "(adaptive:" "$DIR/chreqfix.err" ||
        fail "chreqfix: --no-adaptive-batches still adaptive: $(grep 'in flight' "$DIR/chreqfix.err")"
    echo "ok: request partition, adaptive batches on and off"
    L=$(layout chhead 2 head 2 tcp ssd 1 false "$STORIES" "$STOK")
    mkdir -p "$DIR/logs"
    na_bg "$DIR/launch.out" "$DIR/launch.out" "$BIN" launch "$L" --log-dir "$DIR/logs"
    LP=$NA_PID
    na_wait_count 20 2 READY 'logs/s*.log' || fail "launch: storage nodes not ready"
    for c in 1 7 64 1000; do
        na_vs_mono chhead$c offload "$STORIES" "$STOK" 24 --mode offload --config "$L" \
            --cluster connect --prefill-chunk $c --prefill-budget tokens
        echo "ok: head partition (SSD tier), prefill_chunk $c"
    done
    na_vs_mono chheadw7 offload "$STORIES" "$STOK" 24 --mode offload --config "$L" \
        --cluster connect --prefill-chunk 7 --prefill-budget weighted
    echo "ok: head partition (SSD tier), prefill_chunk 7 weighted"
    kill -TERM "$LP"; wait "$LP" || fail "launch did not stop cleanly"
    # each node was told where each prompt ends (REQ_OPEN n_prompt, wire
    # 2.2; head partition offers no prefix) and flushed its part of the
    # prompt's KV there: 5 runs of every prompt (before: 0)
    np=$(grep -c . "$DIR/prompts.txt")
    for f in "$DIR"/logs/s*.log; do
        nf=$(sed -n 's/.* \([0-9]*\) prompts flushed at their end.*/\1/p' "$f")
        [ "$nf" = $((5 * np)) ] ||
            fail "chhead: $(basename "$f") flushed ${nf:-no} prompts at their end, expected $((5 * np)) (5 runs of $np)"
    done
    echo "ok: every node flushed every prompt's KV at the prompt's end ($((5 * np)) each)"
    # a node lost while long prompts come in a token a step: re-placed
    PORT=$((PORT + 2))
    L=$(layout chkill 2 request 2 auto auto 2 false "$STORIES" "$STOK")
    long=$(i=0; while [ $i -lt 30 ]; do printf 'Tom and Lily went to the park %d. ' $i; i=$((i + 1)); done)
    { echo "$long"; echo "The cat $long"; echo "A dog $long"; echo "Once $long"; } > "$DIR/prompts.txt"
    NA_LOG_LEVEL=debug nodes2 ck chkill       # debug: s1 logs the requests it opens
    mono chkill 24
    na_bg "$DIR/chkill.off" "$DIR/chkill.err" timeout $((120 * NA_TS)) "$BIN" run --config "$L" \
        --cluster connect --prompts "$DIR/prompts.txt" -n 24 --temp 0 --threads 1 --prefill-chunk 1
    RP=$NA_PID
    na_wait_line "$DIR/ck1.err" "opened request" 30 || fail "chkill: no request placed on s1"
    sleep 0.1
    kill -9 "$SP1"
    wait "$RP"
    rc=$?
    grep -E '^offload \(|lost|re-prefilled' "$DIR/chkill.err" | head -n 5
    [ $rc -eq 0 ] || fail "chkill: run exited $rc, expected 0 (requests re-placed)"
    na_same_sorted "$DIR/chkill.mono" "$DIR/chkill.off" || fail "chkill: text differs"
    if grep -q " [1-9][0-9]* re-placed" "$DIR/chkill.err"; then
        echo "ok: s1 killed mid-prefill ($(grep -o "[0-9]* re-placed" "$DIR/chkill.err"), text as monolithic)"
    else
        echo "note: the prompts were in before the kill; only completion is checked"
    fi
    kill -TERM "$SP0"; wait "$SP0" 2>/dev/null
    ;;
budget)
    "$BIN" gen-model --out "$DIR/bg" --dim 128 --hidden 256 --layers 4 --heads 4 --kv-heads 4 \
        --vocab 300 --seq-len 4200 --format llama2c --quiet || fail "gen-model failed"
    # ~3.7 tokens a word: 400 words ~ 1500 tokens; the short ones ~15
    long=$(i=0; while [ $i -lt 400 ]; do printf 'the cat sat on a mat and ran far '; i=$((i + 9)); done)
    { for i in 1 2 3 4; do echo "the cat sat number $i"; done; echo "$long"
      for i in 5 6; do echo "the cat sat number $i"; done; } > "$DIR/prompts.txt"
    # ssd_mb 4 = 2048 tokens of KV: 4 x (15 + 200) beside 1500 + 200 do not fit, 1700 alone does
    L=$(layout bgwait 1 request 1 auto auto 2 false "$DIR/bg.bin" "$DIR/bg.tok.bin" 127.0.0.1 4)
    sed -i "s/peer_timeout_ms: 2000/peer_timeout_ms: $((30000 * NA_TS))/" "$L"
    # no prefix reuse: the requests open in their order (none waits for a
    # shared block), so the long one comes after the 4 short ones
    na_vs_mono bgwait offload "$DIR/bg.bin" "$DIR/bg.tok.bin" 200 --config "$L" --cluster start \
        --no-prefix-reuse
    r=$(cat "$DIR"/nearattn-run-bgwait-s0-*.log | grep -c "refused request")
    cat "$DIR"/nearattn-run-bgwait-s0-*.log | grep "refused request" | grep -q "(1[0-9][0-9][0-9] tokens)" ||
        fail "bgwait: the long prompt was never refused (did not wait)"
    [ "$r" -le 16 ] || fail "bgwait: $r refused opens: admission retries in a loop"
    grep -q "prompt tokens 1[0-9][0-9][0-9]" "$DIR/bgwait.err" ||
        fail "bgwait: the prompts are not ~1500 tokens: $(grep '^offload (' "$DIR/bgwait.err")"
    echo "ok: the long prompt waited for room ($r refusal(s)), monolithic text"
    # ssd_mb 2 = 1024 tokens: the long request alone does not fit
    L=$(layout bgfail 1 request 1 auto auto 2 false "$DIR/bg.bin" "$DIR/bg.tok.bin" 127.0.0.1 2)
    sed -i "s/peer_timeout_ms: 2000/peer_timeout_ms: $((30000 * NA_TS))/" "$L"
    "$BIN" run --mode monolithic --model "$DIR/bg.bin" --tokenizer "$DIR/bg.tok.bin" \
        --prompts "$DIR/prompts.txt" -n 16 --temp 0 --threads 1 > "$DIR/bgfail.mono" 2>/dev/null ||
        fail "bgfail: monolithic run failed"
    na_fg "$DIR/bgfail.off" "$DIR/bgfail.err" timeout $((120 * NA_TS)) "$BIN" run --config "$L" \
        --cluster start --prompts "$DIR/prompts.txt" -n 16 --temp 0 --threads 1 --no-prefix-reuse
    rc=$?
    [ $rc -eq 124 ] && fail "bgfail: the run hung"
    [ $rc -eq 1 ] || fail "bgfail: exit $rc, expected 1 (the long request failed)"
    grep -aq "^\[5\] FAILED" "$DIR/bgfail.off" || fail "bgfail: the long prompt did not fail"
    grep -av "^\[5\]" "$DIR/bgfail.mono" > "$DIR/bgfail.mono6"
    grep -av "^\[5\]" "$DIR/bgfail.off" > "$DIR/bgfail.off6"
    # (a generated text may hold newlines: count the requests' first lines)
    [ "$(grep -ac '^\[[0-9]\] ' "$DIR/bgfail.off6")" -eq 6 ] || fail "bgfail: the other requests did not all finish"
    na_same_sorted "$DIR/bgfail.mono6" "$DIR/bgfail.off6" || fail "bgfail: the others' text differs"
    grep "KV budget" "$DIR/bgfail.err" | grep -q "ssd_mb" ||
        fail "bgfail: the reason does not name the KV budget: $(grep -i 'refused\|FAIL' "$DIR/bgfail.err" | head -n 3)"
    r=$(cat "$DIR"/nearattn-run-bgfail-s0-*.log | grep -c "refused request")
    [ "$r" -eq 1 ] || fail "bgfail: the long request was refused $r times, expected once (it cannot fit)"
    echo "ok: a request larger than the node's KV budget fails at once: $(grep -o 'it needs.*budget[^;]*' "$DIR/bgfail.err" | head -n 1)"
    ;;
longctx)
    "$BIN" gen-model --out "$DIR/lc" --dim 128 --hidden 256 --layers 4 --heads 4 --kv-heads 4 \
        --vocab 300 --seq-len 4200 --format llama2c --quiet || fail "gen-model failed"
    L=$(layout lc1 1 request 1 auto dram 2 false "$DIR/lc.bin" "$DIR/lc.tok.bin")
    # a chunk of 256 prompt queries over a 4K prefix is one long answer (the
    # sanitizer build: seconds): the answer's deadline is peer_timeout_ms
    sed -i "s/peer_timeout_ms: 2000/peer_timeout_ms: $((30000 * NA_TS))/" "$L"
    # the sanitizer build holds freed memory in its quarantine (RSS would
    # grow with the work done, not with what is live): none here
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
    # ~3.7 tokens a word with this vocabulary: 270 words ~ 1000 tokens
    for n in 270 1080; do
        i=0; while [ $i -lt $n ]; do printf 'the cat sat on a mat and ran far '; i=$((i + 9)); done > "$DIR/p$n.txt"
        echo >> "$DIR/p$n.txt"
        na_fg "$DIR/lc$n.out" "$DIR/lc$n.err" timeout $((150 * NA_TS)) "$BIN" run --config "$L" \
            --cluster start --prompts "$DIR/p$n.txt" -n 2 --temp 0 --threads 1 --prefill-chunk 256 ||
            fail "longctx: the run of $n words failed: $(tail -n 3 "$DIR/lc$n.err")"
    done
    t1=$(grep -o "prompt tokens [0-9]*" "$DIR/lc270.err" | grep -o "[0-9]*")
    t4=$(grep -o "prompt tokens [0-9]*" "$DIR/lc1080.err" | grep -o "[0-9]*")
    r1=$(sed -n 's/^compute process: peak RSS \([0-9.]*\) MiB.*/\1/p' "$DIR/lc270.err")
    r4=$(sed -n 's/^compute process: peak RSS \([0-9.]*\) MiB.*/\1/p' "$DIR/lc1080.err")
    [ -n "$r1" ] && [ -n "$r4" ] || fail "longctx: no peak RSS in the summaries"
    [ "$t4" -gt $((3 * t1)) ] || fail "longctx: prompts of $t1 and $t4 tokens, expected ~1000 and ~4000"
    awk -v a="$r1" -v b="$r4" 'BEGIN { exit !(b - a < 3.0) }' ||
        fail "longctx: compute peak RSS $r1 MiB for $t1 prompt tokens, $r4 MiB for $t4"
    echo "ok: compute peak RSS $r1 MiB ($t1 prompt tokens), $r4 MiB ($t4)"
    # the ~4000-token prompt in one chunk of 4096 queries, peer_timeout_ms
    # 600: that answer takes seconds (one layer: 4000 queries over up to
    # 4000 tokens), a decode step's milliseconds. The chunk's deadline is
    # its queries x peer_timeout_ms, so the node is not declared lost
    # (before: "no answer to DECODE_ATTN within 600 ms", the request failed).
    # Release build only: under the sanitizers (load ~15) the compute node
    # now answers during its own work (the check below), but it found the
    # storage node silent for 613 ms > 600 while that node worked on the
    # chunk (the node's side: not changed here)
    if [ "$NA_TS" -gt 1 ]; then
        echo "note: one chunk of 4096 queries: not run in the sanitizer build"
    else
        sed -e "s/peer_timeout_ms: [0-9]*/peer_timeout_ms: 600/" \
            -e "s/heartbeat_ms: 200/heartbeat_ms: 100/" "$L" > "$DIR/lcdl.yaml"
        na_fg "$DIR/lcdl.out" "$DIR/lcdl.err" timeout 150 "$BIN" run --config "$DIR/lcdl.yaml" \
            --cluster start --prompts "$DIR/p1080.txt" -n 2 --temp 0 --threads 1 --prefill-chunk 4096 \
            --prefill-budget tokens ||
            fail "longctx: one chunk of 4096 queries with peer_timeout_ms 600: $(grep -i 'lost\|fail' "$DIR/lcdl.err" | head -n 3)"
        grep -q "chunked prefill: 4096 prompt tokens a step" "$DIR/lcdl.err" ||
            fail "longctx: the run did not take the prompt in one chunk"
        cmp -s "$DIR/lc1080.out" "$DIR/lcdl.out" ||
            fail "longctx: one chunk of 4096 gives another text than chunks of 256"
        echo "ok: a prompt chunk of 4096 queries answered past peer_timeout_ms ($(sed -n 's/^time split: wall \([0-9.]*\) s.*/\1/p' "$DIR/lcdl.err") s run)"
    fi
    # The compute node's own long work (NA_FAULTS compute:op_ms=60: every op
    # of a slice 60 ms longer, ~0.8 s between two attention messages) with
    # peer_timeout_ms 400 (all three x NA_TS: the sanitizer build's process
    # is descheduled longer under load): the compute node takes the
    # session's turn between the ops of a slice (compute-node/sched.c,
    # na_sched_tick), so the node does not drop it as silent; the text is
    # the one of the undelayed run (before: "peer c0 lost (silent for ... >
    # peer_timeout_ms 400)" in the node's log, the run failed)
    sed -e "s/peer_timeout_ms: [0-9]*/peer_timeout_ms: $((400 * NA_TS))/" \
        -e "s/heartbeat_ms: 200/heartbeat_ms: $((50 * NA_TS))/" "$L" > "$DIR/lcslow.yaml"
    na_fg "$DIR/lcslow.out" "$DIR/lcslow.err" env NA_FAULTS="compute:op_ms=$((60 * NA_TS))" timeout $((300 * NA_TS)) \
        "$BIN" run --config "$DIR/lcslow.yaml" --cluster start --prompts "$DIR/p270.txt" -n 2 \
        --temp 0 --threads 1 --prefill-chunk 512 ||
        fail "longctx: a slow compute node with peer_timeout_ms $((400 * NA_TS)): $(grep -ih 'lost\|fail\|silent' "$DIR/lcslow.err" "$DIR"/nearattn-run-lc1-s0-*.log 2>/dev/null | head -n 3)"
    grep -q "TEST DOUBLE: every compute op $((60 * NA_TS)) ms slower" "$DIR/lcslow.err" ||
        fail "longctx: the compute delay was not applied"
    cmp -s "$DIR/lc270.out" "$DIR/lcslow.out" ||
        fail "longctx: the slow compute node gives another text"
    echo "ok: a compute node slower than peer_timeout_ms between messages is kept ($(sed -n 's/^time split: wall \([0-9.]*\) s.*/\1/p' "$DIR/lcslow.err") s run)"
    # a bad compute fault spec is refused in one line before anything runs
    for spec in compute:foo=1 compute:op_ms=70000 compute:op_ms=x; do
        env NA_FAULTS="$spec" timeout $((60 * NA_TS)) "$BIN" run --config "$L" --cluster inproc \
            --prompt hi -n 2 --temp 0 >"$DIR/badf.out" 2>"$DIR/badf.err" </dev/null
        rc=$?
        [ $rc -ne 0 ] && [ "$(wc -l <"$DIR/badf.err")" -eq 1 ] &&
            grep -q "NA_FAULTS compute: " "$DIR/badf.err" &&
            ! grep -q "NA_FAULTS compute: NA_FAULTS" "$DIR/badf.err" ||
            fail "longctx: NA_FAULTS=$spec: exit $rc, stderr $(cat "$DIR/badf.err")"
    done
    echo "ok: bad NA_FAULTS compute specs refused in one line"
    ;;
prefix)
    base="Once upon a time there was a little girl named Lily who loved to play in the park"
    base="$base with her big red ball and her small brown dog. One day the sun was hot and the"
    base="$base sky was blue, so Lily and her dog ran to the pond to see the ducks and the fish."
    for t in "The ducks" "A fish jumped" "Tom came" "It rained" "Mom called" "The dog barked" \
             "Lily sang" "A frog sat"; do
        echo "$base $t"
    done > "$DIR/prompts.txt"
    cp "$DIR/prompts.txt" "$DIR/pfx8.txt"
    L=$(layout pfx2 2 request 1 shm auto 2 false "$STORIES" "$STOK")
    na_vs_mono pfxon "prefix reuse on" "$STORIES" "$STOK" 24 --config "$L" --cluster start --batch 3
    hit=$(sed -n 's/^prefix reuse: \([0-9]*\) prompt tokens held.*/\1/p' "$DIR/pfxon.err")
    [ -n "$hit" ] && [ "$hit" -gt 0 ] || fail "prefix: no prompt tokens reused ($(grep '^prefix' "$DIR/pfxon.err"))"
    grep -q "^prefix reuse: .*; s[01]: hit [1-9][0-9]* / computed" "$DIR/pfxon.err" ||
        fail "prefix: no per-node hit / computed counts"
    echo "ok: prefix reuse on: $(grep '^prefix reuse' "$DIR/pfxon.err")"
    # chunks of one token: every prompt token is a one-row DECODE_ATTN entry,
    # which the nodes must still count as computed (the tokens prefilled =
    # the nodes' computed ones)
    na_vs_mono pfxc1 "prefix reuse, chunks of 1" "$STORIES" "$STOK" 24 --config "$L" \
        --cluster start --batch 3 --prefill-chunk 1
    line=$(grep '^prefix reuse' "$DIR/pfxc1.err")
    all=$(echo "$line" | sed -n 's/.*), \([0-9]*\) prefilled;.*/\1/p')
    got=$(echo "$line" | grep -o 'hit [0-9]* / computed [0-9]*' | awk '{ s += $5 } END { print s + 0 }')
    [ -n "$all" ] && [ "$all" = "$got" ] ||
        fail "prefix: chunks of 1: the nodes computed $got prompt tokens, the run prefilled $all: $line"
    echo "ok: prefix reuse, chunks of 1: $line"
    na_vs_mono pfxoff "prefix reuse off" "$STORIES" "$STOK" 24 --config "$L" --cluster start \
        --batch 3 --no-prefix-reuse
    grep -q "^prefix reuse" "$DIR/pfxoff.err" && fail "prefix: reused with --no-prefix-reuse"
    echo "ok: prefix reuse off"
    # forced collisions: keys cut to 1 bit, nearly every block's key matches
    # another's; tokens / parent decide, the text stays the monolithic one
    NA_FAULTS="prefix:hash_bits=1" na_vs_mono pfxcol "prefix reuse, colliding keys" "$STORIES" \
        "$STOK" 24 --config "$L" --cluster start --batch 3
    grep -q "^prefix reuse: [1-9][0-9]* prompt tokens held" "$DIR/pfxcol.err" ||
        fail "prefix: no reuse with colliding keys ($(grep '^prefix' "$DIR/pfxcol.err"))"
    c=$(cat "$DIR"/nearattn-run-pfx2-s*.log | sed -n 's/.*TEST DOUBLE: prefix cache keys cut to 1 bits.*/x/p' | wc -l)
    [ "$c" -ge 1 ] || fail "prefix: the nodes did not take NA_FAULTS=prefix:hash_bits=1"
    n=$(cat "$DIR"/nearattn-run-pfx2-s*.log | sed -n 's/.* \([0-9][0-9]*\) key collisions).*/\1/p' |
        awk '{ s += $1 } END { print s + 0 }')
    [ "$n" -gt 0 ] || fail "prefix: keys cut to 1 bit but no collision seen"
    unset NA_FAULTS
    echo "ok: prefix reuse with keys cut to 1 bit: $n collisions, monolithic text"
    L=$(layout pfxssd 1 request 1 shm ssd 1 false "$STORIES" "$STOK")
    na_vs_mono pfxssd "prefix reuse, KV on SSD only" "$STORIES" "$STOK" 24 --config "$L" --cluster start
    grep -q "^prefix reuse: [1-9][0-9]* prompt tokens held" "$DIR/pfxssd.err" ||
        fail "prefix: kv.tier ssd: the blocks read back from the SSD were not kept"
    echo "ok: prefix reuse with the KV on SSD only (blocks read back and checked): same text"
    # running nodes keep their caches between runs: a second run hits at once
    L=$(layout pfxrun 1 request 1 shm auto 2 false "$STORIES" "$STOK")
    na_bg "$DIR/pfxrun0.out" "$DIR/pfxrun0.err" "$BIN" node --config "$L" --name s0
    na_wait_line "$DIR/pfxrun0.out" READY 20 || fail "prefix: s0 not ready"
    na_vs_mono pfxrun1 "prefix reuse, first run" "$STORIES" "$STOK" 24 --config "$L" --cluster connect
    sed -n 3p "$DIR/prompts.txt" > "$DIR/prompts1.txt"
    mv "$DIR/prompts1.txt" "$DIR/prompts.txt"
    na_vs_mono pfxrun2 "prefix reuse, second run" "$STORIES" "$STOK" 24 --config "$L" --cluster connect
    grep -q "^prefix reuse: [1-9][0-9]* prompt tokens held .*(1 request" "$DIR/pfxrun2.err" ||
        fail "prefix: the second run's one request did not hit ($(grep '^prefix' "$DIR/pfxrun2.err"))"
    echo "ok: a second run on running nodes reuses the first run's prefix"
    # a node lost once both hold the prefix (a first run over both): in a
    # second run s0 is stopped (SIGSTOP) as soon as it opens a request, which
    # is re-placed on s1 after the peer timeout and attaches the prefix
    # there (its prefill starts after it); every text is the monolithic one
    cp "$DIR/pfx8.txt" "$DIR/prompts.txt"
    PORT=$((PORT + 2))
    L=$(layout pfxlost 2 request 2 auto auto 2 false "$STORIES" "$STOK")
    NA_LOG_LEVEL=debug nodes2 pk "prefix, a node lost"    # debug: the nodes log their opens
    mono pfxlost 200
    na_vs_mono pfxlost0 "prefix reuse, both nodes" "$STORIES" "$STOK" 200 --config "$L" \
        --cluster connect
    grep -q "s0: hit [0-9]* / computed [1-9][0-9]*, s1: hit [0-9]* / computed [1-9]" "$DIR/pfxlost0.err" ||
        fail "prefix, a node lost: the first run did not prefill on both nodes ($(grep '^prefix' "$DIR/pfxlost0.err"))"
    n0=$(grep -c "opened request" "$DIR/pk0.err")
    na_bg "$DIR/pfxlost.off" "$DIR/pfxlost.err" timeout $((120 * NA_TS)) "$BIN" run --config "$L" \
        --cluster connect --prompts "$DIR/prompts.txt" -n 200 --temp 0 --threads 1
    RP=$NA_PID
    i=0
    while [ "$(grep -c "opened request" "$DIR/pk0.err")" -le "$n0" ] && [ $i -lt $((3000 * NA_TS)) ]; do
        sleep 0.01; i=$((i + 1))
    done
    kill -STOP "$SP0"
    wait "$RP"
    rc=$?
    kill -CONT "$SP0"
    [ $rc -eq 0 ] || fail "prefix, a node lost: run exited $rc, expected 0 (requests re-placed)"
    na_same_sorted "$DIR/pfxlost.mono" "$DIR/pfxlost.off" || fail "prefix, a node lost: text differs"
    grep -q " [1-9][0-9]* re-placed" "$DIR/pfxlost.err" ||
        fail "prefix, a node lost: nothing re-placed"
    grep -q "re-placed; its new storage node holds the first [1-9][0-9]* tokens" "$DIR/pfxlost.err" ||
        fail "prefix, a node lost: no re-placed request attached its prefix on s1"
    echo "ok: s0 stopped: $(grep -o "[0-9]* re-placed after" "$DIR/pfxlost.err" | grep -o "[0-9]*") re-placed, $(grep -c "its new storage node holds" "$DIR/pfxlost.err") attached their prefix on s1, text as monolithic"
    kill -TERM "$SP0" "$SP1"; wait "$SP0" "$SP1" 2>/dev/null
    ;;
queue)
    i=0
    while [ $i -lt 8 ]; do echo "Once upon a time number $i"; i=$((i + 1)); done > "$DIR/prompts.txt"
    L=$(layout queue1 1 request 2 auto auto 2 false "$STORIES" "$STOK" 127.0.0.1 1)
    offload_vs_mono queue1 "$L" "$STORIES" "$STOK" 400 start
    r=$(grep -c "refused request" "$DIR"/nearattn-run-queue1-s0-*.log)
    [ "$r" -ge 1 ] || fail "queue: the budget never refused a request (nothing queued)"
    [ "$r" -le 64 ] || fail "queue: $r refused opens: admission retries in a loop"
    long=$(i=0; while [ $i -lt 700 ]; do printf 'word '; i=$((i + 1)); done)
    na_fg /dev/null "$DIR/long.err" "$BIN" run --config "$L" --prompt "$long" -n 4
    [ $? -eq 1 ] || fail "a prompt longer than the context was not refused"
    grep -q "longer than the model context" "$DIR/long.err" || fail "no clear message for a long prompt"
    echo "ok: long prompt refused"
    # in a batched job only that request fails; the others finish
    { echo "Once upon a time"; echo "$long"; echo "The cat sat"; } > "$DIR/mixed.txt"
    na_fg "$DIR/mixed.out" "$DIR/mixed.err" "$BIN" run --config "$L" --prompts "$DIR/mixed.txt" -n 8 --temp 0
    [ $? -eq 1 ] || fail "mixed job: expected exit 1"
    grep -q "^\[2\] FAILED" "$DIR/mixed.out" || fail "mixed job: the long prompt did not fail alone"
    [ "$(grep -c -v FAILED "$DIR/mixed.out")" -eq 2 ] || fail "mixed job: the other prompts did not finish"
    echo "ok: a long prompt in a batched job fails alone"
    ;;
mpirun)
    command -v mpirun >/dev/null 2>&1 || { echo "SKIPPED: no mpirun"; exit 77; }
    L=$(layout mpi2 2 request 2 auto auto 2 false "$STORIES" "$STOK")
    na_bg "$DIR/mpi.out" "$DIR/mpi.err" mpirun -n 3 --allow-run-as-root --oversubscribe "$BIN" node --config "$L"
    MP=$NA_PID
    na_wait_count 30 2 '^READY s' mpi.out || fail "mpirun: storage nodes not ready"
    offload_vs_mono mpi2 "$L" "$STORIES" "$STOK" 24 connect
    kill -TERM "$MP"; wait "$MP"
    ;;
netns)
    A=na_off_a$PORT; B=na_off_b$PORT
    ip netns add $A 2>/dev/null || { echo "SKIPPED: cannot create network namespaces"; exit 77; }
    ip netns add $B || { ip netns del $A; echo "SKIPPED: cannot create network namespaces"; exit 77; }
    NA_CLEANUP='ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null'     # na_cleanup runs it
    ip link add vna$PORT type veth peer name vnb$PORT || fail "veth"
    ip link set vna$PORT netns $A && ip link set vnb$PORT netns $B || fail "veth move"
    ip -n $A addr add 10.77.$((PORT % 200)).1/24 dev vna$PORT && ip -n $A link set vna$PORT up \
        && ip -n $A link set lo up || fail "ip A"
    ip -n $B addr add 10.77.$((PORT % 200)).2/24 dev vnb$PORT && ip -n $B link set vnb$PORT up \
        && ip -n $B link set lo up || fail "ip B"
    L=$(layout ns2 2 request 2 tcp auto 2 false "$STORIES" "$STOK" 10.77.$((PORT % 200)).1)
    sed -i "s/- { name: c0, host: 127.0.0.1 }/- { name: c0, host: 10.77.$((PORT % 200)).2 }/" "$L"
    for s in 0 1; do
        na_bg "$DIR/ns$s.out" "$DIR/ns$s.err" ip netns exec $A "$BIN" node --config "$L" --name s$s
    done
    na_wait_all 20 READY "$DIR/ns0.out" "$DIR/ns1.out" || fail "netns: storage nodes not ready"
    mono ns 24
    na_fg "$DIR/ns.off" "$DIR/ns.err" timeout $((120 * NA_TS)) ip netns exec $B "$BIN" run --config "$L" \
        --cluster connect --prompts "$DIR/prompts.txt" -n 24 --temp 0 --threads 1 || fail "netns: offload failed"
    na_same_sorted "$DIR/ns.mono" "$DIR/ns.off" || fail "netns: text differs"
    echo "ok: netns"
    ;;
badshape)
    BAD=${3:?badshape needs the bad_node binary}
    for mode in ${NA_BAD_MODES:-shape count badid dupid status status200}; do
        L=$(layout bad$mode 2 request 2 auto auto 2 false "$STORIES" "$STOK")
        na_bg "$DIR/b0$mode.out" "$DIR/b0$mode.err" "$BIN" node --config "$L" --name s0
        P0=$NA_PID
        na_bg "$DIR/b1$mode.out" "$DIR/b1$mode.err" "$BAD" "$L" s1 $mode
        P1=$NA_PID
        na_wait_all 20 READY "$DIR/b0$mode.out" "$DIR/b1$mode.out" || fail "badshape: nodes not ready"
        mono bad 24
        na_fg "$DIR/bad.off" "$DIR/bad$mode.err" timeout $((60 * NA_TS)) "$BIN" run --config "$L" --cluster connect \
            --prompts "$DIR/prompts.txt" -n 24 --temp 0 --threads 1
        rc=$?
        [ $rc -eq 124 ] && fail "badshape $mode: run hung"
        [ $rc -eq 0 ] || fail "badshape $mode: run exited $rc, expected 0 (requests re-placed)"
        case $mode in
        shape|count) why="s1 lost: answered batch .* with wrong shapes" ;;
        badid|dupid) why="s1 lost: answered batch .* entry .* request .* where .* was asked" ;;
        status) why="s1 lost: wire ATTN_OUT: field 'entries\[0\].status' = 1000 out of range" ;;
        *) why="s1 lost: answered batch .* entry .* status -200, which is no status" ;;
        esac
        grep -q "$why" "$DIR/bad$mode.err" || fail "badshape $mode: no clear reason: $(grep "s1" "$DIR/bad$mode.err" | head -n 3)"
        grep -q "no answer to DECODE_ATTN" "$DIR/bad$mode.err" &&
            fail "badshape $mode: found by the answer's deadline, not at once"
        grep -q " [1-9][0-9]* re-placed" "$DIR/bad$mode.err" || fail "badshape $mode: nothing re-placed"
        na_same_sorted "$DIR/bad.mono" "$DIR/bad.off" || fail "badshape $mode: text differs from monolithic"
        kill -TERM $P0 $P1; wait $P0 $P1 2>/dev/null
        echo "ok: badshape $mode (its requests re-placed on s0, text as monolithic)"
    done
    ;;
recover)
    # 16 prompts and chunks (8 in the sanitizer build, several times slower)
    RN=16
    [ "$NA_TS" -gt 1 ] && RN=8
    i=0; while [ $i -lt $RN ]; do echo "Tom and Lily number $i"; i=$((i + 1)); done > "$DIR/prompts.txt"
    L=$(layout rec2 2 request 2 auto auto 2 false "$STORIES" "$STOK")
    nodes2 r recover
    mono rec 480
    # stop_s1_third: a third of t_ms (the run with both nodes) into the run RP,
    # s1 stopped (SIGSTOP) until RP ends, its status in rc; then s1 goes on
    stop_s1_third() {
        sleep "$(awk "BEGIN { print $t_ms / 3000 }")"
        kill -STOP "$SP1"
        wait "$RP"
        rc=$?
        kill -CONT "$SP1"
    }
    recrun() {
        na_bg "$DIR/$1.off" "$DIR/$1.err" timeout $((120 * NA_TS)) "$BIN" run --config "$L" \
            --cluster connect --prompts "$DIR/prompts.txt" -n 480 --temp 0 --threads 1
        RP=$NA_PID
    }
    t0=$(date +%s%N)
    recrun rec0
    wait "$RP" || fail "recover: the run with both nodes failed"
    t_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    na_same_sorted "$DIR/rec.mono" "$DIR/rec0.off" || fail "recover: text differs with both nodes up"
    # again, s1 stopped a third of the way through (some 160 tokens per request)
    recrun rec1
    stop_s1_third
    [ $rc -eq 124 ] && fail "recover: offload run hung"
    [ $rc -eq 0 ] || fail "recover: run exited $rc, expected 0 (requests re-placed)"
    grep -q " [1-9][0-9]* re-placed" "$DIR/rec1.err" ||
        fail "recover: nothing re-placed (the run of $t_ms ms ended before the stop?)"
    n=$(sed -n "s/.*prompt tokens [0-9]* (+ \([0-9]*\) re-prefilled.*/\1/p" "$DIR/rec1.err")
    na_same_sorted "$DIR/rec.mono" "$DIR/rec1.off" ||
        fail "recover: the re-placed requests' text differs from monolithic"
    echo "ok: recover (s1 stopped after $((t_ms / 3)) ms of a $t_ms ms run: $(grep -o "[0-9]* re-placed" "$DIR/rec1.err"), ${n:-?} tokens prefilled again, every text as monolithic)"
    # the same through `perplexity` (teacher forcing), whose mean NLL shows
    # the last bits of every scored position (17 digits): 16 chunks of 512,
    # s1 stopped a third of the way through; its chunks are prefilled again
    # over their tokens so far and score the same figures as monolithic
    # (stories260K's greedy text above hides most rounding; this does not:
    # before, with blocks of 64 the healthy run matched and the re-placed
    # one did not, 2.9569595360013103 vs 2.9569556727151416; with blocks of
    # 32 here, which cut the 64-token chunks, even the healthy one did not)
    kill -TERM "$SP0" "$SP1"; wait "$SP0" "$SP1" 2>/dev/null
    PORT=$((PORT + 2))
    L=$(layout recp 2 request 2 auto auto 2 false "$STORIES" "$STOK")
    sed -i 's/block_tokens: 16/block_tokens: 32/' "$L"
    nodes2 p "recover (perplexity)"
    i=0; while [ $i -lt 400 ]; do
        echo "Tim saw a red ball in the park $i times, and Lily ran to the big tree with her dog $((i * 7 % 13))."
        i=$((i + 1))
    done > "$DIR/text.txt"
    nll() { sed -n 's/.*; mean NLL \([0-9.e+-]*\)$/\1/p' "$DIR/$1.err"; }
    "$BIN" perplexity --model "$STORIES" --tokenizer "$STOK" --file "$DIR/text.txt" --chunks $RN \
        --threads 1 > "$DIR/pmono.out" 2> "$DIR/pmono.err" || fail "recover: monolithic perplexity failed"
    pplrun() {
        na_bg "$DIR/$1.out" "$DIR/$1.err" timeout $((120 * NA_TS)) "$BIN" perplexity --config "$L" \
            --cluster connect --file "$DIR/text.txt" --chunks $RN --threads 1
        RP=$NA_PID
    }
    t0=$(date +%s%N)
    pplrun pp0
    wait "$RP" || fail "recover: perplexity with both nodes failed: $(tail -n 2 "$DIR/pp0.err")"
    t_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    [ "$(nll pp0)" = "$(nll pmono)" ] ||
        fail "recover: perplexity with both nodes: mean NLL $(nll pp0), monolithic $(nll pmono)"
    pplrun pp1
    stop_s1_third
    [ $rc -eq 0 ] || fail "recover: perplexity with s1 stopped exited $rc: $(tail -n 2 "$DIR/pp1.err")"
    grep -q " [1-9][0-9]* re-placed" "$DIR/pp1.err" ||
        fail "recover: perplexity: nothing re-placed (the run of $t_ms ms ended before the stop?)"
    [ "$(nll pp1)" = "$(nll pmono)" ] ||
        fail "recover: perplexity with re-placed chunks: mean NLL $(nll pp1), monolithic $(nll pmono)"
    cmp -s "$DIR/pp1.out" "$DIR/pmono.out" || fail "recover: perplexity output differs from monolithic"
    kill -TERM "$SP0" "$SP1"; wait "$SP0" "$SP1" 2>/dev/null
    echo "ok: recover, perplexity (s1 stopped after $((t_ms / 3)) ms of $t_ms: $(grep -o "[0-9]* re-placed" "$DIR/pp1.err"); mean NLL $(nll pp1) as monolithic)"
    ;;
kill)
    # stories260K (a trained model: greedy tokens do not hinge on rounding, so
    # the surviving requests can be compared with monolithic even though
    # their batch shrinks when the killed node's requests fail)
    L=$(layout kill2 2 request 2 auto auto 2 false "$STORIES" "$STOK")
    nodes2 s kill
    mono kill 480
    run_kill kill "$L" "$SP1"
    [ $rc -eq 0 ] || fail "kill: run exited $rc, expected 0 (requests re-placed)"
    na_same_sorted "$DIR/kill.mono" "$DIR/kill.off" || fail "kill: text differs"
    if grep -q " [1-9][0-9]* re-placed" "$DIR/kill.err"; then
        grep -q "s1 lost" "$DIR/kill.err" || fail "kill: the lost node is not named"
        # the summary counts the prompts' tokens apart from those prefilled
        # again (a request lost during its first prompt chunk, as under ASan's
        # slower start, is fed its prompt for the first time: nothing is
        # re-prefilled, and no "re-prefilled N tokens" line is logged)
        if grep -q "re-prefilled [1-9][0-9]* tokens on another storage node" "$DIR/kill.err"; then
            grep -q "prompt tokens [0-9]* (+ [1-9][0-9]* re-prefilled after a lost node)" "$DIR/kill.err" ||
                fail "kill: the summary does not count re-prefilled tokens apart: $(grep '^offload' "$DIR/kill.err")"
        fi
        echo "ok: kill of s1 ($(grep -o "[0-9]* re-placed" "$DIR/kill.err") after a lost storage node, text as monolithic)"
    else
        echo "note: generation finished before the kill; only completion is checked"
    fi
    kill -TERM "$SP0"; wait "$SP0" 2>/dev/null

    # a single storage node: nowhere to re-place, the requests fail with a reason
    PORT=$((PORT + 2))          # a port no node of the first half used
    L=$(layout kill1 1 request 2 auto auto 2 false "$STORIES" "$STOK")
    na_bg "$DIR/k0.out" "$DIR/k0.err" "$BIN" node --config "$L" --name s0
    K0=$NA_PID
    na_wait_line "$DIR/k0.out" READY 20 || fail "storage node not ready"
    run_kill kill1 "$L" "$K0"
    if grep -q "FAILED" "$DIR/kill1.off"; then
        [ $rc -eq 1 ] || fail "kill1: run exited $rc, expected 1"
        grep -q "request [0-9]* failed.*s0 lost" "$DIR/kill1.err" || fail "kill1: no reason naming s0"
        echo "ok: kill of the only node ($(grep -c "FAILED" "$DIR/kill1.off") request(s) failed naming s0)"
    else
        echo "note: generation finished before the kill; only completion is checked"
    fi
    ;;
stop)
    mono stop 480
    for tls in shm tcp; do
        L=$(layout stop$tls 2 request 2 $tls auto 2 false "$STORIES" "$STOK")
        nodes2 "t$tls" "stop $tls"
        na_bg "$DIR/stop$tls.off" "$DIR/stop$tls.err" timeout $((120 * NA_TS)) "$BIN" run --config "$L" \
            --cluster connect --prompts "$DIR/prompts.txt" -n 480 --temp 0 --threads 1
        RP=$NA_PID
        sleep 0.4
        kill -STOP "$SP1"
        t0=$(date +%s%N)
        t1=""
        while kill -0 "$RP" 2>/dev/null; do
            grep -q "s1 lost" "$DIR/stop$tls.err" && { t1=$(date +%s%N); break; }
            sleep 0.02
        done
        wait "$RP"
        rc=$?
        kill -CONT "$SP1"
        [ $rc -eq 124 ] && fail "stop $tls: offload run hung"
        [ $rc -eq 0 ] || fail "stop $tls: run exited $rc, expected 0 (requests re-placed)"
        na_same_sorted "$DIR/stop.mono" "$DIR/stop$tls.off" || fail "stop $tls: text differs"
        if grep -q " [1-9][0-9]* re-placed" "$DIR/stop$tls.err"; then
            [ -n "$t1" ] || fail "stop $tls: no \"s1 lost\" line while the run was going"
            ms=$(( (t1 - t0) / 1000000 ))
            [ $ms -le 4500 ] || fail "stop $tls: detected after $ms ms, peer_timeout_ms is 2000"
            echo "ok: stop of s1 over $tls: lost after $ms ms ($(grep -o "s1 lost.*" "$DIR/stop$tls.err" | head -n 1)), $(grep -o "[0-9]* re-placed" "$DIR/stop$tls.err"), text as monolithic"
        else
            echo "note: generation finished before the stop; only completion is checked"
        fi
        sleep 1         # s1 wakes to a peer that gave it up: no UCX chatter in its log
        grep -q "UCX DEBUG" "$DIR/t${tls}1.err" &&
            fail "stop $tls: UCX DEBUG lines in s1's log after SIGCONT: $(grep -c "UCX DEBUG" "$DIR/t${tls}1.err")"
        kill -TERM "$SP0" "$SP1"; wait "$SP0" "$SP1" 2>/dev/null
        PORT=$((PORT + 2))
    done
    ;;
ucxlog)
    export UCX_LOG_LEVEL=info
    for tls in shm tcp; do
        L=$(layout ucx$tls 2 request 2 $tls auto 2 false "$STORIES" "$STOK")
        offload_vs_mono ucx$tls "$L" "$STORIES" "$STOK" 16 start
        grep -q "UCX INFO" "$DIR/ucx$tls.err" || fail "ucxlog $tls: no UCX line on stderr (is the level forced?)"
        grep -q "UCX INFO" "$DIR"/nearattn-run-ucx$tls-s0-*.log || fail "ucxlog $tls: no UCX line in s0's log"
    done
    export UCX_LOG_FILE="$DIR/ucx-user.log"
    offload_vs_mono ucxfile "$L" "$STORIES" "$STOK" 16 start
    grep -q "UCX" "$DIR/ucxfile.err" && fail "ucxlog: UCX_LOG_FILE set, yet UCX lines on stderr"
    grep -q "UCX" "$DIR/ucx-user.log" || fail "ucxlog: UCX_LOG_FILE set by the user not honoured"
    unset UCX_LOG_FILE
    echo "ok: ucxlog (UCX's lines on stderr or in UCX_LOG_FILE, stdout only the text)"
    # a failed handshake (the compute node's secret is not the node's): exit 1, no abort
    L=$(layout ucxok 1 request 1 auto auto 2 false "$STORIES" "$STOK")
    na_bg "$DIR/u0.out" "$DIR/u0.err" "$BIN" node --config "$L" --name s0
    na_wait_line "$DIR/u0.out" READY 20 || fail "ucxlog: s0 not ready"
    printf 'NEARATTN-TEST-WRONG-SECRET-0123456789abcdef0123456789abcdef\n' > "$DIR/wrong.secret"
    chmod 600 "$DIR/wrong.secret"
    sed "s|secret_file: \"[^\"]*\"|secret_file: \"$DIR/wrong.secret\"|" "$L" > "$DIR/ucxbad.yaml"
    for i in 1 2 3; do
        na_fg "$DIR/ucxbad.out" "$DIR/ucxbad.err" timeout $((60 * NA_TS)) "$BIN" run --config "$DIR/ucxbad.yaml" \
            --cluster connect --prompt "Once upon a time" -n 8 --temp 0
        rc=$?
        [ $rc -eq 1 ] || fail "ucxlog: wrong secret: run exited $rc, expected 1"
        grep -q "could not prove the cluster secret" "$DIR/ucxbad.err" || fail "ucxlog: no reason for the refusal"
        grep -q "UCX.*\(Bug\|WARN\|ERROR\)" "$DIR/ucxbad.out" "$DIR/ucxbad.err" && fail "ucxlog: UCX complained"
    done
    unset UCX_LOG_LEVEL
    echo "ok: a failed handshake exits 1 without an abort inside UCX"
    ;;
reclaim)
    L=$(layout recl 1 request 1 auto ssd 2 false "$STORIES" "$STOK")
    KVF="$DIR/kv/recl/s0/kv.dat"
    na_bg "$DIR/r0.out" "$DIR/r0.err" "$BIN" node --config "$L" --name s0
    R0=$NA_PID
    na_wait_line "$DIR/r0.out" READY 20 || fail "reclaim: s0 not ready"
    [ -f "$KVF" ] || fail "reclaim: no $KVF while s0 runs"
    du1=$(du -sk "$DIR/kv/recl" | cut -f1)
    kill -9 "$R0"; wait "$R0" 2>/dev/null
    [ -f "$KVF" ] || fail "reclaim: kill -9 left no kv.dat (nothing to reclaim: test is moot)"
    na_bg "$DIR/r1.out" "$DIR/r1.err" "$BIN" node --config "$L" --name s0
    R1=$NA_PID
    na_wait_line "$DIR/r1.out" READY 20 || fail "reclaim: s0 did not start again on its directory: $(tail -n 2 "$DIR/r1.err")"
    grep -q "in use" "$DIR/r1.err" && fail "reclaim: the leftover kv.dat was called in use"
    du2=$(du -sk "$DIR/kv/recl" | cut -f1)
    [ "$du2" -le $((du1 + du1 / 10)) ] || fail "reclaim: disk usage $du1 KiB -> $du2 KiB after the restart"
    mono recl 24
    na_fg "$DIR/recl.off" "$DIR/recl.err" timeout $((60 * NA_TS)) "$BIN" run --config "$L" --cluster connect \
        --prompts "$DIR/prompts.txt" -n 24 --temp 0 --threads 1 || fail "reclaim: run on the restarted node failed"
    na_same_sorted "$DIR/recl.mono" "$DIR/recl.off" || fail "reclaim: text differs"
    # a second node on the directory of a running one is still refused
    na_fg "$DIR/r2.out" "$DIR/r2.err" timeout $((20 * NA_TS)) "$BIN" node --config "$L" --name s0 --listen 127.0.0.1:0
    grep -q "in use" "$DIR/r2.err" || fail "reclaim: a second node on a live directory was not refused: $(tail -n 1 "$DIR/r2.err")"
    kill -TERM "$R1"; wait "$R1" 2>/dev/null
    [ -f "$KVF" ] && fail "reclaim: kv.dat left after a clean stop"
    echo "ok: reclaim (kv.dat of a killed node reused: $du1 KiB before, $du2 KiB after the restart)"
    ;;
silent)
    L=$(layout silent2 2 request 2 auto auto 2 false "$STORIES" "$STOK")
    nodes2 q silent
    mono silent 200
    # timed NAME N [ARGS]: `run --cluster connect` of the prompts, N tokens,
    # into DIR/NAME.off, .err; its exit status in rc, its wall time in t_ms
    timed() {
        _tn=$1
        _tk=$2
        shift 2
        t0=$(date +%s%N)
        timeout $((60 * NA_TS)) "$BIN" run --config "$L" --cluster connect --prompts "$DIR/prompts.txt" \
            -n "$_tk" --temp 0 --threads 1 "$@" > "$DIR/$_tn.off" 2> "$DIR/$_tn.err"
        rc=$?
        t_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    }
    timed first_up 1
    [ $rc -eq 0 ] || fail "silent: run with both nodes exited $rc"
    up_first=$t_ms
    timed healthy 200
    [ $rc -eq 0 ] || fail "silent: run with both nodes exited $rc"
    up_all=$t_ms
    kill -STOP "$SP1"
    timed first_silent 1
    [ $rc -eq 0 ] || { kill -CONT "$SP1"; fail "silent: run (1 token) exited $rc"; }
    silent_first=$t_ms
    timed silent 200
    [ $rc -eq 124 ] && { kill -CONT "$SP1"; fail "silent: offload run hung"; }
    [ $rc -eq 0 ] || { kill -CONT "$SP1"; fail "silent: run exited $rc, expected 0 (every request on s0)"; }
    na_same_sorted "$DIR/silent.mono" "$DIR/silent.off" || fail "silent: text differs"
    grep -q "s1 .*unreachable.*handshake timed out" "$DIR/silent.err" || fail "silent: no reason naming s1"
    grep -q "storage node s0 lost" "$DIR/silent.err" && fail "silent: s0 was lost"
    # the connect bound is 2000 / 3 ms, paid once at start: a 1-token run shows
    # it, the long run reports s1 once, and the long run, with s0 doing the
    # work of both nodes, takes at most twice the healthy one plus that bound
    # (wall times on a busy machine, so the bounds are loose: NA_TS)
    [ $silent_first -le $((up_first + 3000 * NA_TS)) ] ||
        fail "silent: first token took $silent_first ms (both nodes up: $up_first ms)"
    [ "$(grep -c "s1 .*unreachable" "$DIR/silent.err")" -eq 1 ] ||
        fail "silent: s1's connect wait was paid more than once"
    [ $t_ms -le $((2 * up_all + 3000 * NA_TS)) ] ||
        fail "silent: took $t_ms ms (both nodes up: $up_all ms)"
    echo "ok: silent s1 at start: time to first token (run -n 1) $silent_first ms (both up: $up_first ms); run -n 200 $t_ms ms (both up: $up_all ms); text as monolithic"
    # a longer run: s1 stays silent for 1.5 s (the background retries give
    # up without holding the requests), then wakes and joins
    i=0; while [ $i -lt 16 ]; do echo "Tom and Lily number $i"; i=$((i + 1)); done > "$DIR/prompts.txt"
    mono silentj 400 --batch 2
    t0=$(date +%s%N)
    na_bg "$DIR/silentj.off" "$DIR/silentj.err" timeout $((120 * NA_TS)) "$BIN" run --config "$L" \
        --cluster connect --prompts "$DIR/prompts.txt" -n 400 --temp 0 --threads 1 --batch 2
    RP=$NA_PID
    sleep 1.5
    kill -CONT "$SP1"
    wait "$RP"
    rc=$?
    t_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    [ $rc -eq 0 ] || fail "silent: run while s1 wakes exited $rc"
    na_same_sorted "$DIR/silentj.mono" "$DIR/silentj.off" || fail "silent: text differs (s1 waking)"
    grep -q "silent for" "$DIR/q0.err" && fail "silent: s0 dropped the compute"
    if grep -q "storage node s1 joined" "$DIR/silentj.err"; then
        echo "ok: s1 woke during a run of $t_ms ms and joined; text as monolithic"
    else
        echo "note: the run ($t_ms ms) ended before s1 joined; only completion is checked"
    fi
    kill -TERM "$SP0" "$SP1"; wait "$SP0" "$SP1" 2>/dev/null
    ;;
late)
    # s1 is down when the run starts; started by hand during the run, it is
    # connected and takes new requests; every text is the monolithic one
    L=$(layout late2 2 request 1 auto auto 2 false "$STORIES" "$STOK")
    one_node_run late "$L" "$L" 16
    sleep 0.3
    na_bg "$DIR/l1.out" "$DIR/l1.err" "$BIN" node --config "$L" --name s1
    wait "$RP" || fail "late: run failed"
    na_same_sorted "$DIR/late.mono" "$DIR/late.off" || fail "late: text differs"
    if grep -q "storage node s1 joined" "$DIR/late.err"; then
        grep -q "peer c0 .* connected" "$DIR/l1.err" || fail "late: s1 never saw c0"
        echo "ok: late (s1 joined during the run, text as monolithic)"
    else
        echo "note: the run ended before s1 was up; only completion is checked"
    fi
    ;;
join)
    L1="$DIR/join1.yaml"         # one cluster (name join), with and without s1
    cp "$(layout join 1 request 1 auto auto 2 false "$STORIES" "$STOK")" "$L1"
    L2=$(layout join 2 request 1 auto auto 2 false "$STORIES" "$STOK")
    RL="$DIR/joinrun.yaml"
    cp "$L1" "$RL"
    one_node_run join "$L1" "$RL" 64    # long enough that s1 can start and join
    NA_LOG_LEVEL=debug na_bg "$DIR/j1.out" "$DIR/j1.err" "$BIN" node --config "$L2" --name s1
    S1=$NA_PID
    na_wait_line "$DIR/j1.out" READY 20 || fail "join: s1 not ready"
    na_wait_line "$DIR/join.off" . 30 || fail "join: no text from the run"
    kill -0 "$RP" 2>/dev/null || fail "join: the run ended before s1 could join"
    # the layout change: a new file renamed over the one run reads
    cp "$L2" "$RL.new" && mv "$RL.new" "$RL"
    t0=$(date +%s%N)
    na_wait_line "$DIR/j1.err" "opened request" 30 || fail "join: no request placed on s1"
    t1=$(date +%s%N)
    grep -q "storage node s1 .* joined the layout" "$DIR/join.err" || fail "join: no join line"
    # from the logs' clocks: the compute node's "joined the layout" line
    # (the file read) to s1's first "opened request"
    ms() { sed -n "s/^[0-9-]*T\([0-9]*\):\([0-9]*\):\([0-9.]*\) .*/\1 \2 \3/p" | head -n 1 |
           awk '{ printf "%d", (($1 * 60 + $2) * 60 + $3) * 1000 }'; }
    r0=$(grep "joined the layout" "$DIR/join.err" | ms)
    r1=$(grep "opened request" "$DIR/j1.err" | ms)
    echo "join-to-first-request: $(( (t1 - t0) / 1000000 )) ms from the layout change" \
         "(looked at every 500 ms), $((r1 - r0)) ms from the layout read to s1's first request"
    kill -0 "$RP" 2>/dev/null || fail "join: the run ended before s1 could leave"
    kill -TERM "$S1"
    wait "$S1" || fail "join: s1 did not stop cleanly on SIGTERM"
    wait "$RP" || fail "join: run failed"
    grep -q "^offload .*2 storage node(s) (1 in the layout, 1 joined during the run)" "$DIR/join.err" ||
        fail "join: the summary does not count s1: $(grep '^offload' "$DIR/join.err")"
    na_same_sorted "$DIR/join.mono" "$DIR/join.off" || fail "join: text differs"
    echo "ok: join ($(grep -c "opened request" "$DIR/j1.err") request(s) opened on s1, left by SIGTERM, text as monolithic)"
    ;;
announce)
    # a storage node in NO layout file (`node --listen HOST:0`) announces
    # itself to c0 (which has a port in the layout, so `run` listens there);
    # first one with the wrong model shape and one with f32 KV: refused with
    # a reason, never used; then s9 with the right one: it takes new requests (its log and
    # its served-entries count at stop say so), then leaves by SIGTERM
    # without per-request warnings; every text is the monolithic one
    CPORT=$((PORT + 4))
    L=$(CPORT=$CPORT layout ann 1 request 1 auto auto 2 false "$STORIES" "$STOK")
    grep -q "port: $CPORT" "$L" || fail "announce: no compute port in the layout"
    one_node_run ann "$L" "$L" 32
    na_wait_line "$DIR/ann.off" . 30 || fail "announce: no text from the run"
    na_bg "$DIR/a8.out" "$DIR/a8.err" "$BIN" node --config "$L" --name s8 \
        --listen 127.0.0.1:0 --kv-dir "$DIR/kv/s8" --dram-mb 64 --ssd-mb 64 --shape 3:8:4:8
    S8=$NA_PID
    na_wait_line "$DIR/ann.err" "storage node s8 holds KV for 3 layers" 20 ||
        fail "announce: the wrong-shape node was not refused with a reason"
    na_bg "$DIR/a7.out" "$DIR/a7.err" "$BIN" node --config "$L" --name s7 \
        --listen 127.0.0.1:0 --kv-dir "$DIR/kv/s7" --dram-mb 64 --ssd-mb 64 --kv-dtype f32
    S7=$NA_PID
    na_wait_line "$DIR/ann.err" "storage node s7 holds KV for .* kv f32; this engine has .* kv f16" 20 ||
        fail "announce: the wrong-KV-dtype node was not refused with a reason"
    t0=$(date +%s%N)
    NA_LOG_LEVEL=debug na_bg "$DIR/a9.out" "$DIR/a9.err" "$BIN" node --config "$L" --name s9 \
        --listen 127.0.0.1:0 --kv-dir "$DIR/kv/s9" --dram-mb 64 --ssd-mb 64
    S9=$NA_PID
    na_wait_line "$DIR/a9.err" "opened request" 30 || fail "announce: no request placed on s9"
    t1=$(date +%s%N)
    kill -0 "$RP" 2>/dev/null || fail "announce: the run ended before s9 could leave"
    grep -q "announced to compute node c0" "$DIR/a9.err" || fail "announce: s9 did not announce"
    grep -q "storage node s9 joined" "$DIR/ann.err" || fail "announce: no join line"
    ms() { sed -n "s/^[0-9-]*T\([0-9]*\):\([0-9]*\):\([0-9.]*\) .*/\1 \2 \3/p" | head -n 1 |
           awk '{ printf "%d", (($1 * 60 + $2) * 60 + $3) * 1000 }'; }
    r0=$(grep "announced to compute node" "$DIR/a9.err" | ms)
    r1=$(grep "opened request" "$DIR/a9.err" | ms)
    ja=$(grep "storage node s9 announced itself" "$DIR/ann.err" | ms)
    jj=$(grep "storage node s9 joined" "$DIR/ann.err" | ms)
    echo "join-to-first-request: $(( (t1 - t0) / 1000000 )) ms from the start of s9" \
         "(process start, slots, listen, announce), $((r1 - r0)) ms from its announcement" \
         "to its first request (the run's next new request); accepted to placeable" \
         "(handshake, shape check) $((jj - ja)) ms"
    sleep 0.5           # let it decode a little
    kill -TERM "$S9"
    wait "$S9" || fail "announce: s9 did not stop cleanly on SIGTERM"
    grep -q "served [0-9]* decode entries, [1-9][0-9]* prefill tokens" "$DIR/a9.err" ||
        fail "announce: s9's counters show no work: $(grep stopping "$DIR/a9.err")"
    wait "$RP" || fail "announce: run failed"
    # s9 counted, the refused s8 and s7 not
    grep -q "^offload .*2 storage node(s) (1 in the layout, 1 joined during the run)" "$DIR/ann.err" ||
        fail "announce: the summary does not count s9 alone: $(grep '^offload' "$DIR/ann.err")"
    na_same_sorted "$DIR/ann.mono" "$DIR/ann.off" || fail "announce: text differs"
    grep -q "opened request" "$DIR/a8.err" && fail "announce: requests placed on the wrong-shape s8"
    grep -q "opened request" "$DIR/a7.err" && fail "announce: requests placed on the f32 s7"
    grep -q "storage node s9 left" "$DIR/ann.err" || fail "announce: s9's leave not logged"
    grep -q "re-placing it" "$DIR/ann.err" && fail "announce: a clean leave logged per-request warnings"
    kill -TERM "$S8" "$S7"; wait "$S8" "$S7" 2>/dev/null
    echo "ok: announce ($(grep -c "opened request" "$DIR/a9.err") request(s) opened on s9, $(grep -o "served [0-9]* decode entries, [0-9]* prefill tokens" "$DIR/a9.err"); wrong shape and KV dtype refused; left by SIGTERM; text as monolithic)"
    ;;
rejoin)
    XP="$(dirname "${3:?rejoin needs the bad_node binary (xp_peer beside it)}")/xp_peer"
    CPORT=$((PORT + 4))
    L=$(CPORT=$CPORT layout rejoin 1 request 1 auto auto 2 false "$STORIES" "$STOK")
    # no monolithic reference (the text is the announce scenario's business):
    # the run only has to outlive the announcements; it is stopped at the end
    i=0; while [ $i -lt 64 ]; do echo "Tom and Lily number $i"; i=$((i + 1)); done > "$DIR/prompts.txt"
    na_bg "$DIR/rejoin0.out" "$DIR/rejoin0.err" "$BIN" node --config "$L" --name s0
    S0=$NA_PID
    na_wait_line "$DIR/rejoin0.out" READY 20 || fail "rejoin: s0 not ready"
    na_bg "$DIR/rejoin.off" "$DIR/rejoin.err" "$BIN" run --config "$L" --cluster connect \
        --prompts "$DIR/prompts.txt" -n 400 --temp 0 --threads 1 --batch 2
    RP=$NA_PID
    na_wait_line "$DIR/rejoin.off" . 60 || fail "rejoin: no text from the run"
    t8=$(date +%s)
    na_bg "$DIR/a8.out" "$DIR/a8.err" "$BIN" node --config "$L" --name s8 \
        --listen 127.0.0.1:0 --kv-dir "$DIR/kv/s8" --dram-mb 64 --ssd-mb 64 --shape 3:8:4:8
    S8=$NA_PID
    na_wait_line "$DIR/a8.err" "refused it: .*holds KV for 3 layers.*not announcing to it again" 20 ||
        fail "rejoin: s8 was not told why it was refused: $(tail -n 3 "$DIR/a8.err")"
    SEC=$(cat "$SRC/cluster-configs/dev.secret")
    i=0
    while [ $i -lt 70 ]; do
        pids=""
        for k in 0 1 2 3 4 5 6 7 8 9; do
            "$XP" client --name "f$((i + k))" --role storage --cluster rejoin --secret "$SEC" \
                --connect "127.0.0.1:$CPORT" --rounds 0 --timeout-ms 5000 >>"$DIR/fake.log" 2>&1 &
            pids="$pids $!"
        done
        for p in $pids; do wait "$p" || fail "rejoin: an announcing peer failed: $(tail -n 2 "$DIR/fake.log")"; done
        i=$((i + 10))
    done
    kill -0 "$RP" 2>/dev/null || fail "rejoin: the run ended before the announcements were done"
    grep -q "storage node f69 announced itself" "$DIR/rejoin.err" || fail "rejoin: f69 not seen"
    na_bg "$DIR/a9.out" "$DIR/a9.err" env NA_LOG_LEVEL=debug "$BIN" node --config "$L" --name s9 \
        --listen 127.0.0.1:0 --kv-dir "$DIR/kv/s9" --dram-mb 64 --ssd-mb 64
    S9=$NA_PID
    na_wait_line "$DIR/a9.err" "opened request" 30 ||
        fail "rejoin: no request placed on s9: $(grep "s9" "$DIR/rejoin.err" | tail -n 3)"
    while [ $(( $(date +%s) - t8 )) -lt 5 ]; do sleep 0.2; done
    n=$(grep -c "storage node s8 holds KV for 3 layers" "$DIR/rejoin.err")
    [ "$n" -eq 1 ] || fail "rejoin: s8 refused $n times in 5 s (it should stop announcing)"
    kill -0 "$RP" 2>/dev/null || fail "rejoin: the run ended early: $(tail -n 3 "$DIR/rejoin.err")"
    kill -TERM "$RP"
    wait "$RP"
    rc=$?
    [ $rc -le 1 ] || [ $rc -eq 143 ] || fail "rejoin: run exited $rc on SIGTERM"
    kill -TERM "$S9" "$S8" "$S0"
    wait "$S9" || fail "rejoin: s9 did not stop cleanly"
    wait "$S8" "$S0" 2>/dev/null
    echo "ok: rejoin (s8 refused once and told why; 70 announcements that left; s9 then took $(grep -c "opened request" "$DIR/a9.err") request(s))"
    ;;
*)
    echo "unknown scenario $SCEN"; exit 2 ;;
esac
exit 0
