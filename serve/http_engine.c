/* serve/http_engine.c — the engine thread of the HTTP server (see http.h):
 * takes queued requests, submits them as jobs, forwards cancellations, runs
 * the engine in short slices, and turns each job's text and end into its
 * request's output (server-sent events or a whole response); and the
 * /metrics page. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/list.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "serve/http_internal.h"

#define NA_SRV_SLICE_MS 2      /* engine slice while jobs run: a request that arrives
                                  waits at most this (and the step under way) */
#define NA_SRV_IDLE_MS  50     /* wait for work when idle */
#define NA_SRV_HEAL_MS  100    /* nodes started here: reaped and restarted this often */
#define NA_SRV_NODES_MS 250    /* storage nodes looked at this often while none is
                                  alive (reads no node: the lost ones are not asked) */

int na_hreq_put(na_hreq_t *r, const char *s, size_t n)
{
    return na_strbuf_append(&r->out, &r->n_out, &r->cap_out, s, n);
}

void na_hreq_unref(na_hreq_t *r)
{
    if (--r->refs > 0)
        return;
    pthread_cond_destroy(&r->cv);
    na_oai_req_free(&r->oai);
    free(r->body);
    free(r->out);
    free(r);
}

/* "data: JSON\n\n" of j (released) into r's stream (lock held). */
static void srv_event(na_hreq_t *r, json_t *j)
{
    char *s = na_oai_dump(j);
    if (s == NULL)
        return;
    na_hreq_put(r, "data: ", 6);
    na_hreq_put(r, s, strlen(s));
    na_hreq_put(r, "\n\n", 2);
    free(s);
}

/* A piece of text: its event is made before the lock is taken (the
 * connection threads wait on s->mu too, and a thread preempted while holding
 * it stalls the engine), then appended and the connection woken. */
static void srv_on_text(void *user, const char *text, size_t len)
{
    na_hreq_t *r = user;
    na_srv_t *s = r->s;
    char *ev = NULL;
    double now;

    if (r->oai.stream) {
        ev = na_oai_dump(na_oai_chunk(r->oai.kind, r->id, r->created, s->model, text, len,
                                      !r->role_sent, NULL, NULL, 0));
        r->role_sent = 1;
    }
    now = na_now_s();
    pthread_mutex_lock(&s->mu);
    if (r->n_pieces++ == 0)
        na_hist_observe(&s->ttft, now - r->t_arrive);
    else
        na_hist_observe(&s->itl, now - r->t_last);
    r->t_last = now;
    if (!r->oai.stream) {
        na_hreq_put(r, text, len);
    } else if (ev != NULL) {
        na_hreq_put(r, "data: ", 6);
        na_hreq_put(r, ev, strlen(ev));
        na_hreq_put(r, "\n\n", 2);
    }
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&s->mu);
    free(ev);
}

/* The error of a job that ended badly (timeout, cancel, failure). */
static void srv_end_error(na_hreq_t *r, const na_sg_end_t *e, na_oai_error_t *err)
{
    if (r->timed_out)
        na_oai_error_set(err, 504, "timeout", "request_timeout", NULL,
                         "the request ran past the server's limit of %d s",
                         r->s->o.timeout_s);
    else if (e->finish == NA_SG_CANCELLED)
        na_oai_error_set(err, 499, "cancelled", NULL, NULL, "the request was cancelled");
    else if (e->status == NA_ERR_PEER)   /* its storage node lost, no other took it */
        na_oai_error_set(err, 503, "server_error", "storage_unavailable", NULL,
                         "no storage node can take the request now: %s (retry later)",
                         e->error != NULL ? e->error : "a storage node was lost");
    else
        na_oai_error_set(err, 500, "server_error", NULL, NULL, "generation failed: %s",
                         e->error != NULL ? e->error : "unknown error");
}

