/* compute-node/batch_split.c — merged or split batches, from the steps'
 * measured compute and attention (compute-node/batch_split.h). */
#include "compute-node/batch_split.h"

#include <string.h>

void na_bsplit_init(na_bsplit_t *s, int adaptive, int n_max)
{
    memset(s, 0, sizeof(*s));
    s->adaptive = adaptive && n_max > 1;
    s->n_max = n_max > 0 ? n_max : 1;
    s->split = !s->adaptive;     /* adaptive: merged until a step says otherwise */
    s->c_min = -1.0;
}

/* W from the line (*w_p, clamped to [0, the cheapest step]): 1, or 0 when
 * the rows did not vary enough to draw one (a weighted variance under 1/4
 * row^2). */
static int na_bsplit_line(const na_bsplit_t *s, double *w_p)
{
    double det = s->s0 * s->snn - s->sn * s->sn, w;

    if (s->c_min < 0 || s->s0 <= 0 || det < 0.25 * s->s0 * s->s0)
        return 0;
    w = (s->sc * s->snn - s->sn * s->snc) / det;
    *w_p = w < 0 ? 0.0 : w > s->c_min ? s->c_min : w;
    return 1;
}

double na_bsplit_weights_s(const na_bsplit_t *s)
{
    double w;

    return na_bsplit_line(s, &w) ? w : s->c_min;
}

/* Add a decode step to the line and the decaying minimum. */
static void na_bsplit_learn(na_bsplit_t *s, int rows, double compute_s)
{
    const double n = rows;

    s->s0 = NA_BSPLIT_FORGET * s->s0 + 1.0;
    s->sn = NA_BSPLIT_FORGET * s->sn + n;
    s->snn = NA_BSPLIT_FORGET * s->snn + n * n;
    s->sc = NA_BSPLIT_FORGET * s->sc + compute_s;
    s->snc = NA_BSPLIT_FORGET * s->snc + n * compute_s;
    if (s->c_min < 0 || compute_s < s->c_min * (1.0 + NA_BSPLIT_DRIFT))
        s->c_min = compute_s;
    else
        s->c_min *= 1.0 + NA_BSPLIT_DRIFT;
}

void na_bsplit_step(na_bsplit_t *s, int rows, double compute_s, double attn_s, int prompt,
                    int alone)
{
    double w;

    if (s->split)
        s->split_steps++;
    else
        s->merged_steps++;
    if (!s->adaptive)
        return;
    if (!prompt && rows > 0 && compute_s > 0)
        na_bsplit_learn(s, rows, compute_s);
    if (s->split) {
        if (++s->since >= NA_BSPLIT_PROBE) {   /* merge to measure again */
            s->split = 0;
            s->switches++;
        }
        return;
    }
    if (prompt || !alone || rows <= 0)
        return;             /* compute-bound, or no clean measurement */
    if (na_bsplit_line(s, &w)) {
        if (attn_s > NA_BSPLIT_MARGIN * w) {
            s->split = 1;
            s->since = 0;
            s->switches++;
        }
    } else if (rows >= 2 && attn_s > NA_BSPLIT_MARGIN * compute_s / rows) {
        s->split = 1;       /* a trial: NA_BSPLIT_TRIAL split steps, then measure */
        s->since = NA_BSPLIT_PROBE - NA_BSPLIT_TRIAL;
        s->switches++;
        s->trials++;
    }                       /* else merged: one row cannot be split */
}

int na_bsplit_batches(const na_bsplit_t *s, int requests, int max_batch)
{
    int k;

    if (s->split)
        return s->n_max;
    k = max_batch > 0 ? (requests + max_batch - 1) / max_batch : 1;
    return k < 1 ? 1 : k > s->n_max ? s->n_max : k;
}
