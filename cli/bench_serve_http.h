/* cli/bench_serve_http.h — the HTTP client side of `nearattn bench serve`
 * (cli/bench_serve_http.c): streamed completions against an
 * OpenAI-compatible server with libcurl's multi interface, a fixed number in
 * flight, each answer's server-sent events timed as they arrive. */
#ifndef NA_BENCH_SERVE_HTTP_H
#define NA_BENCH_SERVE_HTTP_H

#include <stddef.h>
#include <sys/types.h>

#include "common/status.h"

typedef struct {
    const char *base_url;     /* "http://127.0.0.1:PORT" */
    const char *api_key;      /* bearer key, or NULL */
    const char *model;        /* the requests' "model" field */
    int         max_tokens;   /* per request; temperature 0 (greedy) */
    int         timeout_s;    /* per request */
} na_bsh_opts_t;

/* What one level of concurrency measured. */
typedef struct {
    double  wall_s;           /* first request sent .. last answer received */
    long    requests, failed; /* answered, of which failed (HTTP error, no [DONE]) */
    long    tokens;           /* completion tokens (usage, else text chunks) */
    long    prompt_said;      /* requests whose server said how many prompt tokens it
                                 computed (timings.prompt_n, or usage's cached_tokens) */
    long    prompt_tokens;    /* their prompt tokens */
    long    prompt_computed;  /* of them computed, not taken from a prompt cache */
    double *ttft;             /* [n_ttft] s from sending to the first text */
    long    n_ttft;
    double *itl;              /* [n_itl] s between successive text chunks of one answer */
    long    n_itl;
    char    first_error[256]; /* the first failure, "" if none */
} na_bsh_result_t;

/* Send POST /v1/completions {"prompt": prompts[i], "stream": true, ...} for
 * every i < n, concurrency of them in flight at any time, and time them into
 * *r (na_bsh_result_free after). NA_ERR_NOMEM, NA_ERR_INTERNAL (libcurl);
 * failed requests are counted, not errors. */
na_status_t na_bsh_drive(const na_bsh_opts_t *o, char *const *prompts, int n, int concurrency,
                         na_bsh_result_t *r);
void        na_bsh_result_free(na_bsh_result_t *r);

/* Wait up to timeout_s for GET base/health to answer 200, then take the
 * first model id of GET base/v1/models into model (len bytes). alive() is
 * asked between tries (the server process still runs): 0 ends the wait.
 * NA_ERR_TIMEOUT, NA_ERR_PEER (alive() said no, or /v1/models unusable). */
na_status_t na_bsh_wait_ready(const char *base_url, const char *api_key, int timeout_s,
                              int (*alive)(void *ctx), void *ctx, char *model, size_t len);

/* A session (`bench arrivals`): streamed completions sent one at a time
 * whenever the caller likes, all driven by na_bsh_session_poll, each with
 * its own timeline. */
typedef struct na_bsh_session na_bsh_session_t;

enum { NA_BSH_RUNNING = 1, NA_BSH_DONE, NA_BSH_FAILED, NA_BSH_CANCELLED };

/* One request's timeline (times: na_now_s()). */
typedef struct {
    double  t_sent, t_end;    /* sent; its transfer ended or was cancelled (0: running) */
    double *t_text;           /* [n_text] arrival of each text chunk */
    long    n_text;
    long    prompt_tokens;    /* from the usage event; -1 if none came */
    long    completion_tokens;/* usage (else text chunks) of a request DONE; -1 before */
    int     state;            /* NA_BSH_RUNNING, _DONE, _FAILED, _CANCELLED */
    char    error[256];       /* why it FAILED */
} na_bsh_trace_t;

/* A session of at most max_requests requests against o's server (o's
 * max_tokens unused: each send names its own). NA_ERR_NOMEM. */
na_status_t na_bsh_session_create(const na_bsh_opts_t *o, int max_requests,
                                  na_bsh_session_t **s_p);
/* Send POST /v1/completions, streamed, greedy, with the prompt text, or the
 * token ids[n_ids] when ids != NULL, and max_tokens; its index into *idx.
 * NA_ERR_RANGE (session full), NA_ERR_NOMEM, NA_ERR_INTERNAL. */
na_status_t na_bsh_session_send(na_bsh_session_t *s, const char *text, const int *ids,
                                int n_ids, int max_tokens, int *idx);
/* Move the transfers on, then wait up to timeout_ms for more to arrive
 * (0: no wait); requests still running into *running (may be NULL).
 * NA_ERR_INTERNAL (libcurl). */
na_status_t na_bsh_session_poll(na_bsh_session_t *s, int timeout_ms, int *running);
/* Request idx's timeline (valid until destroy); NULL for a bad index. */
const na_bsh_trace_t *na_bsh_session_trace(const na_bsh_session_t *s, int idx);
/* Stop request idx if it runs: its connection is closed (a server cancels
 * the request when it sees that) and it is CANCELLED. */
void        na_bsh_session_cancel(na_bsh_session_t *s, int idx);
/* Cancel what runs, free everything. NULL is fine. */
void        na_bsh_session_destroy(na_bsh_session_t *s);

#endif /* NA_BENCH_SERVE_HTTP_H */