static void srv_on_end(void *user, const na_sg_end_t *e)
{
    na_hreq_t *r = user;
    na_srv_t *s = r->s;
    int ok = e->finish == NA_SG_STOP || e->finish == NA_SG_LENGTH;
    const char *finish = na_sg_finish_name(e->finish);
    na_oai_error_t err;

    if (!ok)
        srv_end_error(r, e, &err);
    pthread_mutex_lock(&s->mu);
    if (!ok && e->status == NA_ERR_PEER)
        s->check_nodes = 1;            /* the engine looks at the nodes after this step */
    if (r->oai.stream) {
        if (ok) {
            srv_event(r, na_oai_chunk(r->oai.kind, r->id, r->created, s->model, NULL, 0,
                                      !r->role_sent, finish, NULL, 0));
            if (r->oai.include_usage)
                srv_event(r, na_oai_chunk(r->oai.kind, r->id, r->created, s->model, NULL, 0,
                                          0, NULL, na_oai_usage(e->prompt_tokens,
                                                                e->cached_tokens,
                                                                e->completion_tokens), 1));
        } else {
            srv_event(r, na_oai_error_json(&err));
        }
        na_hreq_put(r, "data: [DONE]\n\n", 14);
    } else {
        char *body;
        if (ok) {
            body = na_oai_dump(na_oai_response(r->oai.kind, r->id, r->created, s->model,
                                               r->out != NULL ? r->out : "", r->n_out, finish,
                                               na_oai_usage(e->prompt_tokens, e->cached_tokens,
                                                            e->completion_tokens)));
            r->http = 200;
        } else {
            body = na_oai_dump(na_oai_error_json(&err));
            r->http = err.http;
        }
        r->n_out = 0;
        if (body != NULL) {
            na_hreq_put(r, body, strlen(body));
            free(body);
        } else {
            r->http = 500;
        }
    }
    if (r->timed_out)
        s->timeouts++;
    r->state = NA_HR_DONE;
    s->n_held--;
    pthread_cond_signal(&r->cv);
    /* the engine's reference */
    NA_LIST_UNLINK(s->live, r, prev_live, next_live);
    na_hreq_unref(r);
    pthread_mutex_unlock(&s->mu);
}

