/* compute-node/generate.h — requests and the monolithic generation loop.
 *
 * A request is a prompt (token ids), a limit of new tokens and a sampler of
 * its own. na_generate runs a set of requests to completion on one engine:
 * waiting requests are admitted up to max_batch, their prompts are prefilled
 * together (prompts of different lengths stacked into one step, chunked at the
 * engine's max_rows), then decode steps run every active request as one row
 * of each matmul. A request ends at a stop token (EOS/BOS, not emitted), after
 * max_new tokens, or when the context is full; its KV is freed right then and
 * a waiting request takes its place (continuous batching). */
#ifndef NA_GENERATE_H
#define NA_GENERATE_H

#include <stddef.h>

#include "common/status.h"
#include "compute-node/engine.h"
#include "compute-node/kv_local.h"
#include "compute-node/sampler.h"

typedef enum {
    NA_REQ_WAITING = 0,     /* not admitted yet */
    NA_REQ_PREFILL = 1,     /* admitted, prompt partly in the KV */
    NA_REQ_DECODE  = 2,     /* generating */
    NA_REQ_DONE    = 3,
} na_req_state_t;

typedef enum {
    NA_FINISH_NONE    = 0,
    NA_FINISH_STOP    = 1,  /* sampled a stop token (EOS / BOS) */
    NA_FINISH_LENGTH  = 2,  /* produced max_new tokens */
    NA_FINISH_CONTEXT = 3,  /* the model's seq_len is full */
} na_finish_t;

typedef struct na_request {
    int             id;         /* caller's tag */
    int            *prompt;     /* [n_prompt] copy, in the request's own block */
    int             n_prompt;
    int             max_new;    /* >= 1 */
    int            *out;        /* [min(max_new, seq_len - n_prompt + 1)] generated (same block) */
    int             n_out;
    int             n_pos;      /* tokens stored in the KV */
    int             n_cached;   /* prompt tokens whose KV came from a prefix cache at
                                   admission (not computed for it; offload) */
    int             last;       /* last token: the input of the next decode row */
    na_req_state_t  state;
    na_finish_t     finish;
    na_sampler_t    sampler;    /* its own random state (na_sampler_init) */
    na_lkv_t  *kv;         /* owned while admitted, NULL otherwise */
    void           *user;       /* caller's pointer, untouched */
    const int      *force;      /* teacher forcing (na_request_force), or NULL */
    double         *force_lp;   /* [max_new] log p of each forced token */
} na_request_t;

/* Called for every emitted token (streaming) and once when a request ends. */
typedef void (*na_gen_token_fn)(void *user, const na_request_t *r, int token);
typedef void (*na_gen_done_fn)(void *user, const na_request_t *r);
/* Called when a request fails (state DONE, finish NONE), before on_done. */
typedef void (*na_gen_error_fn)(void *user, const na_request_t *r, na_status_t st,
                                const char *why);

typedef struct {
    int              max_batch;   /* most requests admitted at once; <= 0: all */
    const int       *stop_ids;    /* [n_stop] tokens that end a request */
    int              n_stop;
    na_gen_token_fn  on_token;    /* may be NULL */
    na_gen_done_fn   on_done;     /* may be NULL (also called after on_error) */
    void            *user;
    na_gen_error_fn  on_error;    /* may be NULL: a request failed, the others go on */
} na_gen_opts_t;

typedef struct {
    long   prompt_tokens;   /* rows run in prefill steps */
    long   gen_tokens;      /* tokens emitted */
    long   decode_tokens;   /* rows run in decode steps */
    int    prefill_steps;
    int    decode_steps;
    double prefill_s;       /* wall time in prefill steps (incl. first sample) */
    double decode_s;        /* wall time in decode steps (incl. sampling) */
    size_t kv_bytes_peak;   /* most local KV bytes allocated at once */
    int    failed;          /* requests that ended with an error (on_error) */
} na_gen_stats_t;

/* A request for prompt[0..n_prompt) (copied) generating at most max_new
 * tokens. Fails with NA_ERR_INVALID (empty prompt, max_new <= 0, token id out
 * of range, bad sampler settings), NA_ERR_RANGE (prompt longer than the
 * model's context), NA_ERR_NOMEM. Owned by the caller. */
na_status_t na_request_create(const na_engine_t *e, int id, const int *prompt,
                              int n_prompt, int max_new, const na_sampler_cfg_t *scfg,
                              na_request_t **r_p);
/* Free a request and whatever it holds; NULL is a no-op. */
void na_request_destroy(na_request_t *r);
/* Take r's sampled token t: one of stop_ids[0..n_stop) ends r (NA_FINISH_STOP,
 * returns 0); any other is appended and reported (on_token, may be NULL), and
 * r ends when it reached max_new (LENGTH) or seq_len positions (CONTEXT);
 * returns 1. Cannot fail (r->out has room for max_new tokens). */
int  na_request_take(na_request_t *r, int t, const int *stop_ids, int n_stop, int seq_len,
                     na_gen_token_fn on_token, void *user);

/* Teacher forcing, for scoring a text (nearattn perplexity): the k-th token
 * r takes (k = 0 .. max_new-1) is force[k], not a sample, and logprob[k]
 * receives log p(force[k]) under the logits row it was taken from
 * (na_sampler_logprob: log-softmax in double). Both arrays are borrowed
 * ([max_new], they outlive r). The request then runs like any other: its
 * first forced token is scored on the prompt's last logits, each next one on
 * the decode step that fed the one before, and it ends after max_new tokens
 * (stop ids still end it: a scorer passes none). NA_ERR_INVALID for a token
 * out of range or a request already admitted. */
na_status_t na_request_force(na_request_t *r, const int *force, double *logprob);

/* Sample r's next token from its logits row into *t (the forced token under
 * teacher forcing, na_request_force). Fails with
 * NA_ERR_RANGE "logits are not finite (NaN/Inf) at token N" (N: the position
 * of the token being sampled) when the row holds a NaN or an infinity. */
na_status_t na_request_sample(na_request_t *r, float *logits, na_prob_index_t *scratch,
                              int *t);

/* Run reqs[0..n) (state WAITING) to completion. A request whose logits are
 * not finite fails alone (on_error, on_done; stats->failed). Returns the
 * first error of a step (NA_ERR_NOMEM, NA_ERR_RANGE...) — requests not finished then stay in
 * their state; stats (may be NULL) are filled either way. */
na_status_t na_generate(na_engine_t *e, na_request_t **reqs, int n,
                        const na_gen_opts_t *opts, na_gen_stats_t *stats);

#endif /* NA_GENERATE_H */
