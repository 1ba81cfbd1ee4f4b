/* cli/bench_serve_http.c — streamed completions over HTTP for `nearattn
 * bench serve` (cli/bench_serve_http.h): libcurl's multi interface keeps
 * `concurrency` requests in flight; each answer's server-sent events
 * ("data: {chunk}" ... "data: [DONE]") are split and parsed (jansson) as
 * they arrive, so the first text chunk gives the time to first token and
 * the gaps between text chunks the inter-token latencies. */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/bench_serve_http.h"
#include "common/clock.h"

#define BSH_LINE_MAX (1 << 20)   /* longest event line kept (bytes) */

/* One request in flight. */
typedef struct {
    CURL              *h;
    struct curl_slist *hdr;
    char              *body;        /* the POST body (owned) */
    char              *line;        /* the event line being received */
    size_t             n_line, cap;
    double             t0, t_last;  /* sent, last text chunk (0: none yet) */
    long               chunks;      /* text chunks */
    long               usage;       /* usage.completion_tokens, -1 if none */
    long               prompt;      /* usage.prompt_tokens, -1 if none */
    long               computed;    /* of them computed (not from a prompt cache), -1 if
                                       the server does not say */
    int                done;        /* "[DONE]" seen */
    int                bad;         /* an error event or an unparsable one */
    na_bsh_result_t   *r;
    na_bsh_trace_t    *tr;          /* a session's request: its timeline; else NULL */
} bsh_req_t;

/* Append v to a growing array. */
static int bsh_push(double **a, long *n, double v)
{
    if ((*n & (*n - 1)) == 0) {             /* 0, 1, 2, 4...: grow to the next power */
        double *b = realloc(*a, (size_t)(*n ? 2 * *n : 1) * sizeof(double));
        if (b == NULL)
            return -1;
        *a = b;
    }
    (*a)[(*n)++] = v;
    return 0;
}

/* The prompt tokens a server computed for q, where it says: llama-server's
 * timings.prompt_n, or prompt_tokens less OpenAI's
 * usage.prompt_tokens_details.cached_tokens (nearattn serve). */
static void bsh_computed(bsh_req_t *q, json_t *ev)
{
    json_t *pn = json_object_get(json_object_get(ev, "timings"), "prompt_n");
    json_t *u = json_object_get(ev, "usage");
    json_t *ct = json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens");
    json_t *pt = json_object_get(u, "prompt_tokens");

    if (json_is_integer(pn))
        q->computed = (long)json_integer_value(pn);
    else if (json_is_integer(ct) && json_is_integer(pt))
        q->computed = (long)(json_integer_value(pt) - json_integer_value(ct));
}

/* One whole event line ("data: ..."). */
static void bsh_event(bsh_req_t *q, const char *s, size_t n)
{
    json_t *ev, *ch, *text, *usage;
    double now;

    if (n < 6 || strncmp(s, "data: ", 6) != 0)
        return;                              /* blank separators, comments, "event:" */
    s += 6;
    n -= 6;
    if (n == 6 && !strncmp(s, "[DONE]", 6)) {
        q->done = 1;
        return;
    }
    ev = json_loadb(s, n, 0, NULL);
    if (!json_is_object(ev) || json_object_get(ev, "error") != NULL) {
        if (q->r->first_error[0] == '\0')
            snprintf(q->r->first_error, sizeof(q->r->first_error), "event: %.*s",
                     (int)(n < 200 ? n : 200), s);
        q->bad = 1;
        json_decref(ev);
        return;
    }
    ch = json_array_get(json_object_get(ev, "choices"), 0);
    text = json_object_get(ch, "text");
    if (text == NULL)
        text = json_object_get(json_object_get(ch, "delta"), "content");
    if (json_is_string(text) && json_string_length(text) > 0) {
        now = na_now_s();
        if (q->tr != NULL)
            bsh_push(&q->tr->t_text, &q->tr->n_text, now);
        else if (q->t_last == 0)
            bsh_push(&q->r->ttft, &q->r->n_ttft, now - q->t0);
        else
            bsh_push(&q->r->itl, &q->r->n_itl, now - q->t_last);
        q->t_last = now;
        q->chunks++;
    }
    usage = json_object_get(json_object_get(ev, "usage"), "completion_tokens");
    if (json_is_integer(usage))
        q->usage = (long)json_integer_value(usage);
    usage = json_object_get(json_object_get(ev, "usage"), "prompt_tokens");
    if (json_is_integer(usage))
        q->prompt = (long)json_integer_value(usage);
    if (q->tr != NULL && json_is_integer(usage))
        q->tr->prompt_tokens = (long)json_integer_value(usage);
    bsh_computed(q, ev);
    json_decref(ev);
}

