#!/bin/sh
# scripts/greedy_tie.sh — are two backends' greedy decodings the same up to
# near ties? Random-weight quantised models have logits whose top two are
# often within f32 rounding of each other, so any change of summation order
# (the cpu backend's SIMD lanes, the plain-C reference, a GPU warp) may flip
# one greedy choice and every token after it: text equality cannot tell that
# from a real error. Teacher forced, it can:
#   1. backend A decodes N tokens greedily from each prompt (na_greedy_top,
#      one sequence, its logits of every step kept);
#   2. backend B is fed A's tokens (NA_GREEDY_FORCE), so each of its steps
#      sees the inputs of A's step, and its logits are kept too;
#   3. scripts/forced_cmp.awk compares the two, step by step: A's top-2
#      logits on B must be within TOL * max(1, |logit|) of A's, and where
#      B's argmax is not A's token, both B's logit of A's token below its
#      top logit and A's own top-2 margin there within 2 TOL * max(1,
#      |logit|) (a gap of two ids, each off by TOL), or the step fails.
# Prints a line per prompt and a last line "PASS (argmax equal at every step:
# S steps; noise X)", "PASS (equal up to K near-tie steps of S: max |dlogit|
# X; noise X)" or "FAIL (prompt P, step ...: ids and logits)"; the noise is
# the largest |A - B| over A's top-2 logits of every step.
#
# usage: greedy_tie.sh NEARATTN NA_GREEDY_TOP MODEL N A B PROMPT [PROMPT ...]
#   NEARATTN, NA_GREEDY_TOP  the binaries (the prompts are tokenized with
#                  `nearattn tokenize --model MODEL`: BOS as the file asks)
#   A, B           backends (cpu, ref, cuda: NA_GREEDY_BACKEND)
#   NA_TIE_TOL     the relative tolerance (default 0.05: docs/gpu.md,
#                  "Near ties", has the margins it was chosen from)
#   NA_TIE_VERBOSE=1 every flip on its own line (forced_cmp.awk's verbose)
#   NA_TIE_KEEP=DIR  keep the ids, top-2 lines and logits there
#   NA_TIE_PERTURB=ID:DELTA  for testing the check: B's logit of ID is
#                  raised by DELTA in every step it is read at
# Runs the prompts at once (one process each). Exit 0 PASS, 1 FAIL, 2 a run
# or the comparison could not be made.
set -u
usage() { echo "usage: greedy_tie.sh NEARATTN NA_GREEDY_TOP MODEL N A B PROMPT [PROMPT ...]" >&2; exit 2; }
[ $# -ge 7 ] || usage
NA=$1 GT=$2 M=$3 N=$4 BA=$5 BB=$6
shift 6
HERE=$(cd "$(dirname "$0")" && pwd)
TOL=${NA_TIE_TOL:-0.05}
case $N in ''|*[!0-9]*) echo "greedy_tie.sh: N '$N' is not a count" >&2; exit 2 ;; esac
awk -v t="$TOL" 'BEGIN { exit !(t ~ /^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/) }' ||
    { echo "greedy_tie.sh: NA_TIE_TOL '$TOL' is not a number >= 0" >&2; exit 2; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/na-tie-XXXXXX") || exit 2
trap 'rm -rf "$TMP"' EXIT
KEEP=${NA_TIE_KEEP:-$TMP}
mkdir -p "$KEEP" || exit 2

# 1. the ids, then A greedily, every prompt at once
i=0
for p in "$@"; do
    "$NA" tokenize --model "$M" --prompt "$p" >"$KEEP/ids-$i" 2>"$TMP/tok-$i.err" ||
        { echo "greedy_tie.sh: tokenize '$p': $(tail -1 "$TMP/tok-$i.err")" >&2; exit 2; }
    i=$((i + 1))
done
np=$i
run() {    # run K BACKEND TAG [FORCE]
    env NA_GREEDY_BACKEND="$2" NA_GREEDY_LOGITS="$KEEP/$3-$1.log" ${4:+NA_GREEDY_FORCE="$4"} \
        "$GT" "$M" "$N" $(cat "$KEEP/ids-$1") >"$KEEP/$3-$1.txt" 2>"$TMP/$3-$1.err"
}
all() {    # all BACKEND TAG [force]: every prompt, in parallel; 0 if all ran
    local_pids=""
    k=0
    while [ $k -lt "$np" ]; do
        if [ -n "${3:-}" ]; then
            awk '{ print $2 }' "$KEEP/a-$k.txt" >"$KEEP/force-$k"
            run $k "$1" "$2" "$KEEP/force-$k" &
        else
            run $k "$1" "$2" &
        fi
        local_pids="$local_pids $!"
        k=$((k + 1))
    done
    rc=0
    for pid in $local_pids; do wait "$pid" || rc=1; done
    k=0
    while [ $k -lt "$np" ]; do
        [ -s "$TMP/$2-$k.err" ] && [ $rc -ne 0 ] &&
            echo "greedy_tie.sh: $1 on prompt $k: $(tail -1 "$TMP/$2-$k.err")" >&2
        k=$((k + 1))
    done
    return $rc
}
all "$BA" a || exit 2
all "$BB" b force || exit 2
if [ -n "${NA_TIE_PERTURB:-}" ]; then
    pid=${NA_TIE_PERTURB%%:*} pd=${NA_TIE_PERTURB#*:}
    k=0
    while [ $k -lt "$np" ]; do
        awk -v j=$((pid + 1)) -v d="$pd" '{ $j = sprintf("%.6f", $j + d); print }' \
            "$KEEP/b-$k.log" >"$TMP/p.log" && mv "$TMP/p.log" "$KEEP/b-$k.log"
        k=$((k + 1))
    done
fi

# 2. the comparison, prompt by prompt
steps=0 flips=0 maxd=0 noise=0 fail=""
k=0
while [ $k -lt "$np" ]; do
    line=$(awk -v B="$KEEP/b-$k.log" -v tol="$TOL" -v verbose="${NA_TIE_VERBOSE:-0}" -f "$HERE/forced_cmp.awk" "$KEEP/a-$k.log")
    rc=$?
    echo "prompt $k ($BA greedy, $BB forced): $line"
    case $rc in
        0) ;;
        1) [ -n "$fail" ] || fail="prompt $k, ${line#* * * * }" ;;
        *) exit 2 ;;
    esac
    set -- $(echo "$line" | tr ' ' '\n' | awk -F= '$1 == "steps" || $1 == "flips" ||
                                                  $1 == "maxd" || $1 == "noise" { v[$1] = $2 }
        END { print v["steps"] + 0, v["flips"] + 0, v["maxd"] + 0, v["noise"] + 0 }')
    steps=$((steps + $1)) flips=$((flips + $2))
    maxd=$(awk -v a="$maxd" -v b="$3" 'BEGIN { print (b + 0 > a + 0) ? b : a }')
    noise=$(awk -v a="$noise" -v b="$4" 'BEGIN { print (b + 0 > a + 0) ? b : a }')
    k=$((k + 1))
done
if [ -n "$fail" ]; then
    echo "FAIL ($BB vs $BA, tolerance $TOL: $fail)"
    exit 1
fi
if [ "$flips" -eq 0 ]; then
    echo "PASS (argmax equal at every step: $steps steps; noise $noise)"
else
    echo "PASS (equal up to $flips near-tie steps of $steps: max |dlogit| $maxd; noise $noise; tolerance $TOL)"
fi
exit 0
