#!/bin/sh
# tests/cli/test_run_cli.sh [basic|story] — `nearattn run`: exit codes and
# one-line messages for bad input, and a short successful generation, in
# monolithic mode (the offload mode, the default, is tested by
# tests/cluster/test_offload_run.sh). Needs NA_BIN (set by ctest).
#   basic  (default) everything that runs on generated models
#   story  the checks that need shared/models/stories260K.bin and tok512.bin
#          (the known greedy story, truncated files, batches of prompts,
#          the same greedy texts at --batch 1 and batched);
#          exits 77 (skipped) when they are absent
set -u
PART=${1:-basic}
case $PART in
    basic|story) ;;
    *) echo "usage: test_run_cli.sh [basic|story]" >&2; exit 2 ;;
esac
SHARED=${NA_SHARED_DIR:-}
. "$(dirname "$0")/lib.sh"
na_cli_init nearattn-runcli
CHECKS=0

# expect CODE PATTERN ARGS... : exit status CODE, stderr a single line
# matching PATTERN (grep -E).
expect() {
    code=$1; pat=$2; shift 2
    CHECKS=$((CHECKS + 1))
    "$BIN" run --mode monolithic "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
    if [ "$rc" != "$code" ]; then
        fail "run $*: exit $rc, expected $code; stderr: $(cat "$TMP/err")"
        return
    fi
    lines=$(wc -l <"$TMP/err")
    if [ "$lines" != 1 ]; then
        fail "run $*: $lines stderr lines, expected 1: $(cat "$TMP/err")"
        return
    fi
    if ! grep -Eq -- "$pat" "$TMP/err"; then
        fail "run $*: stderr '$(cat "$TMP/err")' does not match '$pat'"
    fi
}

MODEL=""
TOK=""
if [ -n "$SHARED" ] && [ -r "$SHARED/models/stories260K.bin" ] && [ -r "$SHARED/models/tok512.bin" ]; then
    MODEL="$SHARED/models/stories260K.bin"
    TOK="$SHARED/models/tok512.bin"
fi
if [ "$PART" = story ] && [ -z "$MODEL" ]; then
    echo "SKIP: shared/models/stories260K.bin or tok512.bin absent (NA_SHARED_DIR='$SHARED')"
    exit 77
fi

if [ "$PART" = basic ]; then

# --help
CHECKS=$((CHECKS + 1))
"$BIN" run --help >"$TMP/out" 2>&1 || fail "run --help exited non-zero"
grep -q -- "--mode" "$TMP/out" || fail "run --help does not mention --mode"

# usage errors: exit 2
expect 2 "unknown option '--frobnicate'" --frobnicate 3
expect 2 "unknown option '--bogus'" --bogus
expect 2 "-n needs a value" -n
expect 2 "-n 0 is invalid" -n 0
expect 2 "-n -5 is invalid" -n -5
expect 2 "-n expects a whole number" -n abc
expect 2 "temperature must be >= 0" --temp -1
expect 2 "--temp expects a number" --temp warm
expect 2 "top-p 0 is invalid" --top-p 0
expect 2 "top-p 1.5 is invalid" --top-p 1.5
expect 1 "nope.yaml" --mode offload --config "$TMP/nope.yaml"
expect 2 "unknown --cluster 'far'" --mode offload --cluster far
expect 2 "unknown mode 'fast'" --mode fast
expect 2 "--kv-dtype expects f16, bf16 or f32" --kv-dtype q8_0
expect 2 "unknown backend 'gpu'" --backend gpu
expect 2 "either --prompt or --prompts" --prompt a --prompts "$TMP/p.txt"
expect 2 "unexpected argument 'stray'" stray

# runtime errors: exit 1, the message names the file
expect 1 "$TMP/missing.bin" --model "$TMP/missing.bin" --tokenizer "$TMP/missing.tok"
head -c 3000 /dev/urandom >"$TMP/garbage.bin"
expect 1 "garbage.bin" --model "$TMP/garbage.bin" --tokenizer "$TMP/garbage.tok"
printf 'GGUF\003\000\000\000' >"$TMP/short.gguf"
expect 1 "short.gguf" --model "$TMP/short.gguf"
expect 1 "prompts file .*nope.txt" --prompts "$TMP/nope.txt" -n 2
: >"$TMP/empty.txt"
expect 1 "holds no prompt" --prompts "$TMP/empty.txt" -n 2