/* libcurl's write callback: split what arrived into lines. */
static size_t bsh_write(char *p, size_t sz, size_t nm, void *ctx)
{
    bsh_req_t *q = ctx;
    size_t n = sz * nm, i;

    for (i = 0; i < n; i++) {
        if (p[i] == '\n') {
            size_t m = q->n_line;
            if (m > 0 && q->line[m - 1] == '\r')
                m--;
            bsh_event(q, q->line, m);
            q->n_line = 0;
            continue;
        }
        if (q->n_line == q->cap) {
            char *b;
            if (q->cap >= BSH_LINE_MAX)
                return 0;                    /* ends the transfer: counted failed */
            q->cap = q->cap ? 2 * q->cap : 4096;
            b = realloc(q->line, q->cap);
            if (b == NULL)
                return 0;
            q->line = b;
        }
        q->line[q->n_line++] = p[i];
    }
    return n;
}

static void bsh_req_clear(bsh_req_t *q)
{
    if (q->h != NULL)
        curl_easy_cleanup(q->h);
    curl_slist_free_all(q->hdr);
    free(q->body);
    free(q->line);
    memset(q, 0, sizeof(*q));
}

/* Headers of every request (Content-Type, the key). NULL when out of memory. */
static struct curl_slist *bsh_headers(const char *api_key, int json)
{
    struct curl_slist *h = NULL, *t;
    char auth[600];

    if (json) {
        h = curl_slist_append(NULL, "Content-Type: application/json");
        if (h == NULL)
            return NULL;
    }
    if (api_key != NULL) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", api_key);
        t = curl_slist_append(h, auth);
        if (t == NULL) {
            curl_slist_free_all(h);
            return NULL;
        }
        h = t;
    }
    return h;
}

/* Prepare q for the prompt (text p, or ids[n_ids] when ids != NULL) with
 * max_tokens new tokens and add it to m. */
static na_status_t bsh_req_start(const na_bsh_opts_t *o, CURLM *m, bsh_req_t *q,
                                 const char *p, const int *ids, int n_ids, int max_tokens,
                                 na_bsh_result_t *r)
{
    char url[600];
    json_t *b, *prompt;
    int i;

    memset(q, 0, sizeof(*q));
    q->r = r;
    q->usage = -1;
    q->prompt = -1;
    q->computed = -1;
    if (ids != NULL) {
        prompt = json_array();
        for (i = 0; prompt != NULL && i < n_ids; i++)
            if (json_array_append_new(prompt, json_integer(ids[i])) != 0) {
                json_decref(prompt);
                prompt = NULL;
            }
    } else {
        prompt = json_string(p);
    }
    b = prompt == NULL ? NULL :
        json_pack("{s:s, s:o, s:i, s:f, s:b, s:{s:b}}", "model", o->model, "prompt", prompt,
                  "max_tokens", max_tokens, "temperature", 0.0, "stream", 1,
                  "stream_options", "include_usage", 1);
    q->body = b != NULL ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    q->h = curl_easy_init();
    q->hdr = bsh_headers(o->api_key, 1);
    if (q->body == NULL || q->h == NULL || q->hdr == NULL) {
        bsh_req_clear(q);
        return na_err(NA_ERR_NOMEM, "bench serve: cannot prepare a request");
    }
    snprintf(url, sizeof(url), "%s/v1/completions", o->base_url);
    curl_easy_setopt(q->h, CURLOPT_URL, url);
    curl_easy_setopt(q->h, CURLOPT_HTTPHEADER, q->hdr);
    curl_easy_setopt(q->h, CURLOPT_POSTFIELDS, q->body);
    curl_easy_setopt(q->h, CURLOPT_WRITEFUNCTION, bsh_write);
    curl_easy_setopt(q->h, CURLOPT_WRITEDATA, q);
    curl_easy_setopt(q->h, CURLOPT_PRIVATE, q);
    curl_easy_setopt(q->h, CURLOPT_TIMEOUT, (long)o->timeout_s);
    curl_easy_setopt(q->h, CURLOPT_NOSIGNAL, 1L);
    q->t0 = na_now_s();
    if (curl_multi_add_handle(m, q->h) != CURLM_OK) {
        bsh_req_clear(q);
        return na_err(NA_ERR_INTERNAL, "curl_multi_add_handle failed");
    }
    return NA_OK;
}

