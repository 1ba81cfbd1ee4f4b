/* compute-node/batch_split.c — merged or split batches, measured
 * (compute-node/batch_split.h). */
#include "compute-node/batch_split.h"

#include <string.h>

/* A trial, or a probe, that has not completed its window in this many
 * steps (prompt rows kept interrupting it) gives up and stays merged. */
#define NA_BSPLIT_PATIENCE (4 * (NA_BSPLIT_WINDOW + NA_BSPLIT_SKIP + 1))

void na_bsplit_init(na_bsplit_t *s, int adaptive, int n_max)
{
    memset(s, 0, sizeof(*s));
    s->adaptive = adaptive && n_max > 1;
    s->n_max = n_max > 0 ? n_max : 1;
    s->split = !s->adaptive;     /* adaptive: merged until a trial says otherwise */
    s->phase = s->split ? NA_BSPLIT_SPLIT : NA_BSPLIT_MERGED;
    s->win_t0 = -1.0;
    s->merged_spr = -1.0;
    s->split_spr = -1.0;
    s->lost_hold = NA_BSPLIT_HOLD;
}

/* Add a decode step to the line. */
static void na_bsplit_learn(na_bsplit_t *s, int rows, double compute_s)
{
    const double n = rows;

    s->s0 = NA_BSPLIT_FORGET * s->s0 + 1.0;
    s->sn = NA_BSPLIT_FORGET * s->sn + n;
    s->snn = NA_BSPLIT_FORGET * s->snn + n * n;
    s->sc = NA_BSPLIT_FORGET * s->sc + compute_s;
    s->snc = NA_BSPLIT_FORGET * s->snc + n * compute_s;
}

/* A lower bound of W for a step of rows rows and compute_s: the line's
 * intercept where the rows varied (a weighted variance of at least one
 * row^2), else the compute per row. */
static double na_bsplit_w_low(const na_bsplit_t *s, int rows, double compute_s)
{
    double det = s->s0 * s->snn - s->sn * s->sn, w;

    if (s->s0 > 0 && det >= s->s0 * s->s0) {
        w = (s->sc * s->snn - s->sn * s->snc) / det;
        if (w > compute_s / rows)
            return w < compute_s ? w : compute_s;
    }
    return compute_s / rows;
}

/* Enter phase (split or merged) for hold steps; a change of split starts
 * a new window after NA_BSPLIT_SKIP steps (requests move). */
static void na_bsplit_go(na_bsplit_t *s, int split, na_bsplit_phase_t phase, int hold)
{
    if (s->split != split) {
        s->switches++;
        s->split = split;
        s->skip = NA_BSPLIT_SKIP;
        s->win_t0 = -1.0;
        s->win_steps = 0;
        s->win_rows = 0;
    }
    s->phase = phase;
    s->hold = hold;
}

/* Count a step into the window: its wall seconds per decode row when the
 * window is complete, else -1. A step with prompt rows restarts it. */
static double na_bsplit_measure(na_bsplit_t *s, int rows, int prompt, double t_end)
{
    double spr;

    if (prompt || s->skip > 0 || s->win_t0 < 0) {
        if (s->skip > 0 && !prompt)
            s->skip--;
        s->win_t0 = t_end;           /* the next window starts after this step */
        s->win_steps = 0;
        s->win_rows = 0;
        return -1.0;
    }
    s->win_steps++;
    s->win_rows += rows;
    if (s->win_steps < NA_BSPLIT_WINDOW)
        return -1.0;
    spr = s->win_rows > 0 && t_end > s->win_t0 ? (t_end - s->win_t0) / (double)s->win_rows
                                               : -1.0;
    s->win_t0 = t_end;
    s->win_steps = 0;
    s->win_rows = 0;
    return spr;
}

/* A trial lost (or gave up): merged, the next one after lost_hold steps,
 * which doubles. */
static void na_bsplit_lost(na_bsplit_t *s)
{
    na_bsplit_go(s, 0, NA_BSPLIT_MERGED, s->lost_hold);
    if (s->lost_hold < NA_BSPLIT_HOLD_MAX)
        s->lost_hold *= 2;
}

/* Split is faster per row than merged by NA_BSPLIT_GAIN. */
static int na_bsplit_wins(const na_bsplit_t *s)
{
    return s->split_spr > 0 && s->merged_spr > 0 &&
           s->split_spr < (1.0 - NA_BSPLIT_GAIN) * s->merged_spr;
}

void na_bsplit_step(na_bsplit_t *s, int rows, double compute_s, double attn_s, int prompt,
                    int alone, double t_end)
{
    double spr;

    if (s->split && s->n_max > 1)
        s->split_steps++;
    else
        s->merged_steps++;           /* one batch in flight counts as merged */
    if (!s->adaptive)
        return;
    if (s->hold > 0)
        s->hold--;
    if (!prompt && rows > 0 && compute_s > 0)
        na_bsplit_learn(s, rows, compute_s);
    spr = na_bsplit_measure(s, rows, prompt, t_end);
    switch (s->phase) {
    case NA_BSPLIT_MERGED:
        if (spr > 0) {
            s->merged_spr = spr;
            s->fresh = 1;
        }
        if (prompt)
            s->fresh = 0;            /* the rows changed: measure merged again first */
        if (!prompt && alone && rows >= 2 && s->hold == 0 && s->fresh && compute_s > 0 &&
            attn_s > NA_BSPLIT_MARGIN * na_bsplit_w_low(s, rows, compute_s)) {
            s->trials++;             /* the attention might hide W: try */
            na_bsplit_go(s, 1, NA_BSPLIT_TRIAL, NA_BSPLIT_PATIENCE);
        }
        break;
    case NA_BSPLIT_TRIAL:
        if (spr > 0) {
            s->split_spr = spr;
            if (na_bsplit_wins(s)) {
                s->trials_won++;
                s->lost_hold = NA_BSPLIT_HOLD;
                na_bsplit_go(s, 1, NA_BSPLIT_SPLIT, NA_BSPLIT_PROBE);
            } else {
                na_bsplit_lost(s);
            }
        } else if (s->hold == 0) {
            na_bsplit_lost(s);
        }
        break;
    case NA_BSPLIT_SPLIT:
        if (spr > 0)
            s->split_spr = spr;
        if (s->hold == 0)            /* measure merged again */
            na_bsplit_go(s, 0, NA_BSPLIT_PROBE_M, NA_BSPLIT_PATIENCE);
        break;
    case NA_BSPLIT_PROBE_M:
        if (spr > 0) {
            s->merged_spr = spr;
            if (na_bsplit_wins(s))
                na_bsplit_go(s, 1, NA_BSPLIT_SPLIT, NA_BSPLIT_PROBE);
            else
                na_bsplit_go(s, 0, NA_BSPLIT_MERGED, NA_BSPLIT_HOLD);
        } else if (s->hold == 0) {
            na_bsplit_go(s, 0, NA_BSPLIT_MERGED, NA_BSPLIT_HOLD);
        }
        break;
    }
}

int na_bsplit_batches(const na_bsplit_t *s, int requests, int max_batch)
{
    int k;

    if (s->split)
        return s->n_max;
    k = max_batch > 0 ? (requests + max_batch - 1) / max_batch : 1;
    return k < 1 ? 1 : k > s->n_max ? s->n_max : k;
}
