#!/bin/sh
# tests/cli/test_perplexity.sh [modes|errors] — `nearattn perplexity`.
#   modes   (a generated MHA model, and stories260K (GQA) when shared/models
#           has it) monolithic at the default batch and at --batch 1, offload
#           with the storage nodes started privately (partition request and
#           head; a layout with the X-cache on, which perplexity leaves off,
#           and f32 KV, which both modes take from it)
#           and with in-process slots: the same stdout (every running estimate and
#           the final "PPL = x +/- y") and the same mean NLL to the last of 17
#           digits; --chunks 2 prints the first two estimates of the full run;
#           the output has llama-perplexity's format
#   errors  a missing text file, a directory, a text shorter than two chunks,
#           --ctx past the model's context or below 4, usage errors: one clear
#           line each, exit 1 (runtime) or 2 (usage)
# Needs NA_BIN and NA_SOURCE_DIR (set by ctest).
set -u
PART=${1:-modes}
. "$(dirname "$0")/../cluster/proc.sh"
na_test_init na_ppl_test
export NA_KV_DIR="$DIR/kv"
export TMPDIR="$DIR"          # logs of the storage nodes perplexity starts
NA_LOGS="*.err nearattn-run-*.log"
CHECKS=0

# A text of plain sentences, about 6 KB.
i=0
while [ $i -lt 60 ]; do
    echo "Tim saw a red ball in the park $i times, and Lily ran to the big tree with her dog."
    i=$((i + 1))
done >"$DIR/text.txt"

"$BIN" gen-model --out "$DIR/g" --format gguf --seq-len 96 --heads 8 --quiet || fail "gen-model"

# layout NAME PARTITION MODEL TOKENIZER [XCACHE [KV_DTYPE]]: two storage
# nodes (ports are chosen at run time: --cluster start runs them privately)
layout() {
    {
        echo "cluster: { name: $1, secret_file: \"$SRC/cluster-configs/dev.secret\" }"
        echo "model: { path: \"$3\"${4:+, tokenizer: \"$4\"}, kv_dtype: ${6:-f16} }"
        echo "transport: { tls: shm }"
        echo "compute:"
        echo "  - { name: c0, host: 127.0.0.1, threads: 1 }"
        echo "storage:"
        for s in 0 1; do
            echo "  - { name: s$s, host: 127.0.0.1, port: $((14100 + s)), devices: [ { path: \"$DIR/kv/$1/s$s\", dram_mb: 64, ssd_mb: 64 } ] }"
        done
        echo "parallel: { partition: $2, batches_in_flight: 2, max_batch: 4 }"
        echo "xcache: { enabled: ${5:-false}, host_mb: 64, share: 1.0 }"
    } >"$DIR/$1.yaml"
}

# ppl NAME ARGS...: run perplexity; stdout DIR/NAME.out, stderr DIR/NAME.err,
# the mean NLL in DIR/NAME.nll
ppl() {
    _n=$1
    shift
    CHECKS=$((CHECKS + 1))
    na_fg "$DIR/$_n.out" "$DIR/$_n.err" timeout 240 "$BIN" perplexity --threads 1 "$@" ||
        fail "$_n: exit $?: $(tail -3 "$DIR/$_n.err")"
    sed -n 's/.*; mean NLL \([0-9.e+-]*\)$/\1/p' "$DIR/$_n.err" >"$DIR/$_n.nll"
    [ -s "$DIR/$_n.nll" ] || fail "$_n: no mean NLL on stderr"
}

# same REF NAME: NAME printed what REF printed, to the last digit
same() {
    CHECKS=$((CHECKS + 1))
    cmp -s "$DIR/$1.out" "$DIR/$2.out" ||
        fail "$2: stdout differs from $1: $(diff "$DIR/$1.out" "$DIR/$2.out" | head -5)"
    cmp -s "$DIR/$1.nll" "$DIR/$2.nll" ||
        fail "$2: mean NLL $(cat "$DIR/$2.nll") differs from $1's $(cat "$DIR/$1.nll")"
}

