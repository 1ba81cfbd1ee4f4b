/* compute-node/perplexity.h — perplexity of a token sequence, chunked the
 * way llama.cpp's llama-perplexity chunks it, so the two figures compare.
 *
 * The text's tokens (BOS first, as the tokenizer adds it) are cut into
 * n_chunks = n_tokens / n_ctx chunks of n_ctx tokens (the tail is dropped);
 * the first token of every chunk is replaced by BOS (when the vocabulary
 * adds one). Only the second half of
 * a chunk is scored: with first = n_ctx / 2, the logits after positions
 * first .. n_ctx-2 predict tokens first+1 .. n_ctx-1, so every chunk scores
 * n_ctx - 1 - first tokens, each by -log softmax(logits)[token] in double
 * (na_sampler_logprob).
 *
 * A chunk is one request (compute-node/generate.h) run by whatever engine
 * runs requests, monolithic (na_generate) or offloaded (na_off_*): its
 * prompt is tokens 0 .. first of the chunk (prefilled; the logits after the
 * last one score token first+1), and tokens first+1 .. n_ctx-1 are forced as
 * its outputs (na_request_force), each fed back by a decode step whose
 * logits score the next. In both modes the prefill is the same local causal
 * attention and the scored decode steps attend over the same KV (local, or
 * on the storage nodes), so offloaded and monolithic perplexity agree as
 * far as their decode attention does. The engine's max_rows should be
 * first + 1 (na_ppl_max_rows): every chunk's prompt is then one prefill step
 * of its own in both modes. */
#ifndef NA_PERPLEXITY_H
#define NA_PERPLEXITY_H

#include "common/status.h"
#include "compute-node/engine.h"
#include "compute-node/generate.h"

#define NA_PPL_MIN_CTX 4

typedef struct {
    int n_ctx;      /* tokens per chunk, NA_PPL_MIN_CTX .. the model's seq_len */
    int n_chunks;   /* most chunks to score; <= 0: every whole chunk */
    int bos;        /* the token put first in every chunk; < 0: none (a
                       vocabulary that adds no BOS: the chunks are left as
                       they are, as llama-perplexity does without add_bos) */
} na_ppl_opts_t;

/* The arrays lie in the object's own allocation (one free). */
typedef struct {
    int             n_ctx;
    int             first;      /* n_ctx / 2 */
    int             n_scored;   /* per chunk: n_ctx - 1 - first */
    int             n_chunks;
    na_request_t  **reqs;       /* [n_chunks] request i = chunk i (id i) */
    int            *force;      /* [n_chunks * n_scored] the scored tokens */
    double         *lp;         /* [n_chunks * n_scored] their log probabilities */
} na_ppl_t;

/* A summary of the chunks scored so far. */
typedef struct {
    long   count;       /* tokens scored */
    double nll;         /* mean negative log-likelihood */
    double ppl;         /* exp(nll) */
    double ppl_err;     /* llama-perplexity's "+/-": ppl * sqrt(var(nll) / (count - 1)),
                           0 when count < 2 or the variance is not positive */
} na_ppl_est_t;

/* The engine max_rows for chunks of n_ctx tokens (first + 1). */
int na_ppl_max_rows(int n_ctx);

/* Cut tokens[0..n_tokens) into chunk requests for engine e. NA_ERR_RANGE
 * when n_ctx is outside [NA_PPL_MIN_CTX, seq_len] or when n_tokens < 2 *
 * n_ctx (as llama-perplexity: "the text tokenizes to only N tokens..."),
 * NA_ERR_INVALID for a token out of range, NA_ERR_NOMEM. *p_p is owned by the
 * caller (na_ppl_destroy). */
na_status_t na_ppl_create(const na_engine_t *e, const int *tokens, int n_tokens,
                          const na_ppl_opts_t *o, na_ppl_t **p_p);
void        na_ppl_destroy(na_ppl_t *p);

/* 1 when chunk i has been scored completely (its request ended LENGTH). */
int  na_ppl_chunk_done(const na_ppl_t *p, int i);
/* The estimate over chunks 0 .. n-1 (scored), summing their log
 * probabilities in token order (so the result does not depend on the order
 * the chunks finished in). */
void na_ppl_estimate(const na_ppl_t *p, int n, na_ppl_est_t *out);

#endif /* NA_PERPLEXITY_H */