fi # basic

if [ "$PART" = story ]; then
    head -c 20000 "$MODEL" >"$TMP/trunc.bin"
    expect 1 "trunc.bin" --model "$TMP/trunc.bin" --tokenizer "$TOK"
    expect 1 "missing.tok" --model "$MODEL" --tokenizer "$TMP/missing.tok"
    head -c 100 "$TOK" >"$TMP/trunc.tok"
    expect 1 "trunc.tok" --model "$MODEL" --tokenizer "$TMP/trunc.tok"
    cp "$MODEL" "$TMP/lonely.bin"
    expect 1 "without a tokenizer" --model "$TMP/lonely.bin"
    LONG=$(awk 'BEGIN { for (i = 0; i < 700; i++) printf "cat "; }')
    expect 1 "longer than the model context" --model "$MODEL" --tokenizer "$TOK" --prompt "$LONG" -n 4

    # the known greedy story, streamed, and the summary line
    CHECKS=$((CHECKS + 1))
    if "$BIN" run --mode monolithic --model "$MODEL" --tokenizer "$TOK" --prompt "Once upon a time" \
           --temp 0 -n 40 --threads 1 >"$TMP/out" 2>"$TMP/err"; then
        grep -q "^Once upon a time, there was a little girl named Lily. She loved to play outside in the park." "$TMP/out" ||
            fail "greedy story: got '$(cat "$TMP/out")'"
        grep -Eq "prompt tokens [0-9]+, generated tokens 40, prefill [0-9.]+ tok/s, decode [0-9.]+ tok/s" "$TMP/err" ||
            fail "summary line: got '$(cat "$TMP/err")'"
    else
        fail "greedy story run failed: $(cat "$TMP/err")"
    fi
    # --top-p 1e-300 (0 as a float) is the most likely token alone: the greedy story
    CHECKS=$((CHECKS + 1))
    if "$BIN" run --mode monolithic --model "$MODEL" --tokenizer "$TOK" --prompt "Once upon a time" \
           --temp 1 --top-p 1e-300 --seed 3 -n 40 --threads 1 >"$TMP/tiny" 2>"$TMP/err"; then
        cmp -s "$TMP/out" "$TMP/tiny" || fail "--top-p 1e-300 is not the greedy text: '$(cat "$TMP/tiny")'"
    else
        fail "--top-p 1e-300 refused: $(cat "$TMP/err")"
    fi
    # several prompts as one batch, f32 KV, ref backend
    printf 'Once upon a time\n\nThe dog\nLily saw a bird\n' >"$TMP/p.txt"
    CHECKS=$((CHECKS + 1))
    if "$BIN" run --mode monolithic --model "$MODEL" --tokenizer "$TOK" --prompts "$TMP/p.txt" --temp 0.8 \
           --seed 7 -n 20 --kv-dtype f32 --batch 2 >"$TMP/out" 2>"$TMP/err"; then
        [ "$(grep -c '^\[[123]\] ' "$TMP/out")" = 3 ] || fail "--prompts: got '$(cat "$TMP/out")'"
        "$BIN" run --mode monolithic --model "$MODEL" --tokenizer "$TOK" --prompts "$TMP/p.txt" --temp 0.8 \
            --seed 7 -n 20 --kv-dtype f32 >"$TMP/out2" 2>/dev/null
        cmp -s "$TMP/out" "$TMP/out2" || fail "--prompts: same seed, different text"
    else
        fail "--prompts run failed: $(cat "$TMP/err")"
    fi
    # greedy text does not depend on the batch: 64 prompts one at a time
    # (--batch 1) and all together give the same texts (before the engine's
    # kernels were batch-invariant by default, 3 of these 64 differed: the
    # sgemm / AVX-512 GEMM paths sum a row in another order from batch 16)
    awk 'BEGIN { split("Lily,Tom,a little dog,the cat,Sue,Ben,a bird,the sun,Mom,a big bear,the boy,Tim", s, ",");
                 split("went to,saw,wanted,liked,found,played with,looked at,ran to", v, ",");
                 split("the park,a ball,the tree,a toy,the sky,her friend,a cake,the box", o, ",");
                 for (i = 0; i < 64; i++)
                     printf "%s %s %s\n", s[i % 12 + 1], v[(i * 5) % 8 + 1], o[(i * 3 + int(i / 8)) % 8 + 1] }' \
        >"$TMP/p64.txt"
    # the texts by request index (requests finish in any order)
    by_index() {
        awk '/^\[[0-9]+\] / { id = substr($1, 2, length($1) - 2) + 0 } { print id "\t" NR "\t" $0 }' "$1" |
            sort -k1,1n -k2,2n | cut -f1,3-
    }
    CHECKS=$((CHECKS + 1))
    if "$BIN" run --mode monolithic --model "$MODEL" --tokenizer "$TOK" --prompts "$TMP/p64.txt" \
           --temp 0 -n 200 --batch 1 >"$TMP/b1" 2>"$TMP/err" &&
       "$BIN" run --mode monolithic --model "$MODEL" --tokenizer "$TOK" --prompts "$TMP/p64.txt" \
           --temp 0 -n 200 >"$TMP/b64" 2>>"$TMP/err"; then
        by_index "$TMP/b1" >"$TMP/b1.s"
        by_index "$TMP/b64" >"$TMP/b64.s"
        [ "$(grep -c '^[0-9]*	\[[0-9]*\] ' "$TMP/b1.s")" = 64 ] || fail "64 prompts: got '$(cat "$TMP/b1")'"
        if ! cmp -s "$TMP/b1.s" "$TMP/b64.s"; then
            fail "greedy text depends on the batch: prompts $(diff "$TMP/b1.s" "$TMP/b64.s" |
                 sed -n 's/^[<>] \([0-9]*\)	.*/\1/p' | sort -un | tr '\n' ' ')differ between --batch 1 and 64"
        fi
    else
        fail "64-prompt greedy runs failed: $(cat "$TMP/err")"
    fi
