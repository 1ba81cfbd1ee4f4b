#!/bin/sh
# tests/serve/test_batch.sh SCENARIO — `nearattn batch` (cli/cmd_batch.c,
# serve/batch_*.c) on stories260K with the default layout
# (cluster-configs/local.yaml), real storage-node processes in offload mode.
#   resume MODE   MODE = monolithic or offload. An input of 48 lines
#                 (completions greedy and sampled without a seed, chat with
#                 --chat-template chatml, bad lines) run uninterrupted; then
#                 the same run interrupted with SIGINT once half of its records
#                 are written (exit 130, "resume with the same command", whole
#                 lines only) and resumed: the results file equals the
#                 uninterrupted one (compared after sorting the lines and
#                 dropping the response bodies' "created" time: records are
#                 written in the order requests end, see docs/batch.md); the
#                 same with SIGTERM (cancels the requests in flight), with
#                 two SIGINTs, and with SIGINT to the whole process group as a
#                 terminal's Ctrl-C sends it (offload: the storage nodes started
#                 by batch get it too); every custom_id has one record
#   bad           bad lines become error records (invalid JSON, no custom_id,
#                 a repeated one, another url or method, no body, n = 2, a
#                 chat request without a template, a prompt past the context,
#                 prompt + max_tokens past it: the message names the limit)
#                 and the valid ones complete (one that just fits); exit 0
#   repair        a results file cut in the middle of its last line (a crash
#                 while writing) is cut back to whole lines and the run
#                 completes it to the uninterrupted file; a whole last record
#                 without its newline gets the newline; a file that is not a
#                 results file is refused and left alone; a second batch on
#                 the same output is refused while the first runs
# Exit 0 pass, 1 fail, 77 skipped (no stories260K, no jq).
set -u
SCEN=$1
MODE=${2:-monolithic}
. "$(dirname "$0")/../cluster/proc.sh"
na_test_init na_batch_test
export TMPDIR="$DIR"          # the private KV directories and node logs of offload runs
NA_LOGS="*.err"
na_stories
command -v jq >/dev/null 2>&1 || { echo "SKIPPED: no jq (scripts/deps.txt)"; exit 77; }
LAYOUT="$SRC/cluster-configs/local.yaml"

# jobs FILE N: N request lines: even i greedy completions, odd i sampled
# (temperature 0.9, no seed), every 6th a chat request
jobs() {
    i=0
    while [ $i -lt "$2" ]; do
        if [ $((i % 6)) -eq 5 ]; then
            printf '{"custom_id":"chat-%02d","method":"POST","url":"/v1/chat/completions",' $i
            printf '"body":{"model":"stories","messages":[{"role":"user","content":"Tell a story about cat %d"}],"max_tokens":100,"temperature":0}}\n' $i
        elif [ $((i % 2)) -eq 0 ]; then
            printf '{"custom_id":"greedy-%02d","method":"POST","url":"/v1/completions",' $i
            printf '"body":{"prompt":"Once upon a time number %d","max_tokens":128,"temperature":0}}\n' $i
        else
            printf '{"custom_id":"sampled-%02d","method":"POST","url":"/v1/completions",' $i
            printf '"body":{"prompt":"Lily and Tom %d","max_tokens":128,"temperature":0.9}}\n' $i
        fi
        i=$((i + 1))
    done > "$1"
}

# batch NAME IN OUT ARGS...: `nearattn batch` in the foreground (120 s at
# most), stderr in DIR/NAME.err; its exit status
batch() {
    _bn=$1; _bi=$2; _bo=$3
    shift 3
    na_fg /dev/null "$DIR/$_bn.err" timeout $((120 * NA_TS)) "$BIN" batch --input "$_bi" --output "$_bo" \
        --mode "$MODE" --config "$LAYOUT" --threads 1 --chat-template chatml \
        --max-in-flight 4 --progress plain --progress-interval 0.5 "$@"
}

# norm FILE: the records sorted, keys sorted, without the "created" time
norm() {
    jq -cS 'del(.response.body.created)' "$1" | sort
}

# same A B WHAT: fail unless results files A and B hold the same records
same() {
    norm "$1" > "$1.n" || fail "$3: $1 is not JSON Lines"
    norm "$2" > "$2.n" || fail "$3: $2 is not JSON Lines"
    cmp -s "$1.n" "$2.n" || { diff "$1.n" "$2.n" | head -n 10; fail "$3: results differ"; }
}