/* q's transfer ended with res: count it. */
static void bsh_req_end(bsh_req_t *q, CURLcode res)
{
    long code = 0;
    na_bsh_result_t *r = q->r;

    curl_easy_getinfo(q->h, CURLINFO_RESPONSE_CODE, &code);
    r->requests++;
    if (res != CURLE_OK || code != 200 || !q->done || q->bad) {
        r->failed++;
        if (r->first_error[0] == '\0')
            snprintf(r->first_error, sizeof(r->first_error), "HTTP %ld, %s%s", code,
                     res != CURLE_OK ? curl_easy_strerror(res) : "ok",
                     q->done ? "" : ", no [DONE]");
        return;
    }
    r->tokens += q->usage >= 0 ? q->usage : q->chunks;
    if (q->prompt >= 0 && q->computed >= 0) {
        r->prompt_said++;
        r->prompt_tokens += q->prompt;
        r->prompt_computed += q->computed;
    }
}

na_status_t na_bsh_drive(const na_bsh_opts_t *o, char *const *prompts, int n, int concurrency,
                         na_bsh_result_t *r)
{
    bsh_req_t *q = calloc((size_t)concurrency, sizeof(*q));
    CURLM *m = curl_multi_init();
    na_status_t st = NA_OK;
    int next = 0, running = 0, i, inflight;
    double t0 = na_now_s();
    CURLMsg *msg;

    memset(r, 0, sizeof(*r));
    if (q == NULL || m == NULL) {
        free(q);
        if (m != NULL)
            curl_multi_cleanup(m);
        return na_err(NA_ERR_NOMEM, "bench serve: cannot start the HTTP client");
    }
    for (i = 0; i < concurrency && next < n && st == NA_OK; i++)
        st = bsh_req_start(o, m, &q[i], prompts[next++], NULL, 0, o->max_tokens, r);
    inflight = next;
    while (st == NA_OK && inflight > 0) {
        if (curl_multi_perform(m, &running) != CURLM_OK) {
            st = na_err(NA_ERR_INTERNAL, "curl_multi_perform failed");
            break;
        }
        /* what ended is replaced before waiting, or the wait would hold the next one */
        while ((msg = curl_multi_info_read(m, &i)) != NULL) {
            bsh_req_t *d = NULL;
            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&d);
            bsh_req_end(d, msg->data.result);
            curl_multi_remove_handle(m, d->h);
            bsh_req_clear(d);
            inflight--;
            if (next < n && st == NA_OK) {
                st = bsh_req_start(o, m, d, prompts[next++], NULL, 0, o->max_tokens, r);
                inflight += st == NA_OK;
            }
        }
        if (st == NA_OK && inflight > 0 && curl_multi_poll(m, NULL, 0, 100, NULL) != CURLM_OK)
            st = na_err(NA_ERR_INTERNAL, "curl_multi_poll failed");
    }
    r->wall_s = na_now_s() - t0;
    for (i = 0; i < concurrency; i++)
        if (q[i].h != NULL) {
            curl_multi_remove_handle(m, q[i].h);
            bsh_req_clear(&q[i]);
        }
    curl_multi_cleanup(m);
    free(q);
    return st;
}

