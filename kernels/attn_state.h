/* kernels/attn_state.h — online-softmax partials of decode attention, shared
 * by every backend and the storage node's fold: the state type, init, exact
 * merge of two partials, finalisation. Inline: they run for every head of
 * every part of every decode step (kernels/cpu/cpu_attn.c,
 * storage-node/attn_fold.c). */
#ifndef NA_ATTN_STATE_H
#define NA_ATTN_STATE_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/expf.h"

/* Partial state of decode attention for one query head over a part of the
 * context (flash-decoding): running max m, running sum l, and the unnormalised
 * accumulator acc[head_dim]. Two partials merge exactly (na_kattn_merge). */
typedef struct {
    float m;
    float l;
} na_kattn_stat_t;

/* An empty partial for each of `group` heads: m = -inf, l = 0, acc = 0. */
static inline void na_kattn_init(na_kattn_stat_t *st, float *acc, int group, int head_dim)
{
    int g;
    for (g = 0; g < group; g++) {
        st[g].m = -INFINITY;
        st[g].l = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)group * (size_t)head_dim);
}

/* Fold partial (st_b, acc_b) into (st_a, acc_a). */
static inline void na_kattn_merge(na_kattn_stat_t *st_a, float *acc_a,
                                 const na_kattn_stat_t *st_b, const float *acc_b,
                                 int group, int head_dim)
{
    int g, i;
    for (g = 0; g < group; g++) {
        float m, sa, sb;
        float *a = acc_a + (size_t)g * head_dim;
        const float *b = acc_b + (size_t)g * head_dim;

        if (st_b[g].l == 0.0f && st_b[g].m == -INFINITY)
            continue;                       /* b saw no tokens */
        m  = st_a[g].m > st_b[g].m ? st_a[g].m : st_b[g].m;
        sa = st_a[g].m == -INFINITY ? 0.0f : na_expf(st_a[g].m - m);
        sb = na_expf(st_b[g].m - m);
        for (i = 0; i < head_dim; i++)
            a[i] = a[i] * sa + b[i] * sb;
        st_a[g].l = st_a[g].l * sa + st_b[g].l * sb;
        st_a[g].m = m;
    }
}

/* out[g*head_dim+i] = acc / l (0 for a head that saw no tokens). */
static inline void na_kattn_finalize(float *out, const na_kattn_stat_t *st, const float *acc,
                                    int group, int head_dim)
{
    int g, i;
    for (g = 0; g < group; g++) {
        float inv = st[g].l > 0.0f ? 1.0f / st[g].l : 0.0f;
        for (i = 0; i < head_dim; i++)
            out[(size_t)g * head_dim + i] = acc[(size_t)g * head_dim + i] * inv;
    }
}

#endif /* NA_ATTN_STATE_H */
