/* serve/gen.h — a long-lived text-generation front end over one model: the
 * object `nearattn serve` and `nearattn batch` drive.
 *
 *   create    load the model and tokenizer as `nearattn run` does (--model,
 *             else the layout's), create the compute engine, set up the
 *             layout's cluster (cluster/setup.h: start / connect / inproc)
 *             and the long-lived offload engine (compute-node/offload.h) over
 *             its attention service;
 *   submit    a job: a prompt (token ids, or text encoded with BOS as `run`
 *             does), max_tokens, sampling settings, stop strings, and two
 *             callbacks: on_text (valid UTF-8 pieces of the generated text,
 *             in order) and on_end (finish reason and usage, once);
 *   cancel    end a job at its batch's next step boundary (its KV released
 *             on the storage nodes); on_end says "cancelled";
 *   progress  run the engine up to timeout_ms (callbacks run in here);
 *   destroy   stop everything; jobs still held get no callback.
 *
 * Modes. offload (default) and kv-fetch run the offload engine over the
 * layout's storage nodes (started here or connected to). monolithic runs the
 * same engine over the in-process attention service (the layout's device
 * slots inside this process, cluster/inproc.h, no network and no child
 * process): the simplest long-lived continuous-batching path, so the server
 * has one engine loop with submit / cancel / progress in every mode. Its
 * tokens equal `nearattn run --mode monolithic` for the same prompt and
 * seed (greedy and sampled outputs are equal across modes, a project
 * invariant checked by tests/cluster/test_offload_run.sh).
 *
 * Sampling. A job's sampler is seeded like request 0 of `nearattn run
 * --seed S` (na_sampler_request_seed(S, 0)), and the kernels are made
 * batch-invariant, so a job's text does not depend on what else is batched
 * with it: `nearattn run --prompt P --seed S --temp T --top-p X -n N` prints
 * P followed by the same text. A job without a seed gets one from the clock.
 *
 * Text. Tokens are decoded with the previous token as `run` does (a lone
 * control byte other than whitespace is dropped, as run's output does); bytes
 * of an incomplete UTF-8 sequence are held until it completes, invalid bytes
 * become U+FFFD. Stop strings are matched on the decoded text: text that may
 * begin a stop string is held back until it cannot; a match ends the job
 * ("stop") and the text up to the match (excluded) is all that is sent.
 *
 * Thread model: single-threaded, as the offload engine. Every call and every
 * callback runs on the caller's thread; callbacks only inside progress (and
 * may call submit / cancel). A job handle is valid until its on_end returned. */
#ifndef NA_SERVE_GEN_H
#define NA_SERVE_GEN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "common/model.h"
#include "compute-node/attn_service.h"
#include "common/status.h"
#include "common/tokenizer.h"

#define NA_SG_MAX_STOP      8      /* stop strings per job (OpenAI allows 4, a chat template adds one) */
#define NA_SG_MAX_STOP_LEN  256    /* bytes per stop string */
#define NA_SG_MAX_NODES     64     /* storage nodes in the per-node stats */

typedef enum {
    NA_SG_STOP = 0,         /* a stop token (EOS/BOS) or a stop string */
    NA_SG_LENGTH,           /* max_tokens, or the model context is full */
    NA_SG_ERROR,            /* the job failed (end->status, end->error) */
    NA_SG_CANCELLED,        /* na_sg_cancel */
} na_sg_finish_t;

/* "stop", "length", "error", "cancelled". */
const char *na_sg_finish_name(na_sg_finish_t f);

