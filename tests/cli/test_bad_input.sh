#!/bin/sh
# tests/cli/test_bad_input.sh PART — `nearattn run` and friends on bad input
# (issue 13). Needs NA_BIN (set by ctest). Runs in the source tree (the
# offload checks use cluster-configs/local.yaml with --cluster inproc).
#   nan    a generated model with a NaN weight: the requests whose logits are
#          not finite fail with the reason, the others go on, exit status 1
#          (monolithic and offload), greedy and sampled
#   fifo   a FIFO as --config, --model, --tokenizer, check-config FILE, the
#          layout's secret_file or batch --output is refused at once, naming
#          the file; so is a control character in a KV directory (node
#          --kv-dir, a layout's path)
#   ctx    a model of small seq_len: the summary and the request say it
#          stopped at the model context; --ctx N overrides it with a warning
#   seed   one seed gives the same sampled texts at --batch 1, batched, and
#          offload (--cluster inproc)
#   request  a prompt too long for the context, or a --prompts line holding a
#          NUL byte, fails alone (monolithic and offload): the reason names it,
#          the others go on, the summary counts it, exit status 1
set -u
PART=${1:?usage: test_bad_input.sh nan|fifo|ctx|seed|request}
# hang detectors below are sized for Release; the sanitizer build scales them
NA_TS=${NA_TEST_TIME_SCALE:-1}
case $NA_TS in ''|*[!0-9]*) NA_TS=1 ;; esac
. "$(dirname "$0")/lib.sh"
na_cli_init nearattn-badin
CHECKS=0

# patch_nan FILE OFFSET: overwrite the f32 at byte OFFSET with a quiet NaN
patch_nan() {
    printf '\000\000\300\177' | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}

case $PART in
nan)
    # untied: the classifier is not the embedding table, so a NaN in one
    # token's embedding row reaches only the prompts holding that token
    "$BIN" gen-model --out "$TMP/u" --format llama2c --untied --quiet || fail "gen-model"
    cp "$TMP/u.tok.bin" "$TMP/one.tok.bin"
    cp "$TMP/u.bin" "$TMP/one.bin"
    # token 353 is "~" in gen-model's tokenizer; its row starts at 28 + 353*64*4
    patch_nan "$TMP/one.bin" $((28 + 353 * 64 * 4))
    cp "$TMP/u.tok.bin" "$TMP/all.tok.bin"
    cp "$TMP/u.bin" "$TMP/all.bin"
    # layer 0's attention RMSNorm weight (after the 512x64 embedding): every
    # row of every request turns NaN
    patch_nan "$TMP/all.bin" $((28 + 512 * 64 * 4))
    printf 'hello\nab ~ cd\nworld\n' >"$TMP/p.txt"
    for mode in monolithic offload; do
        for temp in 0 0.9; do
            CHECKS=$((CHECKS + 1))
            timeout $((60 * NA_TS)) "$BIN" run --mode $mode --cluster inproc --model "$TMP/one.bin" \
                --prompts "$TMP/p.txt" -n 8 --temp $temp --seed 5 --batch 3 \
                >"$TMP/out" 2>"$TMP/err" </dev/null
            rc=$?
            [ $rc = 1 ] || fail "$mode temp $temp: exit $rc, expected 1: $(cat "$TMP/err")"
            grep -q "request 2 failed.*logits are not finite (NaN/Inf) at token 9" "$TMP/err" ||
                fail "$mode temp $temp: no reason for request 2: $(cat "$TMP/err")"
            grep -q '^\[2\] FAILED' "$TMP/out" || fail "$mode temp $temp: [2] not FAILED"
            grep -q '^\[1\] hello' "$TMP/out" || fail "$mode temp $temp: [1] did not go on"
            grep -q '^\[3\] world' "$TMP/out" || fail "$mode temp $temp: [3] did not go on"
            [ "$(grep -c 'failed (' "$TMP/err")" = 1 ] ||
                fail "$mode temp $temp: more than one request failed: $(cat "$TMP/err")"
            CHECKS=$((CHECKS + 1))
            timeout $((60 * NA_TS)) "$BIN" run --mode $mode --cluster inproc --model "$TMP/all.bin" \
                --prompt "hi" -n 8 --temp $temp --seed 5 >"$TMP/out" 2>"$TMP/err" </dev/null
            rc=$?
            [ $rc = 1 ] || fail "$mode temp $temp all-NaN: exit $rc, expected 1"
            grep -q "logits are not finite (NaN/Inf) at token" "$TMP/err" ||
                fail "$mode temp $temp all-NaN: no reason: $(cat "$TMP/err")"
            # the prompt is echoed only with a generated text: none here
            [ ! -s "$TMP/out" ] || fail "$mode temp $temp all-NaN: stdout: $(cat "$TMP/out")"
        done
    done
    # --check-weights refuses both files at load, naming the tensor; a clean
    # model passes it
    for f in one:"token_embd element 22592 " all:"attn_norm of layer 0 element 0 "; do
        CHECKS=$((CHECKS + 1))
        "$BIN" run --mode monolithic --model "$TMP/${f%%:*}.bin" --check-weights --prompt hi -n 2 \
            >"$TMP/out" 2>"$TMP/err" </dev/null
        rc=$?
        [ $rc = 1 ] && grep -q "weight ${f#*:}is not finite (NaN/Inf)" "$TMP/err" ||
            fail "--check-weights ${f%%:*}: exit $rc: $(cat "$TMP/err")"
    done
    CHECKS=$((CHECKS + 1))
    "$BIN" run --mode monolithic --model "$TMP/u.bin" --check-weights --prompt hi -n 2 \
        >"$TMP/out" 2>"$TMP/err" </dev/null || fail "--check-weights on a clean model: $(cat "$TMP/err")"
    ;;