# interrupt NAME SIGNALS...: the run of DIR/jobs.jsonl into DIR/NAME.jsonl,
# the signals sent one after another (0.05 s apart) once half the records
# are there; then the resumed run; the file must equal DIR/full.jsonl
interrupt() {
    _in=$1
    shift
    rm -f "$DIR/$_in.jsonl"
    na_bg /dev/null "$DIR/$_in.err" "$BIN" batch --input "$DIR/jobs.jsonl" \
        --output "$DIR/$_in.jsonl" --mode "$MODE" --config "$LAYOUT" --threads 1 \
        --chat-template chatml --max-in-flight 4 --progress plain --progress-interval 0.5
    _pid=$NA_PID
    _t=0
    while [ "$(cat "$DIR/$_in.jsonl" 2>/dev/null | wc -l)" -lt $((N / 2)) ]; do
        kill -0 "$_pid" 2>/dev/null || break
        sleep 0.05
        _t=$((_t + 1))
        [ $_t -gt 2000 ] && fail "$_in: no half of the records within 100 s"
    done
    for _s in "$@"; do
        case $_s in
        GROUP) kill -INT "-$_pid" 2>/dev/null ;;   # a terminal's Ctrl-C: the whole group
        *) kill "-$_s" "$_pid" 2>/dev/null ;;
        esac
        sleep 0.05
    done
    wait "$_pid"
    _rc=$?
    case $1 in INT|GROUP) _want=130 ;; TERM) _want=143 ;; *) _want=1 ;; esac
    [ $_rc -eq $_want ] || fail "$_in: interrupted run exited $_rc, not $_want"
    grep -q "resume with the same command" "$DIR/$_in.err" || fail "$_in: no resume message"
    _got=$(wc -l < "$DIR/$_in.jsonl")
    [ "$_got" -lt "$N" ] || fail "$_in: the run ended before the signal ($_got records)"
    [ -z "$(tail -c 1 "$DIR/$_in.jsonl")" ] || fail "$_in: the last line lacks its newline"
    jq -e . "$DIR/$_in.jsonl" >/dev/null || fail "$_in: a partial line after the signal"
    cp "$DIR/$_in.err" "$DIR/$_in.first.err"
    batch "$_in" "$DIR/jobs.jsonl" "$DIR/$_in.jsonl" || fail "$_in: the resumed run failed"
    grep -q "resuming: $_got of $N requests" "$DIR/$_in.err" || fail "$_in: no resume line"
    same "$DIR/$_in.jsonl" "$DIR/full.jsonl" "$_in"
    echo "ok: $_in ($MODE): $_got of $N records before the resume, the same results"
}

case "$SCEN" in
resume)
    N=48
    jobs "$DIR/jobs.jsonl" $N
    batch full "$DIR/jobs.jsonl" "$DIR/full.jsonl" || fail "uninterrupted run failed"
    [ "$(wc -l < "$DIR/full.jsonl")" -eq $N ] || fail "full: not $N records"
    [ "$(jq -r 'select(.response.status_code == 200) | .custom_id' "$DIR/full.jsonl" | sort -u |
        wc -l)" -eq $N ] || fail "full: not $N distinct custom_ids with status 200"
    jq -se 'map(select(.custom_id == "chat-05"))[0].response.body.object == "chat.completion"' \
        "$DIR/full.jsonl" >/dev/null || fail "full: chat-05 is not a chat.completion"
    grep -q "^batch: $N/$N done" "$DIR/full.err" || fail "full: no plain progress line"
    interrupt sigint INT
    interrupt sigterm TERM
    # SIGTERM cancels what is in flight; when the last ones ended in the same
    # engine pass as the signal arrived there is nothing left to cancel (the
    # line then has no suffix), but it never waits for them to finish
    grep -q "stopping (signal 15): no new requests" "$DIR/sigterm.first.err" ||
        fail "sigterm: no stopping line"
    grep -q "finishing those in flight" "$DIR/sigterm.first.err" &&
        fail "sigterm: in-flight requests left to finish instead of cancelled"
    interrupt sigint2 INT INT
    interrupt group GROUP
    ;;