typedef struct {
    const char *mode;            /* "offload" (default), "monolithic" or "kv-fetch" */
    const char *config_path;     /* the layout file (required) */
    const char *cluster;         /* "start" (default), "connect" or "inproc"
                                    (offload / kv-fetch; monolithic is always inproc) */
    const char *model_path;      /* NULL: the layout's model.path */
    const char *tokenizer_path;  /* NULL: the layout's (when the model is the layout's),
                                    the GGUF's own, P.tok.bin or tokenizer.bin beside P.bin */
    const char *backend;         /* kernels: "cpu" (default) or "ref" */
    int         threads;         /* <= 0: all cores */
    int         max_batch;       /* requests per batch; <= 0: the layout's */
    int         batches_in_flight; /* <= 0: 1 in monolithic mode (the slots' attention
                                    * runs on the compute threads' cores, so a second
                                    * batch cannot overlap it and only halves the
                                    * batches: the weights read twice per step), the
                                    * layout's parallel.batches_in_flight otherwise */
    int         ctx;             /* model context in tokens; <= 0: the model file's */
    int         no_prefix_reuse; /* 1: kv.prefix_reuse off (docs/prefix-reuse.md) */
    int         no_adaptive_batches; /* 1: parallel.adaptive_batches off: always every
                                        batch in flight (docs/offload.md) */
    volatile sig_atomic_t *stop; /* start: set by a signal to give up waiting for nodes */
} na_sg_opts_t;

typedef struct na_sg na_sg_t;
typedef struct na_sg_job na_sg_job_t;    /* a submitted job (handle) */

/* The end of a job. */
typedef struct {
    na_sg_finish_t finish;
    int            prompt_tokens;
    int            cached_tokens;       /* of them, taken from the prefix cache */
    int            completion_tokens;   /* tokens generated (up to the stop) */
    na_status_t    status;              /* NA_OK unless finish is ERROR / CANCELLED */
    const char    *error;               /* ERROR: the reason (valid during the call) */
} na_sg_end_t;

/* A piece of generated text: len bytes of valid UTF-8 (not NUL-terminated). */
typedef void (*na_sg_text_fn)(void *user, const char *text, size_t len);
/* The job ended; its handle is invalid once this returns. */
typedef void (*na_sg_end_fn)(void *user, const na_sg_end_t *end);

typedef struct {
    const int         *prompt;       /* token ids, BOS first as the caller wants; or NULL: */
    int                n_prompt;
    const char        *text;         /* the prompt text, encoded with BOS when the
                                      * tokenizer asks for it (as `run`) */
    const na_tok_span_t *special;    /* [n_special] parts of text whose control tokens
                                      * (<|im_start|>) are tokens: a chat's template */
    size_t             n_special;
    int                max_tokens;   /* <= 0: up to the context; prompt + max_tokens
                                        past the context is refused (NA_ERR_RANGE) */
    double             temperature;  /* >= 0 (0 greedy) */
    double             top_p;        /* (0, 1] */
    uint64_t           seed;
    int                seed_given;   /* 0: a seed from the clock */
    const char *const *stop;         /* [n_stop] stop strings (copied), non-empty */
    int                n_stop;
    na_sg_text_fn      on_text;      /* may be NULL */
    na_sg_end_fn       on_end;       /* may be NULL */
    void              *user;
} na_sg_params_t;

/* Counters since create (the server's /metrics). */
typedef struct {
    long     waiting;            /* jobs not admitted yet */
    long     running;            /* admitted, generating */
    long     finished;           /* ended stop / length */
    long     failed;             /* ended with an error */
    long     cancelled;
    long     prompt_tokens;      /* of the jobs admitted */
    long     gen_tokens;         /* tokens generated */
    long     recovered;          /* requests re-placed after a lost storage node */
    long     prefix_hit_tokens;  /* prompt tokens a storage node already held */
    long     prefix_computed_tokens; /* prompt tokens prefilled here */
    long     attn_calls;         /* attention round trips (offload engine) */
    long     steps_merged, steps_split; /* batch steps by spread (parallel.adaptive_batches) */
    long     split_trials, split_trials_won;
    double   attn_rt_s;          /* their summed time */
    uint64_t bytes_sent, bytes_recv;   /* to / from the storage nodes (remote) */
    uint64_t prefill_bytes;      /* prompt KV shipped */
    uint64_t kv_bytes;           /* KV of the jobs held now (tokens x bytes per token) */
    int      n_storage;          /* storage nodes of the layout */
    /* per storage node (remote modes; none in-process): attention round
     * trips, bytes, KV in DRAM / on SSD (compute-node/attn_service.h) */
    na_asvc_node_stats_t nodes[NA_SG_MAX_NODES];
    int      n_nodes;
} na_sg_stats_t;