void na_bsh_result_free(na_bsh_result_t *r)
{
    free(r->ttft);
    free(r->itl);
    memset(r, 0, sizeof(*r));
}

/* Collect a small answer into a buffer (ctx: bsh_buf_t). */
typedef struct {
    char  *p;
    size_t n;
} bsh_buf_t;

static size_t bsh_collect(char *p, size_t sz, size_t nm, void *ctx)
{
    bsh_buf_t *b = ctx;
    size_t n = sz * nm;
    char *t;

    if (b->n + n > (1u << 20))
        return 0;
    t = realloc(b->p, b->n + n + 1);
    if (t == NULL)
        return 0;
    memcpy(t + b->n, p, n);
    b->p = t;
    b->n += n;
    b->p[b->n] = '\0';
    return n;
}

/* GET base+path: the status code (0: no answer) and the body into *b. */
static long bsh_get(const char *base, const char *path, const char *api_key, bsh_buf_t *b)
{
    char url[600];
    long code = 0;
    struct curl_slist *hdr = bsh_headers(api_key, 0);
    CURL *h = curl_easy_init();

    if (h == NULL) {
        curl_slist_free_all(hdr);
        return 0;
    }
    snprintf(url, sizeof(url), "%s%s", base, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, bsh_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 5L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    return code;
}

na_status_t na_bsh_wait_ready(const char *base_url, const char *api_key, int timeout_s,
                              int (*alive)(void *ctx), void *ctx, char *model, size_t len)
{
    double end = na_now_s() + timeout_s;
    bsh_buf_t b = { NULL, 0 };
    json_t *root, *id;
    long code;

    while ((code = bsh_get(base_url, "/health", api_key, &b)) != 200) {
        free(b.p);
        b.p = NULL;
        b.n = 0;
        if (!alive(ctx))
            return na_err(NA_ERR_PEER, "the server exited before it answered %s/health",
                          base_url);
        if (na_now_s() > end)
            return na_err(NA_ERR_TIMEOUT, "%s/health did not answer 200 within %d s (last: "
                          "%ld)", base_url, timeout_s, code);
        usleep(100000);
    }
    free(b.p);
    b.p = NULL;
    b.n = 0;
    code = bsh_get(base_url, "/v1/models", api_key, &b);
    root = code == 200 && b.p != NULL ? json_loads(b.p, 0, NULL) : NULL;
    free(b.p);
    id = json_object_get(json_array_get(json_object_get(root, "data"), 0), "id");
    if (!json_is_string(id)) {
        json_decref(root);
        return na_err(NA_ERR_PEER, "%s/v1/models (HTTP %ld) names no model", base_url, code);
    }
    snprintf(model, len, "%s", json_string_value(id));
    json_decref(root);
    return NA_OK;
}

/* ---- sessions: requests sent one at a time, each one's timeline kept ---- */

struct na_bsh_session {
    na_bsh_opts_t    o;
    CURLM           *m;
    bsh_req_t       *q;          /* [cap] requests, in the order sent */
    na_bsh_trace_t  *tr;         /* [cap] their timelines */
    int              n, cap;
    na_bsh_result_t  r;          /* bookkeeping of the requests (first_error) */
};

na_status_t na_bsh_session_create(const na_bsh_opts_t *o, int max_requests,
                                  na_bsh_session_t **s_p)
{
    na_bsh_session_t *s = calloc(1, sizeof(*s));

    *s_p = NULL;
    if (s == NULL || max_requests < 1)
        goto fail;
    s->o = *o;
    s->cap = max_requests;
    s->q = calloc((size_t)max_requests, sizeof(*s->q));
    s->tr = calloc((size_t)max_requests, sizeof(*s->tr));
    s->m = curl_multi_init();
    if (s->q == NULL || s->tr == NULL || s->m == NULL)
        goto fail;
    *s_p = s;
    return NA_OK;
fail:
    na_bsh_session_destroy(s);
    return na_err(NA_ERR_NOMEM, "bench: cannot start the HTTP client");
}

na_status_t na_bsh_session_send(na_bsh_session_t *s, const char *text, const int *ids,
                                int n_ids, int max_tokens, int *idx)
{
    na_bsh_trace_t *t;
    na_status_t st;

    if (s->n == s->cap)
        return na_err(NA_ERR_RANGE, "bench: more than %d requests in one session", s->cap);
    t = &s->tr[s->n];
    memset(t, 0, sizeof(*t));
    t->prompt_tokens = t->completion_tokens = -1;
    st = bsh_req_start(&s->o, s->m, &s->q[s->n], text, ids, n_ids, max_tokens, &s->r);
    if (st != NA_OK)
        return st;
    s->q[s->n].tr = t;
    t->t_sent = s->q[s->n].t0;
    t->state = NA_BSH_RUNNING;
    *idx = s->n++;
    return NA_OK;
}

/* Request k's transfer ended (res), or was cancelled (cancel): its state. */
static void bsh_session_end(na_bsh_session_t *s, int k, CURLcode res, int cancel)
{
    bsh_req_t *q = &s->q[k];
    na_bsh_trace_t *t = &s->tr[k];
    long code = 0;

    t->t_end = na_now_s();
    curl_easy_getinfo(q->h, CURLINFO_RESPONSE_CODE, &code);
    if (cancel) {
        t->state = NA_BSH_CANCELLED;
    } else if (res != CURLE_OK || code != 200 || !q->done || q->bad) {
        t->state = NA_BSH_FAILED;
        if (s->r.first_error[0] != '\0')
            snprintf(t->error, sizeof(t->error), "%s", s->r.first_error);
        else
            snprintf(t->error, sizeof(t->error), "HTTP %ld, %s%s", code,
                     res != CURLE_OK ? curl_easy_strerror(res) : "ok",
                     q->done ? "" : ", no [DONE]");
        s->r.first_error[0] = '\0';
    } else {
        t->state = NA_BSH_DONE;
        t->completion_tokens = q->usage >= 0 ? q->usage : q->chunks;
    }
    curl_multi_remove_handle(s->m, q->h);   /* a transfer under way: its connection closes */
    bsh_req_clear(q);
}

na_status_t na_bsh_session_poll(na_bsh_session_t *s, int timeout_ms, int *running)
{
    CURLMsg *msg;
    int n, k;

    if (curl_multi_perform(s->m, &n) != CURLM_OK)
        return na_err(NA_ERR_INTERNAL, "curl_multi_perform failed");
    while ((msg = curl_multi_info_read(s->m, &n)) != NULL) {
        bsh_req_t *d = NULL;
        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&d);
        bsh_session_end(s, (int)(d - s->q), msg->data.result, 0);
    }
    for (k = n = 0; k < s->n; k++)
        n += s->tr[k].state == NA_BSH_RUNNING;
    if (n > 0 && timeout_ms > 0 && curl_multi_poll(s->m, NULL, 0, timeout_ms, NULL) != CURLM_OK)
        return na_err(NA_ERR_INTERNAL, "curl_multi_poll failed");
    if (running != NULL)
        *running = n;
    return NA_OK;
}

const na_bsh_trace_t *na_bsh_session_trace(const na_bsh_session_t *s, int idx)
{
    return idx >= 0 && idx < s->n ? &s->tr[idx] : NULL;
}

void na_bsh_session_cancel(na_bsh_session_t *s, int idx)
{
    if (idx >= 0 && idx < s->n && s->tr[idx].state == NA_BSH_RUNNING)
        bsh_session_end(s, idx, CURLE_OK, 1);
}

void na_bsh_session_destroy(na_bsh_session_t *s)
{
    int k;

    if (s == NULL)
        return;
    for (k = 0; k < s->n; k++) {
        na_bsh_session_cancel(s, k);
        free(s->tr[k].t_text);
    }
    if (s->m != NULL)
        curl_multi_cleanup(s->m);
    free(s->q);
    free(s->tr);
    free(s);
}
