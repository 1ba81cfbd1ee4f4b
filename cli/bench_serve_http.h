/* cli/bench_serve_http.h — the HTTP client side of `nearattn bench serve`
 * (cli/bench_serve_http.c): streamed completions against an
 * OpenAI-compatible server with libcurl's multi interface, a fixed number in
 * flight, each answer's server-sent events timed as they arrive. */
#ifndef NA_BENCH_SERVE_HTTP_H
#define NA_BENCH_SERVE_HTTP_H

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

#endif /* NA_BENCH_SERVE_HTTP_H */