void        na_sg_opts_default(na_sg_opts_t *o);
void        na_sg_params_default(na_sg_params_t *p);   /* temperature 1, top_p 1 */
/* Create (see above). The model's, the tokenizer's, the layout's, the
 * cluster's or the engine's error; NA_ERR_INVALID for an unknown mode. */
na_status_t na_sg_create(const na_sg_opts_t *o, na_sg_t **g_p);
/* Queue a job (p and its strings are copied). NA_ERR_INVALID (empty prompt,
 * bad sampling values, too many or empty stop strings, a token id out of
 * range), NA_ERR_RANGE (the prompt, or the prompt and max_tokens together, do not
 * fit the context: the message says the limit), the engine's
 * fatal error, NA_ERR_NOMEM. No callback runs for a refused job. */
na_status_t na_sg_submit(na_sg_t *g, const na_sg_params_t *p, na_sg_job_t **job_p);
/* End job j (ends with CANCELLED at the next progress); a no-op for a job
 * that is ending already. */
void        na_sg_cancel(na_sg_t *g, na_sg_job_t *j);
/* Run the engine until no job is held or timeout_ms passed (0: one pass;
 * < 0: until idle). An error of the compute node itself (afterwards only
 * destroy is useful). */
na_status_t na_sg_progress(na_sg_t *g, int timeout_ms);
/* Jobs held (submitted, on_end not called yet). */
int         na_sg_pending(const na_sg_t *g);
/* Counters since create, with the attention service's and each storage
 * node's (round trips to the nodes when no attention is in flight: for
 * /metrics, not for a progress line). */
void        na_sg_stats(na_sg_t *g, na_sg_stats_t *out);
/* Tokens generated since create (no round trip). */
long        na_sg_gen_tokens(const na_sg_t *g);
/* The model (its cfg.seq_len is the context in use; gguf for the chat
 * template), the tokenizer, and a name for /v1/models (the model file's
 * name without directories and extension). */
const na_model_t     *na_sg_model(const na_sg_t *g);
const na_tokenizer_t *na_sg_tokenizer(const na_sg_t *g);
const char           *na_sg_model_name(const na_sg_t *g);
/* Requests the engine runs at once: its batch size x the batches in flight
 * it was created with (1 batch in monolithic mode unless asked). */
int                   na_sg_capacity(const na_sg_t *g);
/* How the cluster was set up ("cluster started here", ...). */
const char           *na_sg_how(const na_sg_t *g);
/* The storage nodes started here (--cluster start): reap those that exited
 * and start them again (na_cluster_heal); never blocks. Returns how many
 * are down now (0 for connect and monolithic). */
int                   na_sg_heal(na_sg_t *g);
/* Stop the engine and the cluster (nodes started here stopped, private
 * directories removed); jobs still held are freed without callbacks. NULL
 * is a no-op. */
void        na_sg_destroy(na_sg_t *g);

/* Building blocks, exposed for tests: the length of the longest prefix of
 * s[0..n) that does not end inside an incomplete (but so far valid) UTF-8
 * sequence; and s[0..n) made valid UTF-8 into out (capacity 3n + 1; invalid
 * bytes become U+FFFD), returning the bytes written. */
size_t na_sg_utf8_complete(const char *s, size_t n);
size_t na_sg_utf8_clean(const char *s, size_t n, char *out);

#endif /* NA_SERVE_GEN_H */