fifo)
    # refused_fast WHAT PATTERN CMD...: exits non-zero within 10 s x NA_TS (a plain
    # open of a FIFO with no writer blocks forever), stderr matches PATTERN
    refused_fast() {
        what=$1; pat=$2; shift 2
        CHECKS=$((CHECKS + 1))
        timeout $((10 * NA_TS)) "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
        rc=$?
        if [ $rc = 124 ]; then
            fail "$what: hung on the FIFO"
        elif [ $rc = 0 ]; then
            fail "$what: exit 0"
        elif ! grep -q -- "$pat" "$TMP/err"; then
            fail "$what: stderr '$(cat "$TMP/err")' does not match '$pat'"
        fi
    }
    mkfifo "$TMP/fifo" || { echo "SKIP: mkfifo failed"; exit 77; }
    F="$TMP/fifo"
    MSG="$F: .*not a regular file (it is a FIFO)"
    "$BIN" gen-model --out "$TMP/g" --format both --quiet || fail "gen-model"
    refused_fast "check-config FIFO" "$MSG" "$BIN" check-config "$F"
    refused_fast "run --config FIFO" "$MSG" "$BIN" run --config "$F" --model "$TMP/g.gguf" -n 2
    refused_fast "run --model FIFO" "$MSG" "$BIN" run --mode monolithic --model "$F" -n 2
    refused_fast "run --tokenizer FIFO" "$MSG" \
        "$BIN" run --mode monolithic --model "$TMP/g.bin" --tokenizer "$F" -n 2
    # a layout whose secret_file is a FIFO
    printf 'cluster: { secret_file: fifo }\ncompute: [ { name: c0, host: 127.0.0.1 } ]\n%s\n%s\n' \
        'storage:' \
        '  - { name: s0, host: 127.0.0.1, port: 14001, devices: [ { path: kv/s0d0, dram_mb: 1, ssd_mb: 1 } ] }' \
        >"$TMP/secret.yaml"
    refused_fast "secret_file FIFO" "$MSG" "$BIN" check-config "$TMP/secret.yaml"
    refused_fast "run --config (secret_file FIFO)" "$MSG" \
        "$BIN" run --config "$TMP/secret.yaml" --model "$TMP/g.gguf" -n 2
    # batch --output FIFO: opening it for appending would wait for a reader
    printf '{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"prompt":"hi"}}\n' \
        >"$TMP/in.jsonl"
    refused_fast "batch --output FIFO" "--output $F is not a regular file (it is a FIFO)" \
        "$BIN" batch --input "$TMP/in.jsonl" --output "$F" --mode monolithic --model "$TMP/g.gguf"
    # a newline in a KV directory: node --kv-dir and a layout's path
    refused_fast "node --kv-dir with a newline" "control character (0x0a at byte 4)" \
        "$BIN" node --config "$TMP/secret.yaml" --name s0 --kv-dir "$(printf '/tmp\nx')"
    printf '0123456789abcdef0123456789abcdef\n' >"$TMP/ok.secret"
    chmod 600 "$TMP/ok.secret"
    printf 'cluster: { secret_file: ok.secret }\ncompute: [ { name: c0, host: 127.0.0.1 } ]\n%s\n%s\n' \
        'storage:' \
        '  - { name: s0, host: 127.0.0.1, port: 14001, devices: [ { path: "kv/a\tb", dram_mb: 1, ssd_mb: 1 } ] }' \
        >"$TMP/tab.yaml"
    refused_fast "check-config, a tab in a KV path" "control character (0x09 at byte 4)" \
        "$BIN" check-config "$TMP/tab.yaml"
    ;;
