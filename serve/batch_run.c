/* serve/batch_run.c — the job of `nearattn batch` (serve/batch_run.h):
 * admit the input's lines in order into the generation front end, at most
 * max_in_flight at once, drive it, write each record as its job ends,
 * stop on a signal as documented there. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/fnv.h"
#include "common/strbuf.h"
#include "serve/batch_run.h"
#include "serve/oai.h"

#define BR_PROGRESS_MS 100      /* engine time between looks at signals and progress */
#define BR_DRAIN_S     60.0     /* cancelled jobs must end within this (fatal paths) */

typedef struct br br_t;

/* One job in flight: its line, its text so far. */
typedef struct {
    br_t                  *br;
    int                    slot;
    const na_batch_line_t *l;
    na_oai_kind_t          kind;
    na_sg_job_t           *job;
    char                  *text;
    size_t                 n, cap;
    int                    oom;      /* text could not grow: the job fails */
} br_job_t;

struct br {
    const na_batch_run_opts_t *o;
    na_batch_out_t            *out;
    na_batch_summary_t        *s;
    br_job_t                 **slots;    /* [max_in_flight] */
    int                        in_flight;
    na_status_t                err;      /* a results-file error: stop */
};

/* Write an OpenAI error body with this status as l's record (code and
 * param may be NULL), as `nearattn serve` answers it. */
static na_status_t br_write_error(br_t *br, const na_batch_line_t *l, int http,
                                  const char *type, const char *code, const char *param,
                                  const char *msg)
{
    na_oai_error_t e;
    json_t *body;
    na_status_t st;

    na_oai_error_set(&e, http, type, code, param, "%s", msg);
    body = na_oai_error_json(&e);
    if (body == NULL)
        return na_err(NA_ERR_NOMEM, "batch: out of memory");
    st = na_batch_out_write(br->out, l, http, body, NULL, NULL);
    json_decref(body);
    if (st == NA_OK)
        br->s->failed++;
    return st;
}

static void br_on_text(void *user, const char *text, size_t len)
{
    br_job_t *j = user;

    if (!j->oom && na_strbuf_append(&j->text, &j->n, &j->cap, text, len) != 0)
        j->oom = 1;
}

/* The record of a job that ended (not cancelled). */
static na_status_t br_record(br_t *br, br_job_t *j, const na_sg_end_t *end)
{
    char id[48];
    json_t *body;
    na_status_t st;

    if (end->finish == NA_SG_ERROR || j->oom) {
        char msg[512];
        snprintf(msg, sizeof(msg), "generation failed: %s", j->oom ?
                 "out of memory for the generated text" :
                 end->error != NULL ? end->error : na_status_string(end->status));
        return br_write_error(br, j->l, 500, "server_error", NULL, NULL, msg);
    }
    na_batch_record_id(j->l, j->kind == NA_OAI_CHAT ? "chatcmpl-" : "cmpl-", id, sizeof(id));
    body = na_oai_response(j->kind, id, (long)time(NULL), na_sg_model_name(br->o->gen),
                           j->text != NULL ? j->text : "", j->n, na_sg_finish_name(end->finish),
                           na_oai_usage(end->prompt_tokens, end->cached_tokens,
                                        end->completion_tokens));
    if (body == NULL)
        return na_err(NA_ERR_NOMEM, "batch: out of memory");
    st = na_batch_out_write(br->out, j->l, 200, body, NULL, NULL);
    json_decref(body);
    if (st == NA_OK) {
        br->s->ok++;
        br->s->prompt_tokens += end->prompt_tokens;
        br->s->completion_tokens += end->completion_tokens;
    }
    return st;
}

static void br_on_end(void *user, const na_sg_end_t *end)
{
    br_job_t *j = user;
    br_t *br = j->br;
    na_status_t st = NA_OK;

    /* cancelled, or failed after a signal (a terminal's Ctrl-C reaches the
     * storage nodes started here too): no record, a resumed run redoes it */
    if (end->finish == NA_SG_CANCELLED || (end->finish == NA_SG_ERROR && *br->o->n_sigs > 0))
        br->s->cancelled++;
    else if (br->err == NA_OK)
        st = br_record(br, j, end);
    if (st != NA_OK)
        br->err = st;
    br->slots[j->slot] = NULL;
    br->in_flight--;
    free(j->text);
    free(j);
}

/* Parse valid line l's body and submit its job into a free slot. A refused
 * body or job is written as a 400 record. NA_OK, or a fatal error. */
