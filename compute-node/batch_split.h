/* compute-node/batch_split.h — how many of the batches in flight the
 * offload scheduler spreads its requests over (parallel.adaptive_batches;
 * compute-node/batch_split.c).
 *
 * Two batches of N/2 rows overlap one's attention with the other's
 * compute, but each reads every weight once per step: where a step is
 * weight-bound (few rows, a CPU or a GPU at decode) that doubles its
 * compute. Per layer, with C(n) = W + n c the compute of n rows (W the
 * part that does not grow with the rows: reading the weights) and A(n) the
 * attention's round trip,
 *
 *   merged: C(N) + A(N)
 *   split:  max(2 C(N/2), C(N/2) + A(N/2))
 *
 * so splitting pays exactly when A(N) > W. Which of the two is faster is
 * measured, not predicted: W is hard to tell apart from n c with the same
 * rows step after step, and where the storage nodes share the compute
 * node's cores the overlap is partly an illusion. So:
 *
 *   - merged (the start): the wall time per decode row is measured over
 *     windows of NA_BSPLIT_WINDOW steps. A merged decode step that ran
 *     alone (its round trips are then the attention's own time) whose
 *     attention exceeds NA_BSPLIT_MARGIN x a lower bound of W starts a
 *     trial. The bound: the intercept of a least-squares line through the
 *     recent decode steps' (rows, compute) where their rows varied
 *     (serving: requests come and go), else the step's compute per row
 *     (a batch job: the same rows every step);
 *   - a trial runs split for a window and compares its wall time per row
 *     with the merged one: split wins only when at least NA_BSPLIT_GAIN
 *     faster. A lost trial holds merged NA_BSPLIT_HOLD steps before the
 *     next, twice as long after each further loss (at most
 *     NA_BSPLIT_HOLD_MAX): a trial's steps are slow ones for every stream;
 *     a won one holds split NA_BSPLIT_PROBE steps, then merges for a
 *     window to measure again, and keeps whichever was faster. A trial
 *     compares with a merged window measured since the last step with
 *     prompt rows.
 *
 * The first NA_BSPLIT_SKIP steps after a switch (requests moving between
 * batches) and windows with prompt rows (chunked prefill) are not counted.
 * A weight-bound step (attention below the bound) starts no trial; where
 * the rows stay the same the bound is weak, and a few trials run and lose
 * (the doubling hold keeps them rare).
 * The numbers never depend on it: the kernels are batch-invariant and a
 * request's attention is its own. */
#ifndef NA_BATCH_SPLIT_H
#define NA_BATCH_SPLIT_H

#define NA_BSPLIT_MARGIN 1.25   /* a trial: attention > this x a lower bound of W */
#define NA_BSPLIT_GAIN   0.05   /* split wins when this much faster per row */
#define NA_BSPLIT_WINDOW 6      /* decode steps measured per window */
#define NA_BSPLIT_SKIP   2      /* steps not measured after a switch */
#define NA_BSPLIT_PROBE  64     /* split steps before a merged window measures again */
#define NA_BSPLIT_HOLD   128    /* merged steps after a lost trial before the next */
#define NA_BSPLIT_HOLD_MAX 8192 /* ... doubled after each further loss, at most */
#define NA_BSPLIT_FORGET 0.98   /* the line's weight of a step one step older */

typedef enum {
    NA_BSPLIT_MERGED = 0,       /* merged, measuring; a trial may start */
    NA_BSPLIT_TRIAL  = 1,       /* split for one window */
    NA_BSPLIT_SPLIT  = 2,       /* split, held (it won) */
    NA_BSPLIT_PROBE_M = 3,      /* merged for one window after a held split */
} na_bsplit_phase_t;

typedef struct {
    int               adaptive;  /* 0: always spread over n_max (the layout's number) */
    int               n_max;     /* batches in flight, the most */
    int               split;     /* 1: spread over n_max; 0: merged */
    na_bsplit_phase_t phase;
    int               hold;      /* steps left before the phase may change */
    int               skip;      /* steps left not measured (after a switch) */
    /* the window being measured */
    int               win_steps;
    long              win_rows;
    double            win_t0;    /* end of the step before it (< 0: not started) */
    double            merged_spr, split_spr; /* wall seconds per decode row, last
                                                windows (< 0: none yet) */
    int               fresh;     /* merged_spr is from a window since the last
                                    step with prompt rows */
    int               lost_hold; /* the hold after the next lost trial */
    double            s0, sn, snn, sc, snc; /* the line's weighted sums: 1, rows,
                                               rows^2, compute, rows x compute */
    long              split_steps; /* steps run with the requests spread over every batch
                                      (of two or more) */
    long              merged_steps;
    long              switches;  /* merged -> split and back */
    long              trials;    /* trials started / won */
    long              trials_won;
} na_bsplit_t;

/* A controller for n_max batches in flight; adaptive 0: always split. */
void na_bsplit_init(na_bsplit_t *s, int adaptive, int n_max);
/* A batch's step of `rows` rows ended at t_end (na_now_s()): compute_s of
 * compute, attn_s of summed attention round trips; prompt: it had prompt
 * rows; alone: no other batch ran during it (its round trips are the
 * attention's own time). */
void na_bsplit_step(na_bsplit_t *s, int rows, double compute_s, double attn_s, int prompt,
                    int alone, double t_end);
/* The batches to spread `requests` (live and waiting) over: n_max when
 * split, else as few as max_batch requests a batch allows (1..n_max). */
int  na_bsplit_batches(const na_bsplit_t *s, int requests, int max_batch);

#endif /* NA_BATCH_SPLIT_H */
