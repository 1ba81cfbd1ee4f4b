#!/bin/sh
# tests/cli/test_greedy_tie.sh — scripts/greedy_tie.sh (the tie-aware,
# teacher-forced comparison of two backends' greedy decoding that
# scripts/gpu/verify.sh runs for cuda against cpu) on the CPU: the plain-C
# reference (--backend ref) against the cpu backend on small generated q4_k
# and q5_1 models, 48 tokens from each of 3 prompts. Their greedy texts may
# differ (near ties decided by f32 rounding); the check must still pass:
#   - ref against cpu: exit 0, a last line "PASS (...)";
#   - B's logit of one id raised by 100 at every step (NA_TIE_PERTURB, a
#     deliberate break): exit 1, "FAIL (... step ...)" naming the ids;
#   - tolerance 0: exit 1 (the two backends round differently, so their
#     logits are never all equal on a quantised model);
#   - a prompt-less call: exit 2.
# usage: test_greedy_tie.sh NA_GREEDY_TOP   (NA_BIN, NA_SOURCE_DIR: ctest)
set -u
. "$(dirname "$0")/lib.sh"
na_cli_init nearattn-tie
GT=${1:?usage: test_greedy_tie.sh NA_GREEDY_TOP}
TIE=${NA_SOURCE_DIR:?NA_SOURCE_DIR is not set}/scripts/greedy_tie.sh

for t in q4_k q5_1; do
    "$BIN" gen-model --out "$TMP/$t" --dim 256 --hidden 768 --layers 2 --heads 8 --kv-heads 2 \
        --vocab 600 --seq-len 128 --dtype "$t" --format gguf --quiet >/dev/null 2>"$TMP/gen.err" ||
        { cat "$TMP/gen.err" >&2; exit 1; }
    tie() { sh "$TIE" "$BIN" "$GT" "$TMP/$t.gguf" 48 cpu ref 'Once upon a time' 'The GPU' 'A' \
                >"$TMP/out" 2>"$TMP/err"; }
    tie
    rc=$?
    cat "$TMP/out"
    [ $rc -eq 0 ] || fail "$t ref vs cpu: exit $rc: $(tail -1 "$TMP/out") $(cat "$TMP/err")"
    tail -1 "$TMP/out" | grep -q '^PASS (' || fail "$t: last line '$(tail -1 "$TMP/out")' is no PASS"
    [ "$(grep -c '^prompt [0-2] (cpu greedy, ref forced): PASS steps=48 ' "$TMP/out")" -eq 3 ] ||
        fail "$t: not 3 prompts of 48 steps passed"

    NA_TIE_PERTURB=7:100 tie
    rc=$?
    [ $rc -eq 1 ] || fail "$t perturbed: exit $rc, expected 1: $(tail -1 "$TMP/out")"
    grep -q "^FAIL (ref vs cpu, tolerance [^:]*: prompt 0, step 0: .*B id 7 " "$TMP/out" ||
        fail "$t perturbed: no FAIL naming B's id 7 at prompt 0, step 0: $(tail -1 "$TMP/out")"

    NA_TIE_TOL=0 tie
    rc=$?
    [ $rc -eq 1 ] || fail "$t tolerance 0: exit $rc, expected 1: $(tail -1 "$TMP/out")"
done
sh "$TIE" "$BIN" "$GT" "$TMP/q4_k.gguf" 48 cpu ref >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || fail "no prompt: exit $rc, expected 2"
[ "$FAILS" -eq 0 ] && echo "greedy_tie.sh: ref vs cpu passes, a perturbed logit and tolerance 0 fail"
exit $((FAILS > 0))
