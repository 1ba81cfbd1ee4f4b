/* tests/tools/greedy_top2.h — the argmax and the runner-up of v logits as
 * the greedy tools read them (the lower id wins a tie): na_greedy_top and
 * llama_greedy print them (tests/tools/greedy_common.h), and the cuda
 * test's tie check (tests/unit/test_cuda.c) picks its tokens and margins
 * the same way. Needs nothing: llama_greedy.c is compiled alone against a
 * llama.cpp build. */
#ifndef NA_GREEDY_TOP2_H
#define NA_GREEDY_TOP2_H

#include <stddef.h>

/* The argmax of l[0..v), the runner-up into *second (may be NULL). */
static inline int greedy_top2(const float *l, int v, int *second)
{
    int i, i1 = 0, i2 = v > 1 ? 1 : 0;

    if (v > 1 && l[1] > l[0]) {
        i1 = 1;
        i2 = 0;
    }
    for (i = 2; i < v; i++) {
        if (l[i] > l[i1]) {
            i2 = i1;
            i1 = i;
        } else if (l[i] > l[i2]) {
            i2 = i;
        }
    }
    if (second != NULL)
        *second = i2;
    return i1;
}

#endif /* NA_GREEDY_TOP2_H */