ctx)
    # a model of 32 positions: greedy generation of 100 tokens stops at the
    # context, and says so; --ctx 64 moves the limit with a warning
    "$BIN" gen-model --out "$TMP/s" --format gguf --seq-len 32 --quiet || fail "gen-model"
    # ctx_run MODE CTX GEN [--ctx N]: a greedy run of 100 tokens after a 6-token
    # prompt stops at CTX positions having generated GEN tokens, and says so
    ctx_run() {
        m=$1; c=$2; g=$3; shift 3
        CHECKS=$((CHECKS + 1))
        timeout $((60 * NA_TS)) "$BIN" run --mode $m --cluster inproc --model "$TMP/s.gguf" --prompt "hello" \
            -n 100 --temp 0 "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
        rc=$?
        [ $rc = 0 ] || fail "$m $*: exit $rc: $(cat "$TMP/err")"
        grep -q "^nearattn run: request 1 stopped at the model context ($c tokens)" "$TMP/err" ||
            fail "$m $*: no finish reason: $(cat "$TMP/err")"
        grep -q "^1 request(s) stopped at the model context ($c tokens)" "$TMP/err" ||
            fail "$m $*: not in the summary: $(cat "$TMP/err")"
        grep -q "generated tokens $g," "$TMP/err" || fail "$m $*: not $c - 6 + 1 tokens"
    }
    for mode in monolithic offload; do
        ctx_run $mode 32 27
        ctx_run $mode 64 59 --ctx 64
        grep -q "warning: --ctx 64 overrides the model context of 32 tokens (RoPE" "$TMP/err" ||
            fail "$mode --ctx 64: no warning: $(cat "$TMP/err")"
        ctx_run $mode 16 11 --ctx 16   # shorter: a warning without the RoPE note
        grep -q "warning: --ctx 16 overrides the model context of 32 tokens$" "$TMP/err" ||
            fail "$mode --ctx 16: no warning: $(cat "$TMP/err")"
    done
    for bad in 0 -3 x; do
        CHECKS=$((CHECKS + 1))
        "$BIN" run --mode monolithic --model "$TMP/s.gguf" --ctx "$bad" >"$TMP/out" 2>"$TMP/err"
        rc=$?
        [ $rc = 2 ] && grep -q -- "--ctx" "$TMP/err" || fail "--ctx $bad: exit $rc: $(cat "$TMP/err")"
    done
    ;;
