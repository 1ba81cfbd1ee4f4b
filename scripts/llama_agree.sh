#!/bin/sh
# scripts/llama_agree.sh — greedy tokens and top logits of nearattn against
# llama.cpp on the same random-weight GGUF files, for every architecture x
# weight type (issue 20's acceptance): `nearattn gen-model` writes each file
# (dim 256, hidden 512, 4 layers, 4 heads / 2 KV heads: head_dim 64, vocab
# 512, tied embeddings), tests/tools/greedy_top.c (na_greedy_top: monolithic
# engine, cpu backend, 1 thread) and tests/tools/llama_greedy.c (compiled here
# against the llama.cpp build: no flash attention, 1 thread) each decode N
# tokens greedily from the same prompt ids, both with an f32 KV cache, and a
# markdown table gives per file: tokens equal (the common prefix of the two
# greedy sequences, out of N), the first divergence (step, our token / theirs,
# and the top-2 gap of both there: a near tie or not), and the largest
# |logit difference| of the top token over the agreeing steps.
# Then, teacher forced: llama.cpp's greedy tokens are fed to both engines
# (NA_GREEDY_FORCE / NA_LLAMA_FORCE), so every step compares the logits of
# the same inputs: the steps whose argmax agrees (of N), the logit noise (the
# largest |our logit - llama.cpp's| over llama.cpp's top-2 entries of every
# step) and each step whose argmax differs, with llama.cpp's top-2 gap there:
# "tie" when that gap is below the noise (the two engines' rounding decides
# it), "REAL" when it is not (a difference of method): scripts/forced_cmp.awk,
# the comparison scripts/greedy_tie.sh makes between two nearattn backends.
#
# usage: llama_agree.sh NEARATTN NA_GREEDY_TOP [N]
#   NA_LLAMA_CPP   a llama.cpp checkout with its build in build/ (bin/ holding
#                  libllama.so); without it the script skips (exit 77)
#   NA_LLAMA_BUILD the build folder of that checkout to use instead of build/
#                  (e.g. one configured with -DGGML_CPU_AARCH64=OFF: see
#                  docs/benchmarks.md, "Same tokens as llama.cpp")
#   NA_AGREE_ARCHS / NA_AGREE_TYPES  override the lists
#   NA_AGREE_KV    f32 (default) or f16: the KV cache type of both sides.
#                  f32 is llama.cpp's exact-f32 attention: with F32 K and V
#                  its mul_mat keeps q and the softmax probabilities in f32
#                  (F32's vec_dot_type), where with F16 K/V (its default) it
#                  rounds both to f16 and nearattn does not. Its flash
#                  attention is no way out at c392e5094: the CPU kernel
#                  asserts on F32 K ("fattn: unsupported K-type": F32 has no
#                  from_float) and with F16 K/V it accumulates V in f16.
#   NA_AGREE_CHECK=1  fail (exit 1) unless every f32 file agrees for all N
#                  tokens (the architectures' math: RoPE styles, rope_freqs,
#                  biases, q/k norms) and llama.cpp loads every file whose
#                  architecture it knows (the check ctest's test_llama_agree
#                  makes; the quantised files' exact agreement is reported,
#                  not asserted: docs/benchmarks.md says why) and no
#                  teacher-forced argmax difference of any file is REAL
set -eu
NA=${1:?usage: llama_agree.sh NEARATTN NA_GREEDY_TOP [N]}
GT=${2:?usage: llama_agree.sh NEARATTN NA_GREEDY_TOP [N]}
N=${3:-64}
L=${NA_LLAMA_CPP:-}
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$HERE/../tests/tools/llama_greedy.c

if [ -z "$L" ]; then
    echo "SKIPPED: NA_LLAMA_CPP is not set (a llama.cpp checkout with build/bin/libllama.so)"
    exit 77
fi
B=${NA_LLAMA_BUILD:-$L/build}
LIB=
for d in "$B/bin" "$B/src" "$B/lib"; do
    [ -f "$d/libllama.so" ] && LIB=$d && break
done
if [ -z "$LIB" ] || [ ! -f "$L/include/llama.h" ]; then
    echo "SKIPPED: no llama.h / libllama.so under $L/include, $B/bin"
    exit 77
fi
CC=${CC:-cc}
if ! command -v "$CC" >/dev/null 2>&1; then
    echo "SKIPPED: no C compiler ($CC) to build the llama.cpp side"
    exit 77
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$CC" -O2 -o "$TMP/llama_greedy" "$SRC" -I"$L/include" -I"$L/ggml/include" \
    -L"$LIB" -lllama -lggml -lggml-base -Wl,-rpath,"$LIB"

