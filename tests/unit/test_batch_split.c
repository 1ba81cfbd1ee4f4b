/* tests/unit/test_batch_split.c — the merged / split decision of the
 * offload scheduler (compute-node/batch_split.h) on made-up steps and
 * clocks:
 *
 *   even       not adaptive (or one batch): always every batch
 *   capacity   merged uses as few batches as max_batch allows
 *   weights    a weight-bound step (attention below a row's compute, or
 *              below the line's W where the rows vary) never tries split:
 *              hundreds of steps, all merged
 *   won        an attention-bound step tries split; split is faster per row,
 *              so it stays split, merges for a window every NA_BSPLIT_PROBE
 *              steps, and splits again
 *   lost       split tried and slower per row: merged, no new trial for
 *              NA_BSPLIT_HOLD steps, then one; after a second loss twice as
 *              long
 *   prompt     steps with prompt rows restart the window and never start a
 *              trial, and a trial needs a merged window measured after them;
 *              a trial they keep interrupting gives up */
#include <stdio.h>

#include "compute-node/batch_split.h"
#include "tests/testutil.h"

/* One step of `rows` rows ending dt seconds after the last (clock *t). */
static void step(na_bsplit_t *s, double *t, double dt, int rows, double compute_s,
                 double attn_s, int prompt, int alone)
{
    *t += dt;
    na_bsplit_step(s, rows, compute_s, attn_s, prompt, alone, *t);
}

/* Merged steps of 8 rows, 40 ms compute + 40 ms attention (10 ms a row),
 * until s leaves merged or n steps; the steps run. */
static int merged_until_trial(na_bsplit_t *s, double *t, int n)
{
    int i;

    for (i = 0; i < n && !s->split; i++)
        step(s, t, 0.080, 8, 0.040, 0.040, 0, 1);
    return i;
}

static void t_even(void)
{
    na_bsplit_t s;
    double t = 0;

    na_bsplit_init(&s, 0, 2);
    NA_CHECK(na_bsplit_batches(&s, 3, 64) == 2);
    step(&s, &t, 0.08, 8, 0.04, 0.04, 0, 1);
    NA_CHECK(na_bsplit_batches(&s, 3, 64) == 2);
    NA_CHECK(s.split_steps == 1 && s.merged_steps == 0 && s.switches == 0 && s.trials == 0);
    na_bsplit_init(&s, 1, 1);                  /* one batch: nothing to adapt */
    NA_CHECK(!s.adaptive && na_bsplit_batches(&s, 100, 64) == 1);
}

static void t_capacity(void)
{
    na_bsplit_t s;

    na_bsplit_init(&s, 1, 4);
    NA_CHECK(!s.split);
    NA_CHECK(na_bsplit_batches(&s, 0, 64) == 1);
    NA_CHECK(na_bsplit_batches(&s, 64, 64) == 1);
    NA_CHECK(na_bsplit_batches(&s, 65, 64) == 2);
    NA_CHECK(na_bsplit_batches(&s, 1000, 64) == 4);
}

static void t_weights(void)
{
    na_bsplit_t s;
    double t = 0;
    int i;

    /* 20 ms of compute for 8 rows, attention 2 ms: below a row's 2.5 ms */
    na_bsplit_init(&s, 1, 2);
    for (i = 0; i < 500; i++)
        step(&s, &t, 0.022, 8, 0.020, 0.002, 0, 1);
    NA_CHECK_MSG(!s.split && s.trials == 0 && s.merged_steps == 500 && s.split_steps == 0,
                 "weight-bound: %ld trials, %ld split steps", s.trials, s.split_steps);
    NA_CHECK(s.merged_spr > 0.0027 && s.merged_spr < 0.0028);   /* 22 ms / 8 rows */
    /* rows 4..16 at 10 ms + 2 ms a row (W = 10 ms), attention 11 ms: above
     * every step's compute per row (<= 4.5 ms), below 1.25 W: no trial */
    na_bsplit_init(&s, 1, 2);
    for (i = 0; i < 500; i++) {
        int n = 4 + i % 13;
        step(&s, &t, 0.010 + 0.002 * n + 0.011, n, 0.010 + 0.002 * n, 0.011, 0, 1);
    }
    NA_CHECK_MSG(s.trials == 0 && s.split_steps == 0,
                 "varied rows under W: %ld trials", s.trials);
}