seed)
    # 24 prompts on a generated model whose FFN width (172) is no multiple of
    # 8 (the vector tails), 60 tokens each at --temp 0.9: --batch 1, 5 and all
    # in monolithic mode, and offload with in-process slots, must print the
    # same texts for one seed (order aside: batches finish in another order)
    "$BIN" gen-model --out "$TMP/m" --format gguf --dtype f32 --hidden 172 --quiet || fail "gen-model"
    i=0
    while [ $i -lt 24 ]; do echo "once upon a time $i"; i=$((i + 1)); done >"$TMP/p.txt"
    for top_p in 0.9 1; do
        n=0
        for how in "monolithic 1" "monolithic 5" "monolithic 24" "offload 24" "offload 3"; do
            set -- $how
            CHECKS=$((CHECKS + 1))
            n=$((n + 1))
            timeout $((120 * NA_TS)) "$BIN" run --mode $1 --cluster inproc --model "$TMP/m.gguf" \
                --prompts "$TMP/p.txt" -n 60 --temp 0.9 --top-p $top_p --seed 42 --batch $2 \
                >"$TMP/out" 2>"$TMP/err" </dev/null || fail "$how: $(cat "$TMP/err")"
            sort "$TMP/out" >"$TMP/t$n.txt"
            [ "$(grep -c '^\[' "$TMP/t$n.txt")" = 24 ] || fail "$how: not 24 texts"
            if [ $n -gt 1 ] && ! cmp -s "$TMP/t1.txt" "$TMP/t$n.txt"; then
                fail "top-p $top_p, $how: texts differ from monolithic --batch 1:" \
                    "$(diff "$TMP/t1.txt" "$TMP/t$n.txt" | head -4)"
            fi
        done
        # another seed gives other texts (the seed is used at all)
        CHECKS=$((CHECKS + 1))
        "$BIN" run --mode monolithic --model "$TMP/m.gguf" --prompts "$TMP/p.txt" -n 60 \
            --temp 0.9 --top-p $top_p --seed 43 2>/dev/null </dev/null | sort >"$TMP/other.txt"
        ! cmp -s "$TMP/t1.txt" "$TMP/other.txt" || fail "top-p $top_p: seeds 42 and 43 agree"
    done
    ;;
request)
    "$BIN" gen-model --out "$TMP/m" --format llama2c --seq-len 32 --quiet || fail "gen-model"
    long=$(i=0; while [ $i -lt 40 ]; do printf 'word '; i=$((i + 1)); done)
    printf 'hello\n%s\nworld\n' "$long" >"$TMP/long.txt"
    printf 'hello\nab\000cd\nworld\n' >"$TMP/nul.txt"
    for mode in monolithic offload; do
        for f in long:"prompt 2: prompt of [0-9]* tokens is longer than the model context" \
                 nul:"nul.txt:2: the prompt holds a NUL byte"; do
            CHECKS=$((CHECKS + 1))
            timeout $((60 * NA_TS)) "$BIN" run --mode $mode --cluster inproc --model "$TMP/m.bin" \
                --prompts "$TMP/${f%%:*}.txt" -n 4 --temp 0 >"$TMP/out" 2>"$TMP/err" </dev/null
            rc=$?
            what="$mode ${f%%:*}"
            [ $rc = 1 ] || fail "$what: exit $rc, expected 1: $(cat "$TMP/err")"
            grep -q "${f#*:}" "$TMP/err" || fail "$what: no reason: $(cat "$TMP/err")"
            grep -q '^\[2\] FAILED' "$TMP/out" || fail "$what: [2] not FAILED"
            grep -q '^\[1\] hello' "$TMP/out" || fail "$what: [1] did not go on"
            grep -q '^\[3\] world' "$TMP/out" || fail "$what: [3] did not go on"
            grep -Eq "(^|[^0-9])1 request\(s\) failed" "$TMP/err" ||
                fail "$what: the summary does not count the failed request: $(cat "$TMP/err")"
        done
    done
    # a single prompt holding a NUL byte: refused, nothing runs
    CHECKS=$((CHECKS + 1))
    printf 'ab\000cd\n' >"$TMP/nul1.txt"
    "$BIN" run --mode monolithic --model "$TMP/m.bin" --prompts "$TMP/nul1.txt" -n 4 \
        >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
    [ $rc = 1 ] && grep -q "nul1.txt:1: the prompt holds a NUL byte" "$TMP/err" ||
        fail "single NUL prompt: exit $rc: $(cat "$TMP/err")"
    ;;
*)
    echo "unknown part $PART" >&2
    exit 2
    ;;
esac
echo "$PART: $CHECKS checks, $FAILS failed"
[ "$FAILS" = 0 ]