bad)
    N=0
    {
        echo '{"custom_id":"ok-1","method":"POST","url":"/v1/completions","body":{"prompt":"Once","max_tokens":8,"temperature":0}}'
        echo '{"custom_id":"oops",'
        echo '{"method":"POST","url":"/v1/completions","body":{"prompt":"x"}}'
        echo '{"custom_id":"ok-1","method":"POST","url":"/v1/completions","body":{"prompt":"y"}}'
        echo '{"custom_id":"emb","method":"POST","url":"/v1/embeddings","body":{"input":"x"}}'
        echo '{"custom_id":"get","method":"GET","url":"/v1/completions","body":{}}'
        echo '{"custom_id":"nobody","method":"POST","url":"/v1/completions"}'
        echo '{"custom_id":"n2","method":"POST","url":"/v1/completions","body":{"prompt":"x","n":2}}'
        echo '{"custom_id":"type","method":"POST","url":"/v1/completions","body":{"prompt":"x","max_tokens":"ten"}}'
        echo '{"custom_id":"chat","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]}}'
        printf '{"custom_id":"long","method":"POST","url":"/v1/completions","body":{"prompt":"'
        i=0; while [ $i -lt 700 ]; do printf 'word '; i=$((i + 1)); done
        echo '"}}'
        echo ''
        echo '{"custom_id":"ok-2","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":8}}'
        echo '{"custom_id":"pastctx","method":"POST","url":"/v1/completions","body":{"prompt":"Once","max_tokens":600}}'
        echo '{"custom_id":"fits","method":"POST","url":"/v1/completions","body":{"prompt":"Once","max_tokens":510,"temperature":0}}'
    } > "$DIR/bad.jsonl"
    # without --chat-template: the chat lines get the model's "no chat template" 400
    na_fg /dev/null "$DIR/bad.err" timeout $((120 * NA_TS)) "$BIN" batch --input "$DIR/bad.jsonl" \
        --output "$DIR/bad.out" --mode "$MODE" --config "$LAYOUT" --threads 1 --progress none ||
        fail "bad: the batch failed (exit $?)"
    [ "$(wc -l < "$DIR/bad.out")" -eq 14 ] || fail "bad: not 14 records"
    code() {   # code LINE-OR-ID: the record's error code or status
        jq -r --arg k "$1" 'select(if .error.line then (.error.line | tostring) == $k
                                   else .custom_id == $k end) |
            if .error then .error.code else (.response.status_code | tostring) end' "$DIR/bad.out"
    }
    for pair in ok-1:200 2:invalid_json 3:missing_custom_id 4:duplicate_custom_id \
                emb:invalid_url get:invalid_method nobody:missing_field n2:400 type:400 \
                chat:400 long:400 ok-2:400 pastctx:400 fits:200; do
        k=${pair%%:*}; v=${pair#*:}
        [ "$(code "$k")" = "$v" ] || fail "bad: $k: '$(code "$k")', expected $v"
    done
    jq -se 'map(select(.custom_id == "chat"))[0].response.body.error.message |
        test("chat template")' "$DIR/bad.out" >/dev/null || fail "bad: the chat refusal does not name the template"
    jq -se 'map(select(.custom_id == "long"))[0].response.body.error.code ==
        "context_length_exceeded"' "$DIR/bad.out" >/dev/null ||
        fail "bad: the long prompt is not refused as context_length_exceeded"
    # prompt (2 tokens) + max_tokens past the context: refused alone, naming the limit
    jq -se 'map(select(.custom_id == "pastctx"))[0].response.body.error |
        .code == "context_length_exceeded" and (.message |
        test("the model context is 512 tokens, but 602 are requested \\(2 in the prompt, max_tokens 600\\)"))' \
        "$DIR/bad.out" >/dev/null || fail "bad: pastctx: $(grep pastctx "$DIR/bad.out")"
    jq -se 'map(select(.custom_id == "n2"))[0].response.body.error.param == "n"' \
        "$DIR/bad.out" >/dev/null || fail "bad: n = 2 refused without param n"
    grep -q "14 requests: 14 written now (2 ok, 12 error records)" "$DIR/bad.err" ||
        fail "bad: summary: $(tail -n 1 "$DIR/bad.err")"
    # resumed: nothing to do, nothing written twice
    cp "$DIR/bad.out" "$DIR/bad.out.0"
    na_fg /dev/null "$DIR/bad2.err" "$BIN" batch --input "$DIR/bad.jsonl" --output "$DIR/bad.out" \
        --mode "$MODE" --config "$LAYOUT" || fail "bad: second run failed"
    grep -q "nothing to do" "$DIR/bad2.err" || fail "bad: second run did not skip every line"
    cmp -s "$DIR/bad.out" "$DIR/bad.out.0" || fail "bad: second run changed the results"
    # --ctx past the file's context: allowed, with run's warning; then 600 tokens fit
    sed -n '/"pastctx"/p' "$DIR/bad.jsonl" >"$DIR/ctx.jsonl"
    na_fg /dev/null "$DIR/ctx.err" timeout 120 "$BIN" batch --input "$DIR/ctx.jsonl" \
        --output "$DIR/ctx.out" --mode "$MODE" --config "$LAYOUT" --threads 1 --progress none \
        --ctx 700 || fail "ctx: the batch failed (exit $?)"
    grep -q "ctx 700 overrides the model context of 512 tokens (RoPE" "$DIR/ctx.err" ||
        fail "ctx: no warning: $(cat "$DIR/ctx.err")"
    [ "$(jq -r .response.status_code "$DIR/ctx.out")" = 200 ] || fail "ctx: $(cat "$DIR/ctx.out")"
    echo "ok: bad lines ($MODE)"
    ;;
repair)
    N=24
    jobs "$DIR/jobs.jsonl" $N
    batch full "$DIR/jobs.jsonl" "$DIR/full.jsonl" || fail "uninterrupted run failed"
    # a crash in the middle of the last record
    cp "$DIR/full.jsonl" "$DIR/cut.jsonl"
    truncate -s -40 "$DIR/cut.jsonl"
    frag=$(($(tail -n 1 "$DIR/full.jsonl" | wc -c) - 40))
    batch cut "$DIR/jobs.jsonl" "$DIR/cut.jsonl" || fail "cut: the run failed"
    grep -q "ended with a partial line ($frag bytes.*cut off" "$DIR/cut.err" ||
        fail "cut: the partial line was not reported"
    grep -q "23 of 24 requests have their record" "$DIR/cut.err" || fail "cut: not 23 kept"
    same "$DIR/cut.jsonl" "$DIR/full.jsonl" cut
    # the last newline missing: added, nothing to run
    cp "$DIR/full.jsonl" "$DIR/nl.jsonl"
    truncate -s -1 "$DIR/nl.jsonl"
    batch nl "$DIR/jobs.jsonl" "$DIR/nl.jsonl" || fail "nl: the run failed"
    grep -q "newline added" "$DIR/nl.err" || fail "nl: the repair was not reported"
    grep -q "nothing to do" "$DIR/nl.err" || fail "nl: ran requests again"
    cmp -s "$DIR/nl.jsonl" "$DIR/full.jsonl" || fail "nl: not the full file"
    # not a results file: refused, untouched
    printf 'hello\nworld\n' > "$DIR/other.txt"
    batch other "$DIR/jobs.jsonl" "$DIR/other.txt"
    [ $? -eq 1 ] || fail "other: a foreign output was not refused"
    grep -q "not a batch result record" "$DIR/other.err" || fail "other: no reason"
    [ "$(cat "$DIR/other.txt")" = "$(printf 'hello\nworld')" ] || fail "other: file changed"
    # one line without newline (was emptied), and a symbolic link to it: refused, untouched
    printf 'keep me' > "$DIR/nonl.txt"
    batch nonl "$DIR/jobs.jsonl" "$DIR/nonl.txt"
    [ $? -eq 1 ] || fail "nonl: a foreign output was not refused"
    grep -q "neither whole nor the start of a batch result record" "$DIR/nonl.err" ||
        fail "nonl: no reason: $(cat "$DIR/nonl.err")"
    ln -s "$DIR/nonl.txt" "$DIR/link.jsonl"
    batch link "$DIR/jobs.jsonl" "$DIR/link.jsonl"
    [ $? -eq 1 ] || fail "link: a symbolic link as output was not refused"
    grep -q "is a symbolic link: refused" "$DIR/link.err" || fail "link: no reason: $(cat "$DIR/link.err")"
    [ "$(cat "$DIR/nonl.txt")" = "keep me" ] || fail "nonl: file changed"
    # two batches on one output: the second is refused while the first runs
    rm -f "$DIR/two.jsonl"
    na_bg /dev/null "$DIR/two1.err" timeout $((120 * NA_TS)) "$BIN" batch --input "$DIR/jobs.jsonl" \
        --output "$DIR/two.jsonl" --mode "$MODE" --config "$LAYOUT" --threads 1 \
        --chat-template chatml --max-in-flight 1 --progress none
    P1=$NA_PID
    na_wait_line "$DIR/two.jsonl" custom_id 60 || fail "two: the first run wrote nothing"
    batch two2 "$DIR/jobs.jsonl" "$DIR/two.jsonl"
    [ $? -eq 1 ] || fail "two: the second run was not refused"
    grep -q "being written by another process" "$DIR/two2.err" || fail "two: no reason"
    wait "$P1" || fail "two: the first run failed"
    same "$DIR/two.jsonl" "$DIR/full.jsonl" two
    echo "ok: repair ($MODE)"
    ;;
*)
    echo "usage: test_batch.sh resume|bad|repair [monolithic|offload]"
    exit 2
    ;;
esac
exit 0