/* Submit r as a job; refused: the connection is told why. */
static void srv_submit(na_srv_t *s, na_hreq_t *r)
{
    na_sg_params_t p = r->oai.job;
    na_status_t st;

    p.on_text = srv_on_text;
    p.on_end = srv_on_end;
    p.user = r;
    st = na_sg_submit(s->g, &p, &r->job);
    pthread_mutex_lock(&s->mu);
    if (st != NA_OK) {
        int http = st == NA_ERR_INVALID || st == NA_ERR_RANGE ? 400 : 500;
        na_oai_error_set(&r->err, http, http == 400 ? "invalid_request_error" : "server_error",
                         st == NA_ERR_RANGE ? "context_length_exceeded" : NULL,
                         r->oai.kind == NA_OAI_CHAT ? "messages" : "prompt", "%s", na_errmsg());
        r->state = NA_HR_REFUSED;
        s->n_held--;
        pthread_cond_signal(&r->cv);
        na_hreq_unref(r);
    } else {
        r->state = NA_HR_RUNNING;
        NA_LIST_PUSH(s->live, r, prev_live, next_live);
        if (r->cancel) {               /* asked while it was queued */
            r->cancel_sent = 1;
            na_sg_cancel(s->g, r->job);
        }
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

/* Take the queue and the cancellations asked (lock held): the queue's head. */
static na_hreq_t *srv_take(na_srv_t *s)
{
    na_hreq_t *q = s->q_head, *r;

    s->q_head = s->q_tail = NULL;
    if (s->n_cancel > 0) {
        s->n_cancel = 0;
        for (r = s->live; r != NULL; r = r->next_live)
            if (r->cancel && !r->cancel_sent) {
                r->cancel_sent = 1;
                na_sg_cancel(s->g, r->job);    /* only marks: no callback runs here */
            }
    }
    return q;
}

static int sm_alive(const na_sg_stats_t *t);

/* A fresh snapshot of the engine (engine thread, lock not held). */
static void srv_take_stats(na_srv_t *s)
{
    na_sg_stats_t snap;

    na_sg_stats(s->g, &snap);
    s->t_nodes = na_now_s();
    pthread_mutex_lock(&s->mu);
    s->snap = snap;
    s->n_nodes = snap.n_nodes;
    s->n_alive = sm_alive(&snap);
    s->want_stats = 0;
    s->check_nodes = 0;
    s->stats_gen++;
    pthread_cond_broadcast(&s->cv_stats);
    pthread_mutex_unlock(&s->mu);
}

void na_srv_snapshot(na_srv_t *s)
{
    unsigned long gen = s->stats_gen;
    struct timespec ts;

    s->want_stats = 1;
    pthread_cond_signal(&s->cv_engine);
    ts = na_cond_deadline(5000000u);
    while (s->stats_gen == gen && !s->stopping)
        if (pthread_cond_timedwait(&s->cv_stats, &s->mu, &ts) != 0)
            break;                     /* the engine is busy: the last snapshot */
}

const char *na_srv_health(const na_srv_t *s)
{
    if (s->n_nodes == 0 || s->n_alive == s->n_nodes)
        return "ok";
    return s->n_alive > 0 ? "degraded" : "unavailable";
}

na_status_t na_srv_run(na_srv_t *s, volatile sig_atomic_t *stop)
{
    na_status_t st = NA_OK;
    double t_heal = 0;

    srv_take_stats(s);
    while (!*stop) {
        na_hreq_t *q, *next;
        int stats;

        if (na_now_s() - t_heal >= NA_SRV_HEAL_MS * 1e-3) {
            t_heal = na_now_s();
            (void)na_sg_heal(s->g);
        }

        pthread_mutex_lock(&s->mu);
        q = srv_take(s);
        stats = s->want_stats;
        if (q == NULL && !stats && na_sg_pending(s->g) == 0) {
            struct timespec ts = na_cond_deadline(NA_SRV_IDLE_MS * 1000u);
            pthread_cond_timedwait(&s->cv_engine, &s->mu, &ts);
            q = srv_take(s);
            stats = s->want_stats;
        }
        /* a node was lost, or none is alive: look again (none alive: the
         * lost are not asked, so this costs no round trip) */
        if (s->check_nodes || (s->n_nodes > 0 && s->n_alive == 0 &&
                               na_now_s() - s->t_nodes >= NA_SRV_NODES_MS * 1e-3))
            stats = 1;
        pthread_mutex_unlock(&s->mu);
        if (stats)
            srv_take_stats(s);
        for (; q != NULL; q = next) {
            next = q->next_q;
            srv_submit(s, q);
        }
        st = na_sg_progress(s->g, na_sg_pending(s->g) > 0 ? NA_SRV_SLICE_MS : 0);
        if (st != NA_OK)
            break;
    }
    /* stopping: cancel what is held and let the jobs end (bounded) */
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_mutex_unlock(&s->mu);
    if (st == NA_OK) {
        double until = na_now_s() + 5.0;
        na_hreq_t *r, *q;
        pthread_mutex_lock(&s->mu);
        q = s->q_head;
        s->q_head = s->q_tail = NULL;
        for (r = s->live; r != NULL; r = r->next_live)
            na_sg_cancel(s->g, r->job);
        pthread_mutex_unlock(&s->mu);
        for (; q != NULL; q = r) {             /* never submitted: refused */
            r = q->next_q;
            pthread_mutex_lock(&s->mu);
            na_oai_error_set(&q->err, 503, "server_error", NULL, NULL, "the server is stopping");
            q->state = NA_HR_REFUSED;
            s->n_held--;
            pthread_cond_signal(&q->cv);
            na_hreq_unref(q);
            pthread_mutex_unlock(&s->mu);
        }
        while (na_sg_pending(s->g) > 0 && na_now_s() < until && st == NA_OK)
            st = na_sg_progress(s->g, 50);
    }
    return st;
}

/* ---- /metrics ------------------------------------------------------------ */

/* node="NAME"[,extra] into out, NAME escaped as the text format wants. */
static void sm_label(char *out, size_t cap, const char *name, const char *extra)
{
    size_t o = 0;
    const char *c;

    o += (size_t)snprintf(out, cap, "node=\"");
    for (c = name; *c != '\0' && o + 3 < cap; c++) {
        if (*c == '\\' || *c == '"' || *c == '\n') {
            out[o++] = '\\';
            out[o++] = *c == '\n' ? 'n' : *c;
        } else {
            out[o++] = *c;
        }
    }
    snprintf(out + o, cap - o, "\"%s%s", extra ? "," : "", extra ? extra : "");
}

/* One sample of metric `name` for storage node `node` (label node="NODE"[,extra]). */
static void sm_node_value(FILE *f, const char *name, const char *node, const char *extra,
                          double v)
{
    char lab[200];

    sm_label(lab, sizeof(lab), node, extra);
    na_metric_value(f, name, lab, v);
}

/* A counter a metric sample shows: at off in its struct (na_sg_stats_t or
 * na_asvc_node_stats_t), of type kind; and its label (in-process: the
 * whole label; per node: what stands beside node="NAME", NULL: nothing). */
typedef enum { SM_U64, SM_F64, SM_LONG } sm_kind_t;
typedef struct {
    const char *label;
    size_t      off;
    sm_kind_t   kind;
} sm_col_t;

/* A metric per storage node: without nodes (in-process) its n_all samples
 * all[], else each node's n_node samples node[], node by node. */
typedef struct {
    const char *name, *type, *help;
    int         n_all, n_node;
    sm_col_t    all[2], node[2];
} sm_family_t;

/* The kind from the field's own type (any other type does not compile), so
 * the table cannot read a counter as what it is not. */
#define SM_KIND(T, field) _Generic(((T *)0)->field, double: SM_F64, long: SM_LONG,      \
                                   unsigned long: SM_U64, unsigned long long: SM_U64)
#define SM_ALL(label, field)  { label, offsetof(na_sg_stats_t, field),                   \
                                SM_KIND(na_sg_stats_t, field) }