ARCHS=${NA_AGREE_ARCHS:-llama llama3 qwen2 qwen3}
TYPES=${NA_AGREE_TYPES:-f32 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k q4_k_m}
# the ids of "hello world" in gen-model's vocabulary, BOS first
KV=${NA_AGREE_KV:-f32}
case $KV in f32|f16) ;; *) echo "NA_AGREE_KV must be f32 or f16, not '$KV'" >&2; exit 2 ;; esac
export NA_GREEDY_KV=$KV NA_LLAMA_KV=$KV NA_LLAMA_FA=0
PROMPT="1 259 331 328 335 378 409 391 335 327"
fail=0
echo "KV cache $KV on both sides; $N greedy tokens; llama.cpp from $LIB"
echo
echo "| arch | type | exact greedy match: tokens equal (of $N) | first divergence: step, ours / llama.cpp | top-2 gap there: ours / llama.cpp | max abs top-logit diff before it | teacher forced: same argmax (of $N) | logit noise | argmax differences: step (llama.cpp's top-2 gap) |"
echo "|---|---|---|---|---|---|---|---|---|"
for a in $ARCHS; do
    for t in $TYPES; do
        f=$TMP/m-$a-$t
        "$NA" gen-model --out "$f" --arch "$a" --dtype "$t" --format gguf --dim 256 \
            --hidden 512 --layers 4 --heads 4 --kv-heads 2 --vocab 512 --seq-len 512 \
            --quiet >/dev/null
        "$GT" "$f.gguf" "$N" $PROMPT >"$TMP/na.txt"
        if ! "$TMP/llama_greedy" "$f.gguf" "$N" $PROMPT >"$TMP/ll.txt" 2>"$TMP/ll.err"; then
            # an architecture this llama.cpp predates (qwen3 before 2025-04)
            why=$(grep -o "unknown model architecture: '[^']*'" "$TMP/ll.err" | head -n 1)
            echo "| $a | $t | - | llama.cpp cannot load it (${why:-see its log}) | - | - | - | - | - |"
            [ -n "$why" ] || { cat "$TMP/ll.err" >&2; fail=1; }
            continue
        fi
        row=$(paste -d' ' "$TMP/na.txt" "$TMP/ll.txt" | awk -v n="$N" '
            function abs(x) { return x < 0 ? -x : x }
            { if (!div && $2 != $7) { div = 1; step = $1; a = $2; b = $7;
                                      ga = $3 - $5; gb = $8 - $10 }
              if (!div) { eq++; d = abs($3 - $8); if (d > md) md = d } }
            END { if (div) printf "%d | %d, %d / %d | %.4f / %.4f | %.4f\n", eq, step, a, b, ga, gb, md
                  else printf "%d | none | - | %.4f\n", eq, md }')
        # teacher forced: both fed llama.cpp's tokens, every step's logits
        awk '{ print $2 }' "$TMP/ll.txt" >"$TMP/force.txt"
        NA_LLAMA_FORCE=$TMP/force.txt NA_LLAMA_LOGITS=$TMP/ll.log \
            "$TMP/llama_greedy" "$f.gguf" "$N" $PROMPT >/dev/null 2>"$TMP/ll.err" ||
            { cat "$TMP/ll.err" >&2; fail=1; continue; }
        NA_GREEDY_FORCE=$TMP/force.txt NA_GREEDY_LOGITS=$TMP/na.log \
            "$GT" "$f.gguf" "$N" $PROMPT >/dev/null
        # (scripts/forced_cmp.awk: A is llama.cpp, whose tokens both were fed)
        tf=$(awk -v B="$TMP/na.log" -f "$HERE/forced_cmp.awk" "$TMP/ll.log") || true
        case $tf in
            BAD*) echo "teacher-forced logits of $a $t: $tf" >&2
                  fail=1 ;;
            *REAL*) [ "${NA_AGREE_CHECK:-0}" = 1 ] &&
                    { echo "$a $t: a teacher-forced argmax difference above the logit noise" >&2; fail=1; } ;;
        esac
        echo "| $a | $t | $row | $tf |"
        if [ "${NA_AGREE_CHECK:-0}" = 1 ] && [ "$t" = f32 ]; then
            case $row in
                "$N | none"*) ;;
                *) echo "f32 greedy tokens differ from llama.cpp's: $a" >&2; fail=1 ;;
            esac
        fi
    done
done
exit $fail
