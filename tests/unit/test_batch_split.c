/* tests/unit/test_batch_split.c — the merged / split decision of the
 * offload scheduler (compute-node/batch_split.h) on made-up step timings:
 *
 *   even       not adaptive: always every batch
 *   capacity   merged uses as few batches as max_batch allows
 *   weights    a weight-bound step (attention below its compute) stays merged
 *   attention  attention above the compute splits; NA_BSPLIT_PROBE split
 *              steps later it merges to measure again, and splits again
 *   line       rows that vary draw a line: its intercept is the weights'
 *              compute, below any step's, so an attention between the two
 *              splits where the cheapest step alone would not
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

static void t_weights(void)
{
    na_bsplit_t s;
    int i;

    na_bsplit_init(&s, 1, 2);
    for (i = 0; i < 200; i++)
        na_bsplit_step(&s, 8, 0.020, 0.020 / NA_BSPLIT_MARGIN * 0.9, 0, 1);
    NA_CHECK_MSG(!s.split && s.switches == 0 && s.merged_steps == 200,
                 "weight-bound: split %d after %ld switches", s.split, s.switches);
    NA_CHECK(fabs(na_bsplit_weights_s(&s) - 0.020) < 1e-9);
}

static void t_attention(void)
{
    na_bsplit_t s;
    int i;

    na_bsplit_init(&s, 1, 2);
    na_bsplit_step(&s, 8, 0.010, 0.030, 0, 1);
    NA_CHECK(s.split && s.switches == 1 && na_bsplit_batches(&s, 3, 64) == 2);
    for (i = 0; i < NA_BSPLIT_PROBE - 1; i++)
        na_bsplit_step(&s, 4, 0.006, 0.050, 0, 0);
    NA_CHECK_MSG(s.split, "merged after %d split steps", NA_BSPLIT_PROBE - 1);
    na_bsplit_step(&s, 4, 0.006, 0.050, 0, 0);
    NA_CHECK_MSG(!s.split && s.switches == 2, "no probe after %d split steps",
                 NA_BSPLIT_PROBE);
    NA_CHECK(na_bsplit_batches(&s, 3, 64) == 1);
    na_bsplit_step(&s, 4, 0.006, 0.050, 0, 0);  /* a step of the other batch: not alone */
    NA_CHECK(!s.split);
    na_bsplit_step(&s, 8, 0.010, 0.030, 0, 1);  /* merged, alone: still attention-bound */
    NA_CHECK(s.split && s.switches == 3);
    NA_CHECK(s.split_steps == NA_BSPLIT_PROBE && s.merged_steps == 3);
}

static void t_line(void)
{
    na_bsplit_t s, m;
    int i;

    /* compute = 5 ms + 2 ms a row; attention 7 ms: above W x margin (6.25),
     * below every step's compute (>= 9 ms) */
    na_bsplit_init(&s, 1, 2);
    na_bsplit_init(&m, 1, 2);
    for (i = 0; i < 20; i++) {
        int n = i % 2 ? 2 : 8;
        na_bsplit_step(&s, n, 0.005 + 0.002 * n, 0.0, 0, 0);   /* not alone: learns only */
        na_bsplit_step(&m, 8, 0.021, 0.0, 0, 0);
    }
    NA_CHECK_MSG(fabs(na_bsplit_weights_s(&s) - 0.005) < 1e-6, "the line's W %.6f, not 0.005",
                 na_bsplit_weights_s(&s));
    NA_CHECK(fabs(na_bsplit_weights_s(&m) - 0.021) < 1e-9);    /* no line: the cheapest step */
    NA_CHECK(!s.split && !m.split);
    na_bsplit_step(&s, 8, 0.021, 0.007, 0, 1);
    na_bsplit_step(&m, 8, 0.021, 0.007, 0, 1);
    NA_CHECK_MSG(s.split, "the line did not split at attention 7 ms over W 5 ms");
    NA_CHECK_MSG(!m.split, "without a line it split at attention 7 ms over a 21 ms step");
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
    t_line();
    t_prompt();
    return na_test_finish();
}