static void t_won(void)
{
    na_bsplit_t s;
    double t = 0;
    int i, n;

    na_bsplit_init(&s, 1, 2);
    n = merged_until_trial(&s, &t, 100);
    NA_CHECK_MSG(s.split && s.phase == NA_BSPLIT_TRIAL && s.trials == 1 &&
                 n == NA_BSPLIT_WINDOW + 1,
                 "no trial after a merged window (%d steps, phase %d)", n, (int)s.phase);
    NA_CHECK(s.merged_spr > 0.0099 && s.merged_spr < 0.0101);
    NA_CHECK(na_bsplit_batches(&s, 8, 64) == 2);
    /* split: a step of 4 rows every 25 ms (6.25 ms a row) */
    for (i = 0; i < NA_BSPLIT_SKIP + NA_BSPLIT_WINDOW - 1; i++)
        step(&s, &t, 0.025, 4, 0.020, 0.040, 0, 0);
    NA_CHECK(s.phase == NA_BSPLIT_TRIAL);
    step(&s, &t, 0.025, 4, 0.020, 0.040, 0, 0);
    NA_CHECK_MSG(s.split && s.phase == NA_BSPLIT_SPLIT && s.trials_won == 1,
                 "split 6.25 ms a row against merged 10 did not win (phase %d)",
                 (int)s.phase);
    for (i = 0; i < NA_BSPLIT_PROBE - 1; i++)
        step(&s, &t, 0.025, 4, 0.020, 0.040, 0, 0);
    NA_CHECK(s.split);
    step(&s, &t, 0.025, 4, 0.020, 0.040, 0, 0);
    NA_CHECK_MSG(!s.split && s.phase == NA_BSPLIT_PROBE_M, "no merged probe after %d steps",
                 NA_BSPLIT_PROBE);
    for (i = 0; i < NA_BSPLIT_SKIP + NA_BSPLIT_WINDOW + 1 && !s.split; i++)
        step(&s, &t, 0.080, 8, 0.040, 0.040, 0, 0);
    NA_CHECK_MSG(s.split && s.phase == NA_BSPLIT_SPLIT && s.switches == 3,
                 "the probe kept merged (phase %d, %ld switches)", (int)s.phase, s.switches);
}

static void t_lost(void)
{
    na_bsplit_t s;
    double t = 0;
    int i;

    na_bsplit_init(&s, 1, 2);
    merged_until_trial(&s, &t, 100);
    NA_CHECK(s.trials == 1);
    /* split: 4 rows every 50 ms (12.5 ms a row): slower than merged */
    for (i = 0; i < NA_BSPLIT_SKIP + NA_BSPLIT_WINDOW; i++)
        step(&s, &t, 0.050, 4, 0.020, 0.040, 0, 0);
    NA_CHECK_MSG(!s.split && s.phase == NA_BSPLIT_MERGED && s.trials_won == 0,
                 "split at 12.5 ms a row against 10 won");
    i = merged_until_trial(&s, &t, 2 * NA_BSPLIT_HOLD);
    NA_CHECK_MSG(s.trials == 2 && i >= NA_BSPLIT_HOLD - 1 && i <= NA_BSPLIT_HOLD + 1,
                 "the next trial came %d steps after a lost one (hold %d)", i, NA_BSPLIT_HOLD);
    for (i = 0; i < NA_BSPLIT_SKIP + NA_BSPLIT_WINDOW; i++)   /* lost again */
        step(&s, &t, 0.050, 4, 0.020, 0.040, 0, 0);
    i = merged_until_trial(&s, &t, 4 * NA_BSPLIT_HOLD);
    NA_CHECK_MSG(s.trials == 3 && i >= 2 * NA_BSPLIT_HOLD - 1 && i <= 2 * NA_BSPLIT_HOLD + 1,
                 "the trial after a second loss came %d steps after it (hold %d)", i,
                 2 * NA_BSPLIT_HOLD);
}

static void t_prompt(void)
{
    na_bsplit_t s;
    double t = 0;
    int i;

    na_bsplit_init(&s, 1, 2);
    for (i = 0; i < 50; i++)                   /* prompt rows every other step */
        step(&s, &t, 0.080, i % 2 ? 8 : 200, 0.040, 0.040, i % 2 == 0, 1);
    NA_CHECK_MSG(!s.split && s.trials == 0 && s.merged_spr < 0,
                 "a window or a trial across prompt rows");
    merged_until_trial(&s, &t, 100);           /* a clean window first, then the trial */
    NA_CHECK(s.trials == 1);
    for (i = 0; i < 200 && s.split; i++)       /* prompt rows keep interrupting it */
        step(&s, &t, 0.025, i % 2 ? 4 : 100, 0.020, 0.040, i % 2 == 0, 0);
    NA_CHECK_MSG(!s.split && s.phase == NA_BSPLIT_MERGED && s.trials_won == 0 && i < 200,
                 "an interrupted trial did not give up");
}

int main(void)
{
    t_even();
    t_capacity();
    t_weights();
    t_won();
    t_lost();
    t_prompt();
    return na_test_finish();
}
