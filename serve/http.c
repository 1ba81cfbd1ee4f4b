/* serve/http.c — the connection side of the HTTP server (see http.h):
 * libmicrohttpd, one thread per connection; routing, the API key, the body
 * and queue limits, and the waits on the engine thread (with disconnect and
 * timeout checks). The engine side is serve/http_engine.c. */
#define _GNU_SOURCE 1          /* POLLRDHUP */
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "common/clock.h"
#include "common/list.h"
#include "common/log.h"
#include "serve/http_internal.h"

#define NA_SRV_WAKE_MS 100     /* a waiting connection checks its client this often */
#define NA_SRV_RETRY_AFTER "1" /* seconds: Retry-After of a 429 or a 503 */

enum { NA_ROUTE_COMPLETIONS, NA_ROUTE_CHAT, NA_ROUTE_MODELS, NA_ROUTE_HEALTH, NA_ROUTE_METRICS };

static const struct {
    const char *url;
    const char *method;
} na_routes[] = {
    [NA_ROUTE_COMPLETIONS] = { "/v1/completions", "POST" },
    [NA_ROUTE_CHAT]        = { "/v1/chat/completions", "POST" },
    [NA_ROUTE_MODELS]      = { "/v1/models", "GET" },
    [NA_ROUTE_HEALTH]      = { "/health", "GET" },
    [NA_ROUTE_METRICS]     = { "/metrics", "GET" },
};
#define NA_N_ROUTES ((int)(sizeof(na_routes) / sizeof(na_routes[0])))

void na_srv_opts_default(na_srv_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->port = 8080;
    o->max_queue = 64;
    o->max_body = 1u << 20;
    o->max_header = 32u << 10;
    o->timeout_s = 600;
    o->idle_s = 60;
    o->request_s = 30;
    o->max_per_ip = 0;
}

int na_srv_key_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), n = la > lb ? la : lb, i;
    volatile unsigned char d = (unsigned char)(la != lb);

    for (i = 0; i < n; i++)
        d |= (unsigned char)((i < la ? (unsigned char)a[i] : 0) ^
                             (i < lb ? (unsigned char)b[i] : 0));
    return d == 0;
}

/* ---- responses ------------------------------------------------------------ */

static enum MHD_Result srv_send(struct MHD_Connection *c, int status, const char *type,
                                const char *body, size_t len, const char *hdr, const char *val)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body,
                                                                 MHD_RESPMEM_MUST_COPY);
    enum MHD_Result rc;

    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (hdr != NULL)
        MHD_add_response_header(resp, hdr, val);
    rc = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result srv_send_json(struct MHD_Connection *c, int status, json_t *j,
                                     const char *hdr, const char *val)
{
    char *s = na_oai_dump(j);
    enum MHD_Result rc;
    if (s == NULL)
        return MHD_NO;
    rc = srv_send(c, status, "application/json", s, strlen(s), hdr, val);
    free(s);
    return rc;
}

/* An OpenAI error response; counts 4xx (other than 429) as invalid. */
static enum MHD_Result srv_send_error(na_srv_t *s, struct MHD_Connection *c,
                                      const na_oai_error_t *e, const char *hdr, const char *val)
{
    if (e->http >= 400 && e->http < 500 && e->http != 429) {
        pthread_mutex_lock(&s->mu);
        s->bad++;
        pthread_mutex_unlock(&s->mu);
    }
    if (e->http == 503 && hdr == NULL) {        /* unavailable now: when to try again */
        hdr = "Retry-After";
        val = NA_SRV_RETRY_AFTER;
    }
    return srv_send_json(c, e->http, na_oai_error_json(e), hdr, val);
}

static enum MHD_Result srv_fail(na_srv_t *s, struct MHD_Connection *c, int http,
                                const char *type, const char *code, const char *msg)
{
    na_oai_error_t e;
    na_oai_error_set(&e, http, type, code, NULL, "%s", msg);
    return srv_send_error(s, c, &e, NULL, NULL);
}

/* ---- waiting on the engine -------------------------------------------------- */

