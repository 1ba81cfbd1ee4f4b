/* serve/gen.c — the long-lived generation front end (see gen.h): model,
 * tokenizer, compute engine, cluster and offload engine, and per job the
 * text side: detokenizing, UTF-8 holding, stop strings, usage. */
#define _GNU_SOURCE 1     /* memmem */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/setup.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/list.h"
#include "common/log.h"
#include "compute-node/engine.h"
#include "compute-node/generate.h"
#include "compute-node/offload.h"
#include "compute-node/sampler.h"
#include "serve/gen.h"

struct na_sg_job {
    na_sg_t        *g;
    na_request_t   *r;
    na_sg_params_t  p;                  /* callbacks and user; strings below */
    char           *stop[NA_SG_MAX_STOP];
    size_t          stop_len[NA_SG_MAX_STOP];
    int             n_stop;
    char           *pend;               /* decoded bytes not sent yet */
    size_t          n_pend, cap_pend;
    int             prev;               /* previous token (for decoding) */
    int             stopped;            /* a stop string matched */
    int             cancelled;          /* na_sg_cancel */
    na_status_t     err_st;             /* on_error's status */
    char            err[256];
    na_sg_job_t    *prev_job, *next_job;
};

struct na_sg {
    na_model_t     *model;
    na_tokenizer_t *tok;
    na_engine_t    *engine;
    na_cfg_t       *cfg;
    na_cluster_t   *cluster;
    na_off_t       *off;
    int             capacity;           /* max_batch x batches in flight */
    int             stop_ids[8];
    int             n_stop_ids;
    char            name[128];
    char            cfg_path[4096];
    na_sg_job_t    *jobs;               /* held jobs */
    int             n_jobs;
    na_sg_stats_t   st;
    uint64_t        seed_ctr;
    int             req_ctr;            /* engine requests made: their ids in the logs */
};

const char *na_sg_finish_name(na_sg_finish_t f)
{
    static const char *const names[] = { "stop", "length", "error", "cancelled" };
    return (unsigned)f < 4 ? names[f] : "?";
}

void na_sg_opts_default(na_sg_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->mode = "offload";
    o->cluster = "start";
    o->backend = "cpu";
}

void na_sg_params_default(na_sg_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->temperature = 1.0;
    p->top_p = 1.0;
}

/* ---- UTF-8 ----------------------------------------------------------------- */

/* Length of the UTF-8 sequence led by byte c (0: not a lead byte). */
static int sg_utf8_len(unsigned char c)
{
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 0;
}

/* 1 when s[0..n) (n = its sequence length) is one valid UTF-8 code point. */
static int sg_utf8_valid(const unsigned char *s, int n)
{
    int i;
    for (i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if (n == 3 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0)))
        return 0;           /* overlong, surrogate */
    if (n == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90)))
        return 0;           /* overlong, past U+10FFFF */
    return 1;
}

size_t na_sg_utf8_complete(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = n, back;

    /* look at most 3 bytes back for the lead byte of a cut sequence */
    for (back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = u[n - back];
        int len;
        if ((c & 0xC0) == 0x80)
            continue;                  /* continuation byte: keep looking */
        len = sg_utf8_len(c);
        if (len > (int)back) {         /* lead byte with its tail still to come */
            size_t k;
            for (k = 1; k < back; k++)
                if ((u[n - back + k] & 0xC0) != 0x80)
                    return n;
            return n - back;
        }
        return n;
    }
    return i;
}