# modes TAG CTX MODEL [TOKENIZER]: every way of running gives the same figures
# for the first 4 chunks
modes() {
    t=$1; ctx=$2; m=$3; tok=${4:-}
    layout "${t}req" request "$m" "$tok"
    layout "${t}head" head "$m" "$tok"
    layout "${t}xc" request "$m" "$tok" true f32
    ppl "${t}mono" --model "$m" ${tok:+--tokenizer "$tok"} --file "$DIR/text.txt" --ctx $ctx \
        --chunks 4
    CHECKS=$((CHECKS + 1))
    n=$(grep -o '\[[0-9]*\]' "$DIR/${t}mono.out" | wc -l)
    [ "$n" = 4 ] || fail "$t: $n chunks, not 4"
    grep -Eq '^(\[[0-9]+\][0-9]+\.[0-9]{4},)+$' "$DIR/${t}mono.out" ||
        fail "$t: running estimates not as llama-perplexity prints them: $(cat "$DIR/${t}mono.out")"
    grep -Eq '^Final estimate: PPL = [0-9]+\.[0-9]{4} \+/- [0-9]+\.[0-9]{5}$' "$DIR/${t}mono.out" ||
        fail "$t: no final estimate: $(cat "$DIR/${t}mono.out")"
    ppl "${t}b1" --model "$m" ${tok:+--tokenizer "$tok"} --file "$DIR/text.txt" --ctx $ctx \
        --chunks 4 --batch 1
    same "${t}mono" "${t}b1"
    ppl "${t}req" --config "$DIR/${t}req.yaml" --file "$DIR/text.txt" --ctx $ctx --chunks 4
    grep -q "^offload (cluster started here): 2 storage node(s), partition request" \
        "$DIR/${t}req.err" || fail "$t: not offloaded: $(cat "$DIR/${t}req.err")"
    same "${t}mono" "${t}req"
    ppl "${t}head" --config "$DIR/${t}head.yaml" --mode offload --file "$DIR/text.txt" \
        --ctx $ctx --chunks 4 --batch 3
    same "${t}mono" "${t}head"
    ppl "${t}xc" --config "$DIR/${t}xc.yaml" --file "$DIR/text.txt" --ctx $ctx --chunks 4
    grep -q "X-cache is not used" "$DIR/${t}xc.err" || fail "$t: no X-cache note"
    # its f32 KV, in both modes
    ppl "${t}xcmono" --config "$DIR/${t}xc.yaml" --mode monolithic --file "$DIR/text.txt" \
        --ctx $ctx --chunks 4
    same "${t}xcmono" "${t}xc"
    CHECKS=$((CHECKS + 1))
    ! cmp -s "$DIR/${t}mono.nll" "$DIR/${t}xc.nll" || fail "$t: f32 KV gives the f16 figures"
    ppl "${t}inproc" --config "$DIR/${t}req.yaml" --cluster inproc --file "$DIR/text.txt" \
        --ctx $ctx --chunks 4
    same "${t}mono" "${t}inproc"
    # --chunks 2: the first two running estimates of the whole run
    ppl "${t}c2" --config "$DIR/${t}req.yaml" --mode monolithic --file "$DIR/text.txt" \
        --ctx $ctx --chunks 2
    CHECKS=$((CHECKS + 1))
    first2=$(head -1 "$DIR/${t}mono.out" | grep -o '^\[1\][0-9.]*,\[2\][0-9.]*,')
    [ "$(head -1 "$DIR/${t}c2.out")" = "$first2" ] ||
        fail "$t --chunks 2: '$(head -1 "$DIR/${t}c2.out")', expected '$first2'"
}

case $PART in
modes)
    modes gen 64 "$DIR/g.gguf"
    # a random model is about as good as uniform over its 512 tokens
    ppl_gen=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p' "$DIR/genmono.out")
    awk -v p="$ppl_gen" 'BEGIN { exit !(p > 100 && p < 5000) }' ||
        fail "generated model: PPL $ppl_gen"
    if [ -f "$SHARED/models/stories260K.bin" ] && [ -f "$SHARED/models/tok512.bin" ]; then
        modes st 128 "$SHARED/models/stories260K.bin" "$SHARED/models/tok512.bin"
        # the trained model knows such sentences: far better than uniform
        ppl_st=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p' "$DIR/stmono.out")
        awk -v p="$ppl_st" 'BEGIN { exit !(p > 1 && p < 30) }' || fail "stories260K: PPL $ppl_st"
    else
        echo "note: no shared/models/stories260K.bin: only the generated model"
    fi
    ;;
errors)
    # err CODE PATTERN ARGS...: exit CODE and one stderr line matching PATTERN
    err() {
        code=$1; pat=$2; shift 2
        CHECKS=$((CHECKS + 1))
        timeout 60 "$BIN" perplexity "$@" >"$DIR/e.out" 2>"$DIR/e.err" </dev/null
        rc=$?
        [ $rc = "$code" ] || fail "$*: exit $rc, expected $code: $(cat "$DIR/e.err")"
        [ "$(wc -l <"$DIR/e.err")" = 1 ] || fail "$*: not one stderr line: $(cat "$DIR/e.err")"
        grep -Eq -- "$pat" "$DIR/e.err" || fail "$*: '$(cat "$DIR/e.err")' !~ '$pat'"
    }
    M="$DIR/g.gguf"
    head -c 100 "$DIR/text.txt" >"$DIR/short.txt"
    err 1 "cannot read text file $DIR/nothere.txt: No such file" --model "$M" \
        --file "$DIR/nothere.txt"
    err 1 "text file $DIR: not a regular file" --model "$M" --file "$DIR"
    err 1 "short.txt: the text tokenizes to only [0-9]+ tokens: perplexity with a context of 64 tokens needs at least 128" \
        --model "$M" --file "$DIR/short.txt" --ctx 64
    err 1 "--ctx 97 is larger than the model's context of 96 tokens \\($M\\)" --model "$M" \
        --file "$DIR/text.txt" --ctx 97
    err 1 "--ctx 3 is too small" --model "$M" --file "$DIR/text.txt" --ctx 3
    err 1 "cannot open|No such file" --model "$DIR/nomodel.gguf" --file "$DIR/text.txt"
    err 2 "give the text with --file" --model "$M"
    err 2 "give the model with --model" --file "$DIR/text.txt"
    err 2 "unknown mode 'x'" --model "$M" --file "$DIR/text.txt" --mode x
    err 2 "unknown option '--bogus'" --model "$M" --file "$DIR/text.txt" --bogus 1
    err 2 "--ctx expects a whole number" --model "$M" --file "$DIR/text.txt" --ctx x
    ;;
*)
    echo "usage: test_perplexity.sh [modes|errors]" >&2
    exit 2
    ;;
esac
echo "$CHECKS checks passed"
