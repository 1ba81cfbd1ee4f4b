/* tests/unit/test_batch_split.c — the merged / split decision of the
 * offload scheduler (compute-node/batch_split.h) on made-up step timings:
 *
 *   even       not adaptive: always every batch
 *   capacity   merged uses as few batches as max_batch allows
 *   attention  attention above the compute splits; NA_BSPLIT_PROBE split
 *              steps later it merges to measure again, and splits again
 *   weights    rows that vary draw a line: its intercept is the weights'
 *              compute W; an attention below it stays merged
 *   trial      the same rows every step: no line; an attention above the
 *              compute per row tries NA_BSPLIT_TRIAL split steps, whose rows
 *              draw the line, then decides by it
 *   prompt     steps with prompt rows, or not alone, never decide */
#include <math.h>
#include <stdio.h>

#include "compute-node/batch_split.h"
#include "tests/testutil.h"

static void t_even(void)
{
    na_bsplit_t s;

    na_bsplit_init(&s, 0, 2);
    NA_CHECK(na_bsplit_batches(&s, 3, 64) == 2);
    na_bsplit_step(&s, 8, 0.010, 0.0, 0, 1);
    NA_CHECK(na_bsplit_batches(&s, 3, 64) == 2);
    NA_CHECK(s.split_steps == 1 && s.merged_steps == 0 && s.switches == 0);
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

/* Steps of a made-up engine: compute W + c n for n rows. */
#define W_S 0.005
#define C_S 0.002
static double cost(int n)
{
    return W_S + C_S * n;
}

static void t_weights(void)
{
    na_bsplit_t s;
    int i;

    /* rows that vary (requests come and go): the line; the attention below
     * W (x margin) never splits, and no trial is needed */
    na_bsplit_init(&s, 1, 2);
    for (i = 0; i < 300; i++) {
        int n = 2 + i % 7;
        na_bsplit_step(&s, n, cost(n), 0.9 * W_S, 0, 1);
    }
    NA_CHECK_MSG(!s.split && s.switches == 0 && s.merged_steps == 300,
                 "weight-bound: split %d after %ld switches", s.split, s.switches);
    NA_CHECK_MSG(fabs(na_bsplit_weights_s(&s) - W_S) < 1e-6, "the line's W %.6f, not %.6f",
                 na_bsplit_weights_s(&s), W_S);
}

static void t_attention(void)
{
    na_bsplit_t s;
    int i;

    na_bsplit_init(&s, 1, 2);
    for (i = 0; i < 20; i++)                    /* a line: W = 5 ms */
        na_bsplit_step(&s, 2 + i % 7, cost(2 + i % 7), 0.0, 0, 0);
    na_bsplit_step(&s, 8, cost(8), 0.030, 0, 1);
    NA_CHECK(s.split && s.switches == 1 && s.trials == 0 && na_bsplit_batches(&s, 3, 64) == 2);
    for (i = 0; i < NA_BSPLIT_PROBE - 1; i++)
        na_bsplit_step(&s, 4, cost(4), 0.050, 0, 0);
    NA_CHECK_MSG(s.split, "merged after %d split steps", NA_BSPLIT_PROBE - 1);
    na_bsplit_step(&s, 4, cost(4), 0.050, 0, 0);
    NA_CHECK_MSG(!s.split && s.switches == 2, "no probe after %d split steps",
                 NA_BSPLIT_PROBE);
    NA_CHECK(na_bsplit_batches(&s, 3, 64) == 1);
    na_bsplit_step(&s, 4, cost(4), 0.050, 0, 0);  /* a step of the other batch: not alone */
    NA_CHECK(!s.split);
    na_bsplit_step(&s, 8, cost(8), 0.030, 0, 1);  /* merged, alone: still attention-bound */
    NA_CHECK(s.split && s.switches == 3);
    NA_CHECK(s.split_steps == NA_BSPLIT_PROBE && s.merged_steps == 23);
}

/* The same 8 rows step after step: no line. An attention between W (5 ms)
 * and the step's compute (21 ms) starts a trial; its half-size steps draw
 * the line, and the next merged step splits for good. An attention below
 * the compute per row never tries. */
static void t_trial(void)
{
    na_bsplit_t s;
    int i;

    na_bsplit_init(&s, 1, 2);
    for (i = 0; i < 10; i++)
        na_bsplit_step(&s, 8, cost(8), 0.25 * cost(8) / 8, 0, 1);
    NA_CHECK_MSG(!s.split && s.trials == 0, "tried with the attention below a row's compute");
    NA_CHECK(fabs(na_bsplit_weights_s(&s) - cost(8)) < 1e-9);   /* no line: the cheapest step */
    na_bsplit_step(&s, 8, cost(8), 0.007, 0, 1);
    NA_CHECK_MSG(s.split && s.trials == 1, "no trial at attention 7 ms, 21 ms a step");
    for (i = 0; i < NA_BSPLIT_TRIAL - 1; i++)
        na_bsplit_step(&s, 4, cost(4), 0.0, 0, 0);
    NA_CHECK(s.split);
    na_bsplit_step(&s, 4, cost(4), 0.0, 0, 0);
    NA_CHECK_MSG(!s.split, "the trial did not end after %d split steps", NA_BSPLIT_TRIAL);
    NA_CHECK_MSG(fabs(na_bsplit_weights_s(&s) - W_S) < 1e-6, "the trial's line W %.6f",
                 na_bsplit_weights_s(&s));
    na_bsplit_step(&s, 8, cost(8), 0.007, 0, 1);
    NA_CHECK_MSG(s.split && s.trials == 1 && s.since == 0,
                 "the line did not split at attention 7 ms over W 5 ms");
    /* and a weight-bound one: the trial's line says merged, and it stays */
    na_bsplit_init(&s, 1, 2);
    na_bsplit_step(&s, 8, cost(8), 0.004, 0, 1);
    NA_CHECK(s.split && s.trials == 1);
    for (i = 0; i < NA_BSPLIT_TRIAL; i++)
        na_bsplit_step(&s, 4, cost(4), 0.0, 0, 0);
    for (i = 0; i < 100; i++)
        na_bsplit_step(&s, 8, cost(8), 0.004, 0, 1);
    NA_CHECK_MSG(!s.split && s.trials == 1 && s.switches == 2,
                 "weight-bound after a trial: split %d, %ld trials, %ld switches", s.split,
                 s.trials, s.switches);
}

static void t_prompt(void)
{
    na_bsplit_t s;

    na_bsplit_init(&s, 1, 2);
    na_bsplit_step(&s, 8, 0.010, 0.001, 0, 1);
    na_bsplit_step(&s, 200, 0.200, 1.0, 1, 1);  /* prompt rows: no decision, no learning */
    NA_CHECK(!s.split && fabs(na_bsplit_weights_s(&s) - 0.010) < 1e-9);
    na_bsplit_step(&s, 8, 0.010, 1.0, 0, 0);    /* not alone: no decision */
    NA_CHECK(!s.split);
}

int main(void)
{
    t_even();
    t_capacity();
    t_weights();
    t_attention();
    t_trial();
    t_prompt();
    return na_test_finish();
}
