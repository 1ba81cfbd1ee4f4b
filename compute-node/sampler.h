/* compute-node/sampler.h — picking the next token from a row of logits.
 *
 * Three rules, chosen by the settings:
 *   temperature == 0          greedy: the argmax (lowest id on ties);
 *   temperature > 0, top_p=1  sample from softmax(logits / temperature);
 *   temperature > 0, top_p<1  nucleus sampling: sample from the smallest set of
 *                             most probable tokens whose mass exceeds top_p,
 *                             renormalised.
 * Every sampler owns its random state (xorshift64*, seeded): the same seed and
 * the same logits give the same tokens, whatever else runs beside it. A
 * generation gives each request its own sampler so batching cannot change
 * which random numbers a request sees: `nearattn run --seed S` seeds request
 * i (0-based: the line of --prompts) with na_sampler_request_seed(S, i) =
 * splitmix64(S ^ i * 0xD1B54A32D192ED03), one uniform draw per sampled token.
 * The draw then depends only on the request's own logits, which must not
 * depend on the batch either: `run` at temperature > 0 makes the kernels
 * batch-invariant (na_kernels_t.batch_invariant), so one seed gives the same
 * text at every --batch and in every mode (monolithic, offload, kv-fetch).
 * Nucleus sampling draws from the nucleus in token-id order (see
 * na_sampler_topp), so near-equal probabilities cannot swap CDF places. */
#ifndef NA_SAMPLER_H
#define NA_SAMPLER_H

#include <stdint.h>

#include "common/status.h"

typedef struct {
    float    temperature;   /* >= 0; 0 = greedy */
    float    top_p;         /* (0, 1]; 1 = no nucleus cut */
    uint64_t seed;          /* any value; equal seeds give equal draws */
} na_sampler_cfg_t;

/* (probability, token) pair used to sort the nucleus. */
typedef struct {
    float p;
    int   id;
} na_prob_index_t;

typedef struct na_sampler {
    na_sampler_cfg_t  cfg;
    int               vocab_size;
    uint64_t          rng;        /* xorshift64* state, never 0 */
} na_sampler_t;

/* Check a configuration: temperature finite and >= 0, top_p in (0, 1].
 * Returns NA_ERR_INVALID with a message naming the bad field. */
na_status_t na_sampler_cfg_check(const na_sampler_cfg_t *cfg);

/* A top-p given as a double (a JSON number, --top-p) as the sampler's float.
 * p in (0, 1] stays in (0, 1]: a p below the smallest normal float (1e-300)
 * becomes FLT_MIN, the same nucleus (the most likely token alone), rather
 * than 0, which na_sampler_cfg_check refuses. Other values convert as they are. */
float na_sampler_top_p(double p);

/* Set up *s, held by value (a request keeps its sampler in its own block),
 * for rows of vocab_size logits. Fails with NA_ERR_INVALID (bad cfg or
 * vocab_size <= 0), leaving *s untouched. A sampler holds no O(vocab) memory:
 * the nucleus scratch is passed to na_sampler_sample, so one buffer serves
 * every request of a batch. */
na_status_t na_sampler_init(na_sampler_t *s, const na_sampler_cfg_t *cfg, int vocab_size);

/* Returned by na_sampler_sample for a row holding a NaN or an infinity. */
#define NA_SAMPLER_NOT_FINITE (-1)

/* Pick a token from logits[vocab_size]. The row is used as scratch: on return
 * it holds the probabilities (or is untouched for greedy). `scratch`
 * [vocab_size] is work space for nucleus sampling; it may be NULL only when
 * the sampler needs none (na_sampler_needs_scratch). Returns the token, or
 * NA_SAMPLER_NOT_FINITE (the row untouched, no random number drawn) when a
 * logit is NaN or infinite. */
int na_sampler_sample(na_sampler_t *s, float *logits, na_prob_index_t *scratch);
/* 1 when na_sampler_sample needs a scratch buffer (temperature > 0, top_p < 1). */
int na_sampler_needs_scratch(const na_sampler_t *s);

/* log p(tok) under softmax(logits[0..n)), the log-softmax in double as
 * llama.cpp's perplexity computes it: logits[tok] - max - log(sum exp(l - max))
 * (each exp in float, summed in double). The row must be finite. */
double na_sampler_logprob(const float *logits, int n, int tok);

/* Building blocks, exposed for tests. */
/* 1 when every x[0..n) is finite (no NaN, no infinity). */
int      na_sampler_all_finite(const float *x, int n);
/* Index of the largest of x[0..n) (first on ties). */
int      na_sampler_argmax(const float *x, int n);
/* Next uniform float in [0, 1) of a xorshift64* state (advances *state). */
float    na_sampler_uniform(uint64_t *state);
/* Seed a xorshift64* state from any 64-bit value (never yields state 0). */
uint64_t na_sampler_seed_state(uint64_t seed);
/* Mix a base seed and a request index into a per-request seed. */
uint64_t na_sampler_request_seed(uint64_t base, uint64_t index);

#endif /* NA_SAMPLER_H */
