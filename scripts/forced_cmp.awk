# scripts/forced_cmp.awk — the teacher-forced comparison of two engines'
# logits, step by step (scripts/greedy_tie.sh: two nearattn backends;
# scripts/llama_agree.sh: nearattn against llama.cpp). Engine A decoded
# greedily (or had its tokens forced), engine B was fed A's tokens, so step i
# of both saw the same inputs; each file holds one line per step, every logit
# of the vocabulary (na_greedy_top's / llama_greedy's NA_*_LOGITS).
#
#   awk -v B=B.log [-v tol=T] -f forced_cmp.awk A.log
#
# Per step: A's top-2 ids a1, a2 (A's choice and runner-up) and B's argmax
# b1 (first index on equal logits, as na_greedy_top); the logit noise is the
# largest |A - B| over a1 and a2 of every step. A step where b1 != a1 is a
# flip, with gA = A[a1] - A[a2] (A's top-2 margin) and dB = B[b1] - B[a1]
# (how far B put A's token below its own choice). One line out:
#   without tol:  "SAME | NOISE | FLIPS" (llama_agree.sh's table cells): SAME
#                 steps of equal argmax, each flip "step (gA tie|REAL)":
#                 tie when gA is below the noise
#   with tol:     "PASS steps=N flips=0 noise=X",
#                 "PASS steps=N flips=K maxd=X noise=X" when at every step
#                 |A - B| <= tol * max(1, |A[a1]|) at a1 and a2 (the logits
#                 agree where the choice is made) and every flip is a near
#                 tie: dB <= 2 tol * max(1, |B[b1]|) and gA <= 2 tol *
#                 max(1, |A[a1]|) (each gap is bounded by the differences
#                 of two ids' logits: A[a1] - A[a2] <= (A[a1] - B[a1]) +
#                 (B[b1] - A[b1]) at a flip, and so is dB); maxd the
#                 largest dB or gA of the flips; else
#                 "FAIL steps=N flips=K noise=X step S: ..." for the first
#                 step that breaks either (its ids and logits)
#   "BAD ..." when the files differ in shape (exit 2).
# -v verbose=1 first prints every flip on a line "flip step S: ...".
function abs(x) { return x < 0 ? -x : x }
function tiny(d, l, k) { return d <= k * tol * (abs(l) > 1 ? abs(l) : 1) }
BEGIN { if (B == "") { print "BAD: no -v B=FILE"; bad = 1; exit 2 } }
{
    n = split($0, a, " ")
    if ((getline line < B) <= 0) { print "BAD: " B " has fewer lines than " FILENAME; bad = 1; exit 2 }
    if (split(line, b, " ") != n || n < 2) {
        print "BAD: step " NR - 1 " has " n " logits in " FILENAME ", " split(line, b, " ") " in " B
        bad = 1; exit 2
    }
    a1 = 1; a2 = 2; if (a[2] + 0 > a[1] + 0) { a1 = 2; a2 = 1 }
    b1 = 1; if (b[2] + 0 > b[1] + 0) b1 = 2
    for (j = 3; j <= n; j++) {
        v = a[j] + 0
        if (v > a[a1] + 0) { a2 = a1; a1 = j } else if (v > a[a2] + 0) a2 = j
        if (b[j] + 0 > b[b1] + 0) b1 = j
    }
    n1 = abs(a[a1] - b[a1]); if (n1 > noise) noise = n1
    n2 = abs(a[a2] - b[a2]); if (n2 > noise) noise = n2
    # ids are 0-based: field j is id j - 1
    if (tol != "" && why == "" && !(tiny(n1, a[a1], 1) && tiny(n2, a[a1], 1)))
        why = sprintf("step %d: A's top-2 ids %d %d at %.6f %.6f, B's logits of them %.6f %.6f: more than the tolerance apart",
                      NR - 1, a1 - 1, a2 - 1, a[a1], a[a2], b[a1], b[a2])
    if (b1 == a1) { same++; next }
    nf++
    st[nf] = NR - 1; ga[nf] = a[a1] - a[a2]; db[nf] = b[b1] - b[a1]
    txt[nf] = sprintf("step %d: A id %d (logit %.6f, top-2 margin %.6f), B id %d (logit %.6f, A's id at %.6f: %.6f below)",
                      NR - 1, a1 - 1, a[a1], ga[nf], b1 - 1, b[b1], b[a1], db[nf])
    ok[nf] = tol != "" && tiny(db[nf], b[b1], 2) && tiny(ga[nf], a[a1], 2)
    if (tol != "" && why == "" && !ok[nf])
        why = txt[nf] ": not a near tie"
}
END {
    if (bad) exit 2
    if (NR == 0) { print "BAD: no steps in " FILENAME; exit 2 }
    if ((getline line < B) > 0) { print "BAD: " B " has more lines than " FILENAME; exit 2 }
    if (tol == "") {
        out = ""
        for (k = 1; k <= nf; k++)
            out = out sprintf("%s%d (%.4f %s)", k > 1 ? ", " : "", st[k], ga[k],
                              ga[k] < noise ? "tie" : "REAL")
        printf "%d | %.4f | %s\n", same, noise, nf ? out : "none"
        exit 0
    }
    maxd = 0
    for (k = 1; verbose && k <= nf; k++)
        print "flip " txt[k] (ok[k] ? "" : " (not a near tie)")
    if (why != "") {
        printf "FAIL steps=%d flips=%d noise=%.6f %s\n", NR, nf, noise, why
        exit 1
    }
    for (k = 1; k <= nf; k++) {
        if (db[k] > maxd) maxd = db[k]
        if (ga[k] > maxd) maxd = ga[k]
    }
    if (nf == 0) printf "PASS steps=%d flips=0 noise=%.6f\n", NR, noise
    else printf "PASS steps=%d flips=%d maxd=%.6f noise=%.6f\n", NR, nf, maxd, noise
    exit 0
}
