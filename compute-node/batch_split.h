/* compute-node/batch_split.h — how many of the batches in flight the
 * offload scheduler spreads its requests over (parallel.adaptive_batches;
 * compute-node/batch_split.c).
 *
 * Two batches of N/2 rows overlap one's attention with the other's
 * compute, but each reads every weight once per step: where a step is
 * weight-bound (few rows, a CPU or a GPU at decode) that doubles its
 * compute. Per layer, with C(n) = W + n c the compute of n rows (W the
 * part that does not grow with the rows: reading the weights) and A(n) the
 * attention's round trip:
 *
 *   merged: C(N) + A(N)
 *   split:  max(2 C(N/2), C(N/2) + A(N/2))
 *
 * so splitting pays exactly when A(N) > W, summed over a step's layers.
 *
 * W: a least-squares line through the decode steps' (rows, compute), with
 * old steps forgotten slowly (NA_BSPLIT_FORGET a step: W is the engine's,
 * it hardly changes); its intercept is W. Where the rows have not varied
 * enough to draw a line (a batch job: the same requests step after step),
 * a merged step whose attention exceeds NA_BSPLIT_MARGIN x its compute per
 * row (so that W could be below it) starts a trial: NA_BSPLIT_TRIAL split
 * steps, whose rows (half as many) draw the line. Otherwise W is taken as
 * the cheapest recent step's compute, an upper bound, so a doubt goes to
 * merging (the weights read once).
 *
 * A: measured in merged decode steps that ran alone, where the compute
 * node does nothing while it waits, so the step's summed round trips are
 * the attention's own time. Split, they are not (an answer waits for the
 * other batch's slice), so after NA_BSPLIT_PROBE split steps the
 * controller merges to measure again.
 *
 * It splits when A > NA_BSPLIT_MARGIN W. Steps with prompt rows (chunked
 * prefill) are compute-bound and do not decide. The numbers never depend
 * on it: the kernels are batch-invariant and a request's attention is its
 * own. */
#ifndef NA_BATCH_SPLIT_H
#define NA_BATCH_SPLIT_H

#define NA_BSPLIT_MARGIN 1.25   /* split when attention > this x the weights' compute */
#define NA_BSPLIT_PROBE  64     /* split steps before a merged step measures again */
#define NA_BSPLIT_DRIFT  0.02   /* the minimum's rise per step (it forgets old steps) */
#define NA_BSPLIT_FORGET 0.995  /* the line's weight of a step one step older */
#define NA_BSPLIT_TRIAL  8      /* split steps of a trial (rows for the line) */

typedef struct {
    int    adaptive;            /* 0: always spread over n_max (the layout's number) */
    int    n_max;               /* batches in flight, the most */
    int    split;               /* 1: spread over n_max; 0: merged */
    int    since;               /* split steps since the last merged measurement */
    double c_min;               /* the cheapest recent decode step's compute (< 0: none) */
    double s0, sn, snn, sc, snc; /* the line's weighted sums: 1, rows, rows^2, compute,
                                   rows x compute */
    long   split_steps;         /* steps run split / merged */
    long   merged_steps;
    long   switches;            /* merged -> split and back */
    long   trials;              /* of the merged -> split switches, trials */
} na_bsplit_t;

/* A controller for n_max batches in flight; adaptive 0: always split. */
void   na_bsplit_init(na_bsplit_t *s, int adaptive, int n_max);
/* A batch's step of `rows` rows ended: compute_s of compute, attn_s of
 * summed attention round trips; prompt: it had prompt rows; alone: no
 * other batch ran during it (its round trips are the attention's own
 * time). */
void   na_bsplit_step(na_bsplit_t *s, int rows, double compute_s, double attn_s, int prompt,
                      int alone);
/* The estimate of W, a step's compute that does not grow with its rows
 * (seconds; < 0 before any decode step). */
double na_bsplit_weights_s(const na_bsplit_t *s);
/* The batches to spread `requests` (live and waiting) over: n_max when
 * split, else as few as max_batch requests a batch allows (1..n_max). */
int    na_bsplit_batches(const na_bsplit_t *s, int requests, int max_batch);

#endif /* NA_BATCH_SPLIT_H */