#define SM_NODE(label, field) { label, offsetof(na_asvc_node_stats_t, field),            \
                                SM_KIND(na_asvc_node_stats_t, field) }

static const sm_family_t sm_families[] = {
    { "nearattn_attention_round_trips_total", "counter",
      "Attention round trips (batch, layer) answered by a storage node.",
      1, 1, { SM_ALL("node=\"all\"", attn_calls) },
      { SM_NODE(NULL, attn_calls) } },
    { "nearattn_attention_round_trip_seconds_total", "counter",
      "Summed time from sending a batch's attention to a node's last answer.",
      1, 1, { SM_ALL("node=\"all\"", attn_rt_s) },
      { SM_NODE(NULL, attn_rt_s) } },
    { "nearattn_attention_bytes_total", "counter",
      "Bytes to and from a storage node (decode attention and prompt KV).",
      2, 2, { SM_ALL("node=\"all\",direction=\"sent\"", bytes_sent),
              SM_ALL("node=\"all\",direction=\"received\"", bytes_recv) },
      { SM_NODE("direction=\"sent\"", bytes_sent),
        SM_NODE("direction=\"received\"", bytes_recv) } },
    { "nearattn_kv_bytes", "gauge",
      "KV cache bytes by tier: each storage node's DRAM and SSD use (its STATS), "
      "or the requests held now in-process.",
      1, 2, { SM_ALL("tier=\"inproc\",node=\"all\"", kv_bytes) },
      { SM_NODE("tier=\"dram\"", kv_dram_bytes),
        SM_NODE("tier=\"ssd\"", kv_ssd_bytes) } },
    /* prefix reuse (docs/prefix-reuse.md): per storage node, its own counters */
    { "nearattn_prefix_tokens_total", "counter",
      "Prompt tokens by how their KV got to a storage node: hit (its prefix "
      "cache held them) or computed (prefilled on the compute node and shipped).",
      2, 2, { SM_ALL("node=\"all\",kind=\"hit\"", prefix_hit_tokens),
              SM_ALL("node=\"all\",kind=\"computed\"", prefix_computed_tokens) },
      { SM_NODE("kind=\"hit\"", prefix_hit_tokens),
        SM_NODE("kind=\"computed\"", prefill_tokens) } },
    { "nearattn_prefix_cache_bytes", "gauge",
      "KV a storage node keeps in its prefix cache.",
      0, 1, { { NULL, 0, SM_U64 } },
      { SM_NODE(NULL, prefix_cache_bytes) } },
};

/* The counter c of the struct at base, as a sample's value. */
static double sm_read(const void *base, const sm_col_t *c)
{
    const char *at = (const char *)base + c->off;
    uint64_t u;
    double d;
    long l;

    switch (c->kind) {
    case SM_F64:
        memcpy(&d, at, sizeof(d));
        return d;
    case SM_LONG:
        memcpy(&l, at, sizeof(l));
        return (double)l;
    default:
        memcpy(&u, at, sizeof(u));
        return (double)u;
    }
}

/* Metric m of t: its head, then its in-process or per-node samples. */
static void sm_family(FILE *f, const na_sg_stats_t *t, const sm_family_t *m)
{
    int i, k;

    na_metric_head(f, m->name, m->type, m->help);
    for (k = 0; t->n_nodes == 0 && k < m->n_all; k++)
        na_metric_value(f, m->name, m->all[k].label, sm_read(t, &m->all[k]));
    for (i = 0; i < t->n_nodes; i++)
        for (k = 0; k < m->n_node; k++)
            sm_node_value(f, m->name, t->nodes[i].name, m->node[k].label,
                          sm_read(&t->nodes[i], &m->node[k]));
}

static int sm_alive(const na_sg_stats_t *t)
{
    int i, n = 0;
    for (i = 0; i < t->n_nodes; i++)
        n += t->nodes[i].alive != 0;
    return n;
}