/* 1 when the client closed its side (or the socket failed). */
static int srv_client_gone(int fd)
{
    struct pollfd p = { fd, POLLRDHUP, 0 };
    if (fd < 0)
        return 0;
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

/* Ask the engine to cancel r (lock held). */
static void srv_cancel(na_hreq_t *r, int timed_out)
{
    if (r->cancel)
        return;
    r->cancel = 1;
    r->timed_out = timed_out;
    r->s->n_cancel++;
    pthread_cond_signal(&r->s->cv_engine);
}

/* Wait (lock held) up to NA_SRV_WAKE_MS for news on r; then cancel it when
 * its client is gone or its time is up. Returns 1 when the client is gone. */
static int srv_wait(na_hreq_t *r)
{
    struct timespec ts = na_cond_deadline(NA_SRV_WAKE_MS * 1000u);
    int gone;

    pthread_cond_timedwait(&r->cv, &r->s->mu, &ts);
    gone = srv_client_gone(r->fd);
    if (gone)
        srv_cancel(r, 0);
    else if (na_now_s() > r->deadline)
        srv_cancel(r, 1);
    return gone;
}

/* The stream's reader: the SSE bytes the engine wrote, as they come. */
static ssize_t srv_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    na_hreq_t *r = cls;
    na_srv_t *s = r->s;
    ssize_t n = 0;

    (void)pos;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (r->pos_out < r->n_out) {
            n = (ssize_t)(r->n_out - r->pos_out < max ? r->n_out - r->pos_out : max);
            memcpy(buf, r->out + r->pos_out, (size_t)n);
            r->pos_out += (size_t)n;
            if (r->pos_out == r->n_out)
                r->pos_out = r->n_out = 0;       /* all sent: the buffer starts over */
            break;
        }
        if (r->state == NA_HR_DONE) {
            n = MHD_CONTENT_READER_END_OF_STREAM;
            break;
        }
        if (s->stopping || srv_wait(r)) {
            srv_cancel(r, 0);
            n = MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void srv_stream_free(void *cls)
{
    na_hreq_t *r = cls;
    na_srv_t *s = r->s;
    pthread_mutex_lock(&s->mu);
    na_hreq_unref(r);
    pthread_mutex_unlock(&s->mu);
}

/* ---- generation routes ------------------------------------------------------- */

static enum MHD_Result srv_generate(na_srv_t *s, struct MHD_Connection *c, na_hreq_t *r)
{
    na_oai_kind_t kind = r->route == NA_ROUTE_CHAT ? NA_OAI_CHAT : NA_OAI_COMPLETION;
    na_oai_error_t err;
    enum MHD_Result rc;

    if (na_oai_parse(kind, r->body != NULL ? r->body : "", r->n_body,
                     s->chat_ok ? &s->chat : NULL, s->chat_err, &r->oai, &err) != 0)
        return srv_send_error(s, c, &err, NULL, NULL);
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return srv_fail(s, c, 503, "server_error", NULL, "the server is stopping");
    }
    if (s->n_nodes > 0 && s->n_alive == 0) {
        int n = s->n_nodes;
        pthread_mutex_unlock(&s->mu);
        na_oai_error_set(&err, 503, "server_error", "storage_unavailable", NULL,
                         "none of the %d storage nodes takes requests now: retry later", n);
        return srv_send_error(s, c, &err, NULL, NULL);
    }
    if (s->n_held >= s->o.max_queue) {
        s->rejected++;
        pthread_mutex_unlock(&s->mu);
        na_oai_error_set(&err, 429, "rate_limit_error", "queue_full", NULL,
                         "the server holds %d requests, its limit (--max-queue): retry later",
                         s->o.max_queue);
        return srv_send_json(c, 429, na_oai_error_json(&err), "Retry-After",
                             NA_SRV_RETRY_AFTER);
    }
    snprintf(r->id, sizeof(r->id), "%s-%lx", kind == NA_OAI_CHAT ? "chatcmpl" : "cmpl",
             ++s->next_id);
    r->created = (long)time(NULL);
    r->deadline = r->t_arrive + s->o.timeout_s;
    r->state = NA_HR_QUEUED;
    r->refs++;                                   /* the engine's */
    s->n_held++;
    NA_SLIST_APPEND(s->q_head, s->q_tail, r, next_q);
    pthread_cond_signal(&s->cv_engine);
    while (r->state == NA_HR_QUEUED && !s->stopping)
        srv_wait(r);
    if (r->state == NA_HR_REFUSED || r->state == NA_HR_QUEUED) {
        if (r->state == NA_HR_QUEUED)
            na_oai_error_set(&r->err, 503, "server_error", NULL, NULL, "the server is stopping");
        err = r->err;
        pthread_mutex_unlock(&s->mu);
        return srv_send_error(s, c, &err, NULL, NULL);
    }
    if (r->oai.stream) {
        struct MHD_Response *resp;
        r->refs++;                               /* the response's */
        pthread_mutex_unlock(&s->mu);
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, srv_stream_read, r,
                                                 srv_stream_free);
        if (resp == NULL) {
            srv_stream_free(r);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return rc;
    }
    while (r->state != NA_HR_DONE && !s->stopping)
        if (srv_wait(r) && r->state != NA_HR_DONE) {
            pthread_mutex_unlock(&s->mu);
            return MHD_NO;                       /* the client is gone: close */
        }
    if (r->state != NA_HR_DONE) {
        pthread_mutex_unlock(&s->mu);
        return srv_fail(s, c, 503, "server_error", NULL, "the server is stopping");
    }
    rc = srv_send(c, r->http, "application/json", r->out != NULL ? r->out : "", r->n_out,
                  r->http == 503 ? "Retry-After" : NULL, NA_SRV_RETRY_AFTER);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* GET /health: the cluster's state from a fresh engine snapshot; 503 (with
 * Retry-After) while no storage node takes requests. */
static enum MHD_Result srv_health(na_srv_t *s, struct MHD_Connection *c)
{
    const char *state;
    char body[160];
    int n, alive, len;

    pthread_mutex_lock(&s->mu);
    na_srv_snapshot(s);
    state = s->stopping ? "stopping" : na_srv_health(s);
    n = s->n_nodes;
    alive = s->n_alive;
    pthread_mutex_unlock(&s->mu);
    len = snprintf(body, sizeof(body),
                   "{\"status\":\"%s\",\"storage_nodes\":%d,\"storage_nodes_alive\":%d}",
                   state, n, alive);
    if (!strcmp(state, "ok") || !strcmp(state, "degraded"))
        return srv_send(c, 200, "application/json", body, (size_t)len, NULL, NULL);
    return srv_send(c, 503, "application/json", body, (size_t)len, "Retry-After",
                    NA_SRV_RETRY_AFTER);
}

/* ---- the access handler ------------------------------------------------------- */

/* First call of a request: route, method, key, declared body size. Returns
 * -1 to go on, else the result of the refusal sent. */
static int srv_admit(na_srv_t *s, struct MHD_Connection *c, const char *url,
                     const char *method, int *route)
{
    const char *auth, *clen;
    int i;

    *route = -1;
    for (i = 0; i < NA_N_ROUTES; i++)
        if (!strcmp(url, na_routes[i].url))
            *route = i;
    if (*route < 0)
        return srv_fail(s, c, 404, "invalid_request_error", "not_found",
                        "unknown route: use /v1/completions, /v1/chat/completions, "
                        "/v1/models, /health or /metrics");
    if (strcmp(method, na_routes[*route].method) != 0)
        return srv_fail(s, c, 405, "invalid_request_error", "method_not_allowed",
                        !strcmp(na_routes[*route].method, "POST") ?
                        "this route takes POST" : "this route takes GET");
    if (s->o.api_key != NULL && *route != NA_ROUTE_HEALTH) {
        auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (auth == NULL || strncmp(auth, "Bearer ", 7) != 0 ||
            !na_srv_key_equal(auth + 7, s->o.api_key)) {
            na_oai_error_t e;
            na_oai_error_set(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                             "a valid API key is needed: Authorization: Bearer KEY");
            return srv_send_error(s, c, &e, "WWW-Authenticate", "Bearer");
        }
    }
    clen = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (clen != NULL && strtoull(clen, NULL, 10) > s->o.max_body)
        return srv_fail(s, c, 413, "invalid_request_error", "body_too_large",
                        "the request body is larger than the server's limit");
    return -1;
}

static enum MHD_Result srv_handle(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
    na_srv_t *s = cls;
    na_hreq_t *r = *con_cls;
    const union MHD_ConnectionInfo *ci;
    int route, rc;

    (void)version;
    if (r == NULL) {
        rc = srv_admit(s, c, url, method, &route);
        if (rc >= 0) {
            na_hguard_busy(&s->guard, c, 1);     /* refused: answered now */
            return (enum MHD_Result)rc;
        }
        r = calloc(1, sizeof(*r));
        if (r == NULL)
            return MHD_NO;
        r->s = s;
        r->refs = 1;                             /* the connection's */
        r->route = route;
        r->t_arrive = na_now_s();
        na_cond_init_mono(&r->cv);
        ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        r->fd = ci != NULL ? ci->connect_fd : -1;
        *con_cls = r;
        return MHD_YES;
    }
    if (*upload_size > 0) {                      /* more of the body */
        if (!r->too_big && r->n_body + *upload_size <= s->o.max_body) {
            char *b = realloc(r->body, r->n_body + *upload_size + 1);
            if (b == NULL)
                return MHD_NO;
            r->body = b;
            memcpy(r->body + r->n_body, upload, *upload_size);
            r->n_body += *upload_size;
            r->body[r->n_body] = '\0';
        } else {
            r->too_big = 1;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    na_hguard_busy(&s->guard, c, 1);             /* the whole request is in */
    if (r->too_big)
        return srv_fail(s, c, 413, "invalid_request_error", "body_too_large",
                        "the request body is larger than the server's limit");
    switch (r->route) {
    case NA_ROUTE_HEALTH:
        return srv_health(s, c);
    case NA_ROUTE_MODELS:
        return srv_send_json(c, 200, na_oai_models(s->model, s->created), NULL, NULL);
    case NA_ROUTE_METRICS: {
        size_t len = 0;
        char *page = na_srv_metrics_page(s, &len);
        enum MHD_Result res;
        if (page == NULL)
            return srv_fail(s, c, 500, "server_error", NULL, "out of memory");
        res = srv_send(c, 200, "text/plain; version=0.0.4; charset=utf-8", page, len, NULL,
                       NULL);
        free(page);
        return res;
    }
    default:
        return srv_generate(s, c, r);
    }
}

/* The request ended (sent, failed or the client went away). */
static void srv_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                          enum MHD_RequestTerminationCode toe)
{
    na_srv_t *s = cls;
    na_hreq_t *r = *con_cls;

    (void)toe;
    na_hguard_busy(&s->guard, c, 0);             /* the next request's time starts */
    if (r == NULL)
        return;
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    if (r->state == NA_HR_QUEUED || r->state == NA_HR_RUNNING)
        srv_cancel(r, 0);
    na_hreq_unref(r);
    pthread_mutex_unlock(&s->mu);
}

/* ---- create / destroy -------------------------------------------------------- */

static int srv_loopback(const struct sockaddr *a)
{
    if (a->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
    if (a->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr);
    return 0;
}

static na_status_t srv_chat(na_srv_t *s)
{
    na_status_t st = na_chat_for_model(na_sg_model(s->g), s->o.chat_template, &s->chat);
    if (st == NA_OK) {
        s->chat_ok = 1;
        return NA_OK;
    }
    if (s->o.chat_template != NULL)
        return st;                               /* a --chat-template of no family */
    snprintf(s->chat_err, sizeof(s->chat_err), "%s", na_errmsg());
    na_log_warn("serve: chat completions are refused: %s", s->chat_err);
    return NA_OK;
}

na_status_t na_srv_create(na_sg_t *g, const na_srv_opts_t *o, na_srv_t **s_p)
{
    struct addrinfo hints, *ai = NULL;
    const union MHD_DaemonInfo *di;
    char port[16];
    na_srv_t *s;
    na_status_t st;
    int gai, limit, per_ip;

    *s_p = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    snprintf(port, sizeof(port), "%d", o->port);
    gai = getaddrinfo(o->host, port, &hints, &ai);
    if (gai != 0)
        return na_err(NA_ERR_INVALID, "serve: cannot use host '%s': %s", o->host,
                      gai_strerror(gai));
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        freeaddrinfo(ai);
        return na_err(NA_ERR_NOMEM, "out of memory");
    }
    s->g = g;
    s->o = *o;
    s->created = (long)time(NULL);
    snprintf(s->model, sizeof(s->model), "%s", na_sg_model_name(g));
    pthread_mutex_init(&s->mu, NULL);
    na_cond_init_mono(&s->cv_engine);
    na_cond_init_mono(&s->cv_stats);
    st = srv_chat(s);
    if (st != NA_OK) {
        freeaddrinfo(ai);
        na_srv_destroy(s);
        return st;
    }
    if (!srv_loopback(ai->ai_addr) && o->api_key == NULL)
        na_log_warn("serve: listening on %s without an API key: anyone who reaches this "
                    "address can use the model (give --api-key-file)", o->host);
    limit = o->max_queue + NA_SRV_SPARE;
    per_ip = o->max_per_ip > 0 ? o->max_per_ip : o->max_queue + 8;
    if (per_ip > limit - NA_SRV_RESERVE)
        per_ip = limit - NA_SRV_RESERVE;             /* one address never takes the reserve */
    st = na_hguard_start(&s->guard, limit, NA_SRV_RESERVE,
                         o->request_s > 0 ? o->request_s : 30);
    if (st != NA_OK) {
        freeaddrinfo(ai);
        na_srv_destroy(s);
        return st;
    }
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                            (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0),
                            (uint16_t)o->port, NULL, NULL, srv_handle, s,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, o->max_header,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)limit,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)per_ip,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->idle_s,
                            MHD_OPTION_NOTIFY_COMPLETED, srv_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, na_hguard_notify, &s->guard,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (s->d == NULL) {
        na_srv_destroy(s);
        return na_err(NA_ERR_BUSY, "serve: cannot listen on %s port %d (in use, or not an "
                      "address of this machine)", o->host, o->port);
    }
    di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di != NULL ? di->port : o->port;
    *s_p = s;
    return NA_OK;
}

int na_srv_port(const na_srv_t *s)
{
    return s->port;
}

void na_srv_destroy(na_srv_t *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_mutex_unlock(&s->mu);
    if (s->d != NULL)
        MHD_stop_daemon(s->d);                   /* waits for the connection threads */
    na_hguard_stop(&s->guard);
    pthread_cond_destroy(&s->cv_stats);
    pthread_cond_destroy(&s->cv_engine);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