fi # story

if [ "$PART" = basic ]; then

# generated models: a GGUF brings its own tokenizer; a checkpoint P.bin finds
# P.tok.bin beside it
CHECKS=$((CHECKS + 1))
if "$BIN" gen-model --out "$TMP/g" --format both --dtype q8_0 --dim 64 --hidden 160 --quiet \
       >"$TMP/out" 2>"$TMP/err"; then
    "$BIN" run --mode monolithic --model "$TMP/g.gguf" --prompt "hi there" -n 8 --temp 0 >"$TMP/out" 2>"$TMP/err" ||
        fail "GGUF model run failed: $(cat "$TMP/err")"
    "$BIN" run --mode monolithic --model "$TMP/g.bin" --prompt "hi there" -n 8 --temp 0.7 --seed 3 >"$TMP/out" 2>"$TMP/err" ||
        fail "checkpoint with P.tok.bin run failed: $(cat "$TMP/err")"
    expect 1 "longer than the model context" --model "$TMP/g.gguf" \
        --prompt "$(awk 'BEGIN { for (i = 0; i < 300; i++) printf "z%d ", i; }')" -n 2
else
    fail "gen-model failed: $(cat "$TMP/err")"
fi

# no --model and no shared model: a generated model with a warning
CHECKS=$((CHECKS + 1))
if NA_SHARED_DIR="$TMP/noshared" "$BIN" run --mode monolithic --prompt "hello" -n 5 --temp 0 >"$TMP/out" 2>"$TMP/err"; then
    grep -q "meaningless" "$TMP/err" || fail "fallback model: no warning in '$(cat "$TMP/err")'"
    grep -q "generated tokens" "$TMP/err" || fail "fallback model: no summary in '$(cat "$TMP/err")'"
else
    fail "fallback model run failed: $(cat "$TMP/err")"
fi

fi # basic

echo "$PART: $CHECKS checks, $FAILS failed"
[ "$FAILS" = 0 ]