size_t na_sg_utf8_clean(const char *s, size_t n, char *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, o = 0;

    while (i < n) {
        int len = sg_utf8_len(u[i]);
        if (len > 0 && i + (size_t)len <= n && sg_utf8_valid(u + i, len)) {
            memcpy(out + o, u + i, (size_t)len);
            o += (size_t)len;
            i += (size_t)len;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);    /* U+FFFD */
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    return o;
}

/* ---- the text side of a job ------------------------------------------------ */

/* Send s[0..n) (cleaned to valid UTF-8) to the job's on_text. */
static void sg_emit(na_sg_job_t *j, const char *s, size_t n)
{
    char small[256], *buf = small;

    if (n == 0 || j->p.on_text == NULL)
        return;
    if (3 * n + 1 > sizeof(small)) {
        buf = malloc(3 * n + 1);
        if (buf == NULL)
            return;                    /* out of memory: the piece is lost, said in the log */
    }
    n = na_sg_utf8_clean(s, n, buf);
    j->p.on_text(j->p.user, buf, n);
    if (buf != small)
        free(buf);
}

/* Bytes at the end of pend that may begin stop string k (a proper prefix of it). */
static size_t sg_stop_hold(const na_sg_job_t *j, int k)
{
    size_t m = j->stop_len[k] - 1, n = j->n_pend;
    if (m > n)
        m = n;
    for (; m > 0; m--)
        if (!memcmp(j->pend + n - m, j->stop[k], m))
            return m;
    return 0;
}

/* Drop the first n bytes of pend. */
static void sg_pend_drop(na_sg_job_t *j, size_t n)
{
    memmove(j->pend, j->pend + n, j->n_pend - n);
    j->n_pend -= n;
}

/* After new bytes: a stop string ends the job; else send what can no longer
 * be part of a stop string nor of an incomplete UTF-8 sequence. */
static void sg_flush(na_sg_job_t *j)
{
    size_t send = j->n_pend, hold;
    int k;

    for (k = 0; k < j->n_stop; k++) {
        char *hit = memmem(j->pend, j->n_pend, j->stop[k], j->stop_len[k]);
        if (hit != NULL && (size_t)(hit - j->pend) < send)
            send = (size_t)(hit - j->pend);
    }
    if (send < j->n_pend) {            /* a stop string at pend[send] */
        sg_emit(j, j->pend, send);
        j->n_pend = 0;
        j->stopped = 1;
        na_off_cancel(j->g->off, j->r);
        return;
    }
    for (k = 0; k < j->n_stop; k++) {
        hold = sg_stop_hold(j, k);
        if (j->n_pend - hold < send)
            send = j->n_pend - hold;
    }
    send = na_sg_utf8_complete(j->pend, send);
    sg_emit(j, j->pend, send);
    sg_pend_drop(j, send);
}

static void sg_on_token(void *user, const na_request_t *r, int token)
{
    na_sg_job_t *j = user;
    size_t len;
    const char *piece;
    unsigned char c;

    j->g->st.gen_tokens++;
    piece = na_tokenizer_decode_len(j->g->tok, j->prev, token, &len);
    j->prev = token;
    (void)r;
    if (j->stopped || j->cancelled)
        return;
    c = len == 1 ? (unsigned char)piece[0] : 0;
    if (len == 1 && c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\v' && c != '\f')
        return;                        /* as `run` prints: a lone control byte is dropped */
    if (len == 1 && c == 0x7F)
        return;
    if (j->n_pend + len > j->cap_pend) {
        size_t cap = 2 * (j->n_pend + len) + 64;
        char *p = realloc(j->pend, cap);
        if (p == NULL)
            return;
        j->pend = p;
        j->cap_pend = cap;
    }
    memcpy(j->pend + j->n_pend, piece, len);
    j->n_pend += len;
    sg_flush(j);
}

static void sg_on_error(void *user, const na_request_t *r, na_status_t st, const char *why)
{
    na_sg_job_t *j = user;
    (void)r;
    j->err_st = st;
    snprintf(j->err, sizeof(j->err), "%s", why != NULL ? why : na_status_string(st));
}

static void sg_job_free(na_sg_job_t *j)
{
    int k;
    na_request_destroy(j->r);
    for (k = 0; k < j->n_stop; k++)
        free(j->stop[k]);
    free(j->pend);
    free(j);
}

static void sg_unlink(na_sg_t *g, na_sg_job_t *j)
{
    NA_LIST_UNLINK(g->jobs, j, prev_job, next_job);
    g->n_jobs--;
}

static void sg_on_done(void *user, const na_request_t *r)
{
    na_sg_job_t *j = user;
    na_sg_t *g = j->g;
    na_sg_end_t end;

    memset(&end, 0, sizeof(end));
    end.prompt_tokens = r->n_prompt;
    end.cached_tokens = r->n_cached;
    end.completion_tokens = r->n_out;
    if (j->stopped) {
        end.finish = NA_SG_STOP;
    } else if (j->cancelled) {
        end.finish = NA_SG_CANCELLED;
        end.status = NA_ERR_CANCELED;
        end.error = "cancelled";
    } else if (r->finish == NA_FINISH_STOP) {
        end.finish = NA_SG_STOP;
    } else if (r->finish == NA_FINISH_LENGTH || r->finish == NA_FINISH_CONTEXT) {
        end.finish = NA_SG_LENGTH;
    } else {
        end.finish = NA_SG_ERROR;
        end.status = j->err_st != NA_OK ? j->err_st : NA_ERR_INTERNAL;
        end.error = j->err[0] ? j->err : "the request failed";
    }
    if (end.finish == NA_SG_STOP || end.finish == NA_SG_LENGTH) {
        if (!j->stopped && j->n_pend > 0)
            sg_emit(j, j->pend, j->n_pend);      /* the rest (a cut sequence: U+FFFD) */
        g->st.finished++;
    } else if (end.finish == NA_SG_CANCELLED) {
        g->st.cancelled++;
    } else {
        g->st.failed++;
    }
    sg_unlink(g, j);
    if (j->p.on_end != NULL)
        j->p.on_end(j->p.user, &end);
    sg_job_free(j);
}

/* ---- create ------------------------------------------------------------------ */

/* The tokenizer as `nearattn run` opens it: the given file, the layout's
 * (for the layout's model), the GGUF's own, P.tok.bin or tokenizer.bin
 * beside a checkpoint P.bin. */
static na_status_t sg_open_tokenizer(na_sg_t *g, const na_sg_opts_t *o, const char *model_path)
{
    const char *path = o->tokenizer_path;
    char used[4096];

    if (path == NULL && o->model_path == NULL && g->cfg->model.tokenizer != NULL)
        path = g->cfg->model.tokenizer;
    return na_tokenizer_open_for_model(g->model, model_path, path, used, sizeof(used), &g->tok);
}

/* The model's name for /v1/models: the file name without directories and extension. */
static void sg_set_name(na_sg_t *g, const char *path)
{
    const char *base = strrchr(path, '/');
    char *dot;
    snprintf(g->name, sizeof(g->name), "%s", base != NULL ? base + 1 : path);
    dot = strrchr(g->name, '.');
    if (dot != NULL && dot != g->name)
        *dot = '\0';
}

static na_status_t sg_load_model(na_sg_t *g, const na_sg_opts_t *o)
{
    const char *model_path = o->model_path != NULL ? o->model_path : g->cfg->model.path;
    na_engine_opts_t eo;
    na_status_t st;

    if (model_path == NULL)
        return na_err(NA_ERR_INVALID, "layout %s names no model.path: give --model",
                      o->config_path);
    st = na_model_open(model_path, &g->model);
    if (st != NA_OK)
        return st;
    if (o->ctx > g->model->cfg.seq_len)     /* as `run --ctx` says it */
        na_log_warn("--ctx %d overrides the model context of %d tokens (RoPE was trained on "
                    "the shorter context: the text past it may degrade)", o->ctx,
                    g->model->cfg.seq_len);
    if (o->ctx > 0)
        g->model->cfg.seq_len = o->ctx;
    sg_set_name(g, model_path);
    st = sg_open_tokenizer(g, o, model_path);
    if (st != NA_OK)
        return st;
    if (na_tokenizer_vocab_size(g->tok) != g->model->cfg.vocab_size)
        return na_err(NA_ERR_FORMAT, "the tokenizer has %d tokens but model %s has vocab_size %d",
                      na_tokenizer_vocab_size(g->tok), model_path, g->model->cfg.vocab_size);
    eo = (na_engine_opts_t){ o->backend != NULL ? o->backend : "cpu", o->threads,
                             (na_dtype_t)g->cfg->model.kv_dtype, 0 };
    st = na_engine_create(g->model, &eo, &g->engine);
    if (st != NA_OK)
        return st;
    g->n_stop_ids = na_tokenizer_stop_ids(g->tok, g->stop_ids, 8);
    return NA_OK;
}

static na_status_t sg_start_engine(na_sg_t *g, const na_sg_opts_t *o)
{
    const char *mode = o->mode != NULL ? o->mode : "offload";
    na_cluster_opts_t co;
    na_off_opts_t oo;
    const na_cfg_t *cfg;
    na_status_t st;

    na_cluster_opts_default(&co);
    co.config_path = g->cfg_path;
    co.stop = o->stop;
    co.model_path = o->model_path;
    if (!strcmp(mode, "monolithic"))
        co.mode = "inproc";
    else
        co.mode = o->cluster != NULL ? o->cluster : "start";
    co.kvfetch = !strcmp(mode, "kv-fetch");
    st = na_cluster_create(&co, g->engine, &g->cluster);
    if (st != NA_OK)
        return st;
    cfg = na_cluster_cfg(g->cluster);
    memset(&oo, 0, sizeof(oo));
    oo.rep = na_cluster_rep(g->cluster);
    oo.max_batch = o->max_batch > 0 ? o->max_batch : (int)cfg->parallel.max_batch;
    oo.batches_in_flight = o->batches_in_flight > 0 ? o->batches_in_flight :
                           !strcmp(mode, "monolithic") ? 1 : (int)cfg->parallel.batches_in_flight;
    if (oo.batches_in_flight > NA_OFF_MAX_BATCHES)
        return na_err(NA_ERR_INVALID, "batches in flight: %d, at most %d",
                      oo.batches_in_flight, NA_OFF_MAX_BATCHES);
    oo.adaptive_batches = cfg->parallel.adaptive_batches && !o->no_adaptive_batches;
    g->capacity = oo.max_batch * oo.batches_in_flight;
    oo.stop_ids = g->stop_ids;
    oo.n_stop = g->n_stop_ids;
    oo.xcache = cfg->xcache.enabled;
    oo.xcache_share = cfg->xcache.share > 0 ? cfg->xcache.share : 1.0;
    oo.xcache_host_mb = cfg->xcache.host_mb;
    oo.prefix_reuse = cfg->kv.prefix_reuse && !o->no_prefix_reuse;
    oo.prefill_chunk = (int)cfg->parallel.prefill_chunk;
    oo.prefill_weighted = cfg->parallel.prefill_weighted;
    g->st.n_storage = cfg->n_storage;
    return na_off_create(g->engine, na_cluster_service(g->cluster), &oo, &g->off);
}

na_status_t na_sg_create(const na_sg_opts_t *o, na_sg_t **g_p)
{
    const char *mode = o->mode != NULL ? o->mode : "offload";
    na_sg_t *g;
    na_status_t st;

    *g_p = NULL;
    if (strcmp(mode, "offload") != 0 && strcmp(mode, "monolithic") != 0 &&
        strcmp(mode, "kv-fetch") != 0)
        return na_err(NA_ERR_INVALID, "unknown mode '%s' (use offload, monolithic or kv-fetch)",
                      mode);
    if (o->config_path == NULL)
        return na_err(NA_ERR_INVALID, "no layout file given");
    g = calloc(1, sizeof(*g));
    if (g == NULL)
        return na_err(NA_ERR_NOMEM, "out of memory");
    snprintf(g->cfg_path, sizeof(g->cfg_path), "%s", o->config_path);
    g->seed_ctr = na_now_ns();
    st = na_cfg_load(g->cfg_path, &g->cfg);
    if (st == NA_OK)
        st = sg_load_model(g, o);
    if (st == NA_OK)
        st = sg_start_engine(g, o);
    if (st != NA_OK) {
        na_sg_destroy(g);
        return st;
    }
    *g_p = g;
    return NA_OK;
}

/* ---- jobs ---------------------------------------------------------------------- */

static na_status_t sg_job_strings(na_sg_job_t *j, const na_sg_params_t *p)
{
    int k;

    if (p->n_stop < 0 || p->n_stop > NA_SG_MAX_STOP)
        return na_err(NA_ERR_INVALID, "at most %d stop strings, got %d", NA_SG_MAX_STOP,
                      p->n_stop);
    for (k = 0; k < p->n_stop; k++) {
        size_t len = p->stop[k] != NULL ? strlen(p->stop[k]) : 0;
        if (len == 0 || len > NA_SG_MAX_STOP_LEN)
            return na_err(NA_ERR_INVALID, "stop string %d must have 1 to %d bytes", k + 1,
                          NA_SG_MAX_STOP_LEN);
        j->stop[k] = strdup(p->stop[k]);
        if (j->stop[k] == NULL)
            return na_err(NA_ERR_NOMEM, "out of memory");
        j->stop_len[k] = len;
        j->n_stop = k + 1;
    }
    return NA_OK;
}

/* The prompt's token ids: p->prompt, or p->text encoded with BOS as the
 * tokenizer asks and the control tokens of p->special (*owned set). */
static na_status_t sg_prompt(na_sg_t *g, const na_sg_params_t *p, const int **ids, int *n,
                             int **owned)
{
    size_t cap, n_tok;
    na_status_t st;

    *owned = NULL;
    if (p->prompt != NULL) {
        *ids = p->prompt;
        *n = p->n_prompt;
        return NA_OK;
    }
    if (p->text == NULL)
        return na_err(NA_ERR_INVALID, "a job needs a prompt (token ids or text)");
    cap = na_tokenizer_max_tokens(strlen(p->text));
    *owned = malloc(cap * sizeof(int));
    if (*owned == NULL)
        return na_err(NA_ERR_NOMEM, "out of memory for a prompt of %zu bytes", strlen(p->text));
    st = na_tokenizer_encode_ex(g->tok, p->text, strlen(p->text),
                                na_tokenizer_add_bos(g->tok) ? NA_TOK_ADD_BOS : 0, p->special,
                                p->n_special, *owned, cap, &n_tok);
    if (st != NA_OK)
        return st;
    *ids = *owned;
    *n = (int)n_tok;
    return NA_OK;
}

na_status_t na_sg_submit(na_sg_t *g, const na_sg_params_t *p, na_sg_job_t **job_p)
{
    int seq = g->model->cfg.seq_len, n = 0, room, max_new, *owned = NULL;
    const int *ids = NULL;
    na_sampler_cfg_t sc;
    na_off_cb_t cb;
    na_sg_job_t *j;
    na_status_t st;

    if (job_p != NULL)
        *job_p = NULL;
    j = calloc(1, sizeof(*j));
    if (j == NULL)
        return na_err(NA_ERR_NOMEM, "out of memory");
    j->g = g;
    j->p = *p;
    j->p.stop = NULL;
    j->p.n_stop = 0;
    j->p.prompt = NULL;
    j->p.text = NULL;
    st = sg_job_strings(j, p);
    if (st == NA_OK)
        st = sg_prompt(g, p, &ids, &n, &owned);
    if (st == NA_OK && n > seq)
        st = na_err(NA_ERR_RANGE, "the prompt has %d tokens, more than the model context of "
                    "%d tokens", n, seq);
    /* as OpenAI: prompt + max_tokens must fit the context (max_tokens unset
     * or <= 0: as many as fit) */
    if (st == NA_OK && p->max_tokens > 0 && (long)n + p->max_tokens > (long)seq)
        st = na_err(NA_ERR_RANGE, "the model context is %d tokens, but %ld are requested "
                    "(%d in the prompt, max_tokens %d): shorten the prompt or lower max_tokens",
                    seq, (long)n + p->max_tokens, n, p->max_tokens);
    if (st == NA_OK) {
        room = seq - n + 1;            /* as na_request_create: at most this many come out */
        max_new = p->max_tokens <= 0 || p->max_tokens > room ? room : p->max_tokens;
        sc.temperature = (float)p->temperature;
        sc.top_p = na_sampler_top_p(p->top_p);
        sc.seed = na_sampler_request_seed(p->seed_given ? p->seed : g->seed_ctr++, 0);
        /* ids 1, 2, ... (wrapping): the engine's log lines name the request
         * ("request 7 failed: ..."); they were all 0 */
        g->req_ctr = g->req_ctr == INT_MAX ? 1 : g->req_ctr + 1;
        st = na_request_create(g->engine, g->req_ctr, ids, n, max_new, &sc, &j->r);
    }
    free(owned);
    if (st == NA_OK) {
        j->prev = j->r->prompt[j->r->n_prompt - 1];
        cb = (na_off_cb_t){ sg_on_token, sg_on_done, sg_on_error, j };
        st = na_off_submit(g->off, j->r, &cb);
    }
    if (st != NA_OK) {
        sg_job_free(j);
        return st;
    }
    NA_LIST_PUSH(g->jobs, j, prev_job, next_job);
    g->n_jobs++;
    g->st.prompt_tokens += n;
    if (job_p != NULL)
        *job_p = j;
    return NA_OK;
}

void na_sg_cancel(na_sg_t *g, na_sg_job_t *j)
{
    if (j == NULL || j->stopped || j->cancelled)
        return;
    j->cancelled = 1;
    na_off_cancel(g->off, j->r);
}

na_status_t na_sg_progress(na_sg_t *g, int timeout_ms)
{
    return na_off_progress(g->off, timeout_ms);
}

int na_sg_pending(const na_sg_t *g)
{
    return g->n_jobs;
}

void na_sg_stats(na_sg_t *g, na_sg_stats_t *out)
{
    const na_model_config_t *mc = &g->model->cfg;
    size_t per_tok = na_dtype_bytes((na_dtype_t)g->cfg->model.kv_dtype,
                                    (size_t)2 * (size_t)mc->n_layers *
                                    (size_t)(mc->n_kv_heads * (mc->dim / mc->n_heads)));
    na_off_stats_t os;
    na_sg_job_t *j;

    *out = g->st;
    out->waiting = out->running = 0;
    out->kv_bytes = 0;
    for (j = g->jobs; j != NULL; j = j->next_job) {
        if (j->r->state == NA_REQ_WAITING)
            out->waiting++;
        else
            out->running++;
        out->kv_bytes += (uint64_t)j->r->n_pos * per_tok;
    }
    na_off_stats(g->off, &os);
    out->recovered = os.recovered;
    out->prefix_hit_tokens = os.prefix_hit_tokens;
    out->prefix_computed_tokens = os.gen.prompt_tokens;
    out->attn_calls = os.attn_calls;
    out->steps_merged = os.merged_steps;
    out->steps_split = os.split_steps;
    out->split_trials = os.split_trials;
    out->split_trials_won = os.split_trials_won;
    out->attn_rt_s = os.attn_rt_s;
    out->bytes_sent = os.svc.bytes_sent;
    out->bytes_recv = os.svc.bytes_recv;
    out->prefill_bytes = os.svc.prefill_bytes;
    out->n_nodes = na_asvc_node_stats(na_cluster_service(g->cluster), out->nodes,
                                      NA_SG_MAX_NODES);
}

long na_sg_gen_tokens(const na_sg_t *g)
{
    return g->st.gen_tokens;
}

const na_model_t *na_sg_model(const na_sg_t *g)
{
    return g->model;
}

const na_tokenizer_t *na_sg_tokenizer(const na_sg_t *g)
{
    return g->tok;
}

const char *na_sg_model_name(const na_sg_t *g)
{
    return g->name;
}

int na_sg_heal(na_sg_t *g)
{
    return na_cluster_heal(g->cluster);
}

int na_sg_capacity(const na_sg_t *g)
{
    return g->capacity;
}

const char *na_sg_how(const na_sg_t *g)
{
    return g->cluster != NULL ? na_cluster_how(g->cluster) : "";
}

void na_sg_destroy(na_sg_t *g)
{
    if (g == NULL)
        return;
    na_off_destroy(g->off);            /* releases held requests, no callbacks */
    while (g->jobs != NULL) {
        na_sg_job_t *j = g->jobs;
        sg_unlink(g, j);
        sg_job_free(j);
    }
    na_cluster_destroy(g->cluster);
    na_engine_destroy(g->engine);
    na_tokenizer_destroy(g->tok);
    na_model_destroy(g->model);
    na_cfg_destroy(g->cfg);
    free(g);
}