char *na_srv_metrics_page(na_srv_t *s, size_t *len_p)
{
    na_sg_stats_t t;
    int i;
    na_hist_t ttft, itl;
    long rejected, bad, timeouts, cut_slow, cut_reserve;
    int n_conn;
    char *buf = NULL;
    size_t len = 0;
    FILE *f;

    pthread_mutex_lock(&s->mu);
    na_srv_snapshot(s);
    t = s->snap;
    ttft = s->ttft;
    itl = s->itl;
    rejected = s->rejected;
    bad = s->bad;
    timeouts = s->timeouts;
    pthread_mutex_unlock(&s->mu);
    na_hguard_counts(&s->guard, &cut_slow, &cut_reserve, &n_conn);

    f = open_memstream(&buf, &len);
    if (f == NULL)
        return NULL;
#define G(name, help, v) na_metric_head(f, name, "gauge", help), na_metric_value(f, name, "", v)
#define C(name, help, v) na_metric_head(f, name, "counter", help), na_metric_value(f, name, "", v)
    G("nearattn_requests_running", "Requests admitted to a batch and generating.",
      (double)t.running);
    G("nearattn_requests_queued", "Requests waiting for a place in a batch.", (double)t.waiting);
    C("nearattn_requests_finished_total", "Requests that ended normally (stop or length).",
      (double)t.finished);
    C("nearattn_requests_failed_total", "Requests that ended with an error.", (double)t.failed);
    C("nearattn_requests_cancelled_total",
      "Requests cancelled (client gone, timeout, stop string excluded).", (double)t.cancelled);
    C("nearattn_requests_rejected_total", "Requests refused with 429 (queue full).",
      (double)rejected);
    C("nearattn_requests_invalid_total", "Requests refused with another 4xx status.",
      (double)bad);
    C("nearattn_requests_timed_out_total", "Requests cancelled by the per-request timeout.",
      (double)timeouts);
    G("nearattn_http_connections", "Open HTTP connections.", (double)n_conn);
    na_metric_head(f, "nearattn_http_connections_closed_total", "counter",
                   "Connections closed by the server before a complete request: "
                   "slow (past --request-timeout), reserve (to keep room for new clients).");
    na_metric_value(f, "nearattn_http_connections_closed_total", "reason=\"slow\"",
                    (double)cut_slow);
    na_metric_value(f, "nearattn_http_connections_closed_total", "reason=\"reserve\"",
                    (double)cut_reserve);
    C("nearattn_requests_replaced_total",
      "Requests re-placed on another storage node after a lost node.", (double)t.recovered);
    C("nearattn_prompt_tokens_total", "Prompt tokens of the requests submitted.",
      (double)t.prompt_tokens);
    C("nearattn_generation_tokens_total", "Tokens generated.", (double)t.gen_tokens);
    na_metric_head(f, "nearattn_batch_steps_total", "counter",
                   "Batch steps by how the requests were spread: merged (as few batches as "
                   "max_batch allows) or split (every batch in flight); "
                   "parallel.adaptive_batches.");
    na_metric_value(f, "nearattn_batch_steps_total", "spread=\"merged\"",
                    (double)t.steps_merged);
    na_metric_value(f, "nearattn_batch_steps_total", "spread=\"split\"", (double)t.steps_split);
    na_metric_head(f, "nearattn_batch_split_trials_total", "counter",
                   "Trials of split batches (parallel.adaptive_batches): started, and won "
                   "(split was faster per token and stayed).");
    na_metric_value(f, "nearattn_batch_split_trials_total", "outcome=\"started\"",
                    (double)t.split_trials);
    na_metric_value(f, "nearattn_batch_split_trials_total", "outcome=\"won\"",
                    (double)t.split_trials_won);
    na_metric_hist(f, "nearattn_time_to_first_token_seconds",
                   "Time from the request's arrival to its first text.", &ttft);
    na_metric_hist(f, "nearattn_inter_token_latency_seconds",
                   "Time between two text pieces of one request.", &itl);
    /* per storage node (remote modes); one node="all" sample in-process */
    for (i = 0; i < (int)(sizeof(sm_families) / sizeof(sm_families[0])); i++)
        sm_family(f, &t, &sm_families[i]);
    G("nearattn_storage_nodes_alive", "Storage nodes taking requests now.", (double)sm_alive(&t));
    G("nearattn_storage_nodes", "Storage nodes of the layout.", (double)t.n_storage);
#undef G
#undef C
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    *len_p = len;
    return buf;
}