static na_status_t br_admit(br_t *br, const na_batch_in_t *in, const na_batch_line_t *l)
{
    na_oai_kind_t kind = l->url == NA_BATCH_URL_CHAT ? NA_OAI_CHAT : NA_OAI_COMPLETION;
    na_oai_req_t r;
    na_oai_error_t e;
    na_sg_params_t p;
    json_t *body;
    br_job_t *j;
    char *text;
    na_status_t st;
    int http, slot;

    st = na_batch_in_body(in, l, &body);
    if (st != NA_OK)
        return st;
    text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (text == NULL)
        return na_err(NA_ERR_NOMEM, "batch: out of memory");
    memset(&r, 0, sizeof(r));
    http = na_oai_parse(kind, text, strlen(text), br->o->chat, br->o->chat_err, &r, &e);
    free(text);
    if (http != 0) {
        json_t *eb = na_oai_error_json(&e);
        if (eb == NULL)
            return na_err(NA_ERR_NOMEM, "batch: out of memory");
        st = na_batch_out_write(br->out, l, http, eb, NULL, NULL);
        json_decref(eb);
        br->s->failed += st == NA_OK;
        return st;
    }
    for (slot = 0; br->slots[slot] != NULL; slot++)
        ;                                   /* in_flight < max: there is a free one */
    j = calloc(1, sizeof(*j));
    if (j == NULL) {
        na_oai_req_free(&r);
        return na_err(NA_ERR_NOMEM, "batch: out of memory");
    }
    j->br = br;
    j->slot = slot;
    j->l = l;
    j->kind = kind;
    p = r.job;
    if (!p.seed_given) {                    /* reproducible: the same text on a resume */
        p.seed = na_fnv1a64(l->custom_id, strlen(l->custom_id));
        p.seed_given = 1;
    }
    p.on_text = br_on_text;
    p.on_end = br_on_end;
    p.user = j;
    st = na_sg_submit(br->o->gen, &p, &j->job);
    na_oai_req_free(&r);
    if (st == NA_ERR_INVALID || st == NA_ERR_RANGE) {   /* this request only */
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", na_errmsg());
        free(j);
        return br_write_error(br, l, 400, "invalid_request_error",
                              st == NA_ERR_RANGE ? "context_length_exceeded" : NULL,
                              kind == NA_OAI_CHAT ? "messages" : "prompt", msg);
    }
    if (st != NA_OK) {
        free(j);
        return st;
    }
    br->slots[slot] = j;
    br->in_flight++;
    return NA_OK;
}

static void br_cancel_all(br_t *br)
{
    int i;
    for (i = 0; i < br->o->max_in_flight; i++)
        if (br->slots[i] != NULL)
            na_sg_cancel(br->o->gen, br->slots[i]->job);
}

/* Cancel what is in flight and drive the front end until it ended. */
static void br_drain(br_t *br)
{
    double end = na_now_s() + BR_DRAIN_S;

    br_cancel_all(br);
    while (br->in_flight > 0 && na_now_s() < end)
        if (na_sg_progress(br->o->gen, BR_PROGRESS_MS) != NA_OK)
            break;
}

static void br_progress(br_t *br, long tok0, int force)
{
    if (br->o->progress == NULL)
        return;
    na_batch_progress_update(br->o->progress, br->s->before + br->s->ok + br->s->failed,
                             br->s->failed, na_sg_gen_tokens(br->o->gen) - tok0, force);
}

/* Say what a signal does now (the bar taken off the line first). */
static void br_say(br_t *br, const char *msg)
{
    if (br->o->progress != NULL)
        na_batch_progress_clear(br->o->progress);
    fprintf(stderr, "nearattn batch: %s\n", msg);
}

na_status_t na_batch_run(const na_batch_in_t *in, na_batch_out_t *out,
                         const na_batch_run_opts_t *o, na_batch_summary_t *s)
{
    br_t br = { o, out, s, NULL, 0, NA_OK };
    na_status_t st = NA_OK;
    sig_atomic_t seen = 0;
    double t0 = na_now_s();
    int stopping = 0, cancelling = 0, i;
    long idx = 0, tok0;
    char msg[160];

    memset(s, 0, sizeof(*s));
    s->total = in->n;
    for (i = 0; i < in->n; i++)
        s->before += na_batch_out_done(out, &in->lines[i]);
    br.slots = calloc((size_t)o->max_in_flight, sizeof(*br.slots));
    if (br.slots == NULL)
        return na_err(NA_ERR_NOMEM, "batch: out of memory");
    tok0 = na_sg_gen_tokens(o->gen);
    for (;;) {
        if (*o->n_sigs != seen) {             /* a signal since the last look */
            seen = *o->n_sigs;
            if (!stopping) {
                stopping = 1;
                snprintf(msg, sizeof(msg), "stopping (signal %d): no new requests%s",
                         (int)*o->stop_sig, br.in_flight == 0 ? "" :
                         *o->stop_sig == SIGINT && seen < 2 ?
                         "; finishing those in flight (Ctrl-C again to cancel them)" :
                         "; cancelling those in flight");
                br_say(&br, msg);
            }
            if (!cancelling && (*o->stop_sig != SIGINT || seen >= 2)) {
                cancelling = 1;
                br_cancel_all(&br);
            }
        }
        while (!stopping && st == NA_OK && br.err == NA_OK && br.in_flight < o->max_in_flight &&
               idx < in->n) {
            const na_batch_line_t *l = &in->lines[idx++];
            if (na_batch_out_done(out, l))
                continue;
            if (l->err_code != NULL) {
                st = na_batch_out_write(out, l, 0, NULL, l->err_code, l->err_msg);
                s->failed += st == NA_OK;
            } else {
                st = br_admit(&br, in, l);
            }
        }
        if (st == NA_OK)
            st = br.err;
        if (st != NA_OK)
            break;
        if (br.in_flight == 0 && (stopping || idx == in->n))
            break;
        st = na_sg_progress(o->gen, BR_PROGRESS_MS);
        if (st != NA_OK)
            break;
        br_progress(&br, tok0, 0);
    }
    if (st == NA_OK && br.err != NA_OK)
        st = br.err;
    if (st != NA_OK && br.in_flight > 0)
        br_drain(&br);                        /* a fatal error: end what runs */
    for (i = 0; i < o->max_in_flight; i++) {  /* left by an engine that stopped */
        if (br.slots[i] != NULL) {
            free(br.slots[i]->text);
            free(br.slots[i]);
        }
    }
    free(br.slots);
    br_progress(&br, tok0, 0);                /* the counts (na_batch_progress_end prints) */
    s->not_started = s->total - s->before - s->ok - s->failed;
    s->wall_s = na_now_s() - t0;
    if (st == NA_OK && stopping && s->not_started > 0)
        st = na_err(NA_ERR_CANCELED, "stopped by signal %d", (int)*o->stop_sig);
    return st;
}
