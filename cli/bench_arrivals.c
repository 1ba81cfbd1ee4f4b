/* cli/bench_arrivals.c — `nearattn bench arrivals`: what a long prompt's
 * arrival does to the streams already decoding (issue 21's "Arrivals" row).
 *
 * Starts `nearattn serve --port 0` (or takes --url), and, on it and on an
 * optional --peer (llama-server, or any OpenAI-compatible server, driven by
 * the same client: cli/bench_serve_http.c sessions), per rep:
 *   alone     the newcomer's prompt (--prompt-tokens token ids) sent with
 *             nothing else running, max_tokens 1: its prefill alone (the
 *             time to its first text, or to the end of its answer when that
 *             token gives no text);
 *   arrival   --streams greedy streamed completions (short text prompts,
 *             --max-tokens each); once every stream has given --warm text
 *             chunks, a steady window of --steady seconds (and at least
 *             --steady-chunks gaps of each stream); then the same
 *             newcomer prompt arrives; the arrival window lasts from its
 *             sending to its first text; the streams are cut (their
 *             connections closed) once each has given one more chunk.
 * Figures (per server; the gaps of all reps pooled, the times medians):
 *   steady ITL p50 / p99   gaps between successive text chunks of a stream,
 *                          both ends inside the steady window
 *   arrival ITL p50 / p99  gaps that overlap the arrival window (a stream
 *                          stalled for the whole prefill gives one gap that
 *                          long), set against 2 x the steady p99
 *   newcomer TTFT          beside 1.3 x its prefill alone.
 * Each request's prompt starts with two tokens of its own (the rest is the
 * same; numbered from a start of this run's own), so neither server can
 * reuse the KV of an earlier one (nearattn's prefix cache, llama-server's
 * slot cache), in this run or an earlier one. Pairs alternate (serve first in
 * even reps, the peer first in odd ones). */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cli/bench.h"
#include "cli/bench_serve_http.h"
#include "cli/bench_server.h"
#include "cli/cli.h"
#include "cluster/proc.h"

#define BA_MAX_REPS    9
#define BA_MAX_STREAMS 256
#define BA_ID_LO       259      /* prompt ids: past gen-model's 3 specials + 256 bytes */
#define BA_ID_HI       512      /* below the smallest vocabulary a test model has */

typedef struct {
    na_bsv_args_t srv;          /* the servers: layout, model, mode, --url, --peer, keys */
    const char *gaps;           /* --gaps FILE: every gap written there, or NULL */
    FILE       *gaps_f;
    int         streams;        /* --streams (8) */
    int         prompt_tokens;  /* --prompt-tokens (4096) */
    int         max_tokens;     /* --max-tokens of each stream (0: 4096, --quick 256) */
    int         steady_s;       /* --steady (0: 3 s, --quick 1 s) */
    int         warm;           /* --warm text chunks per stream before the steady window */
    int         steady_chunks;  /* --steady-chunks: whole gaps per stream in it (8) */
    int         reps;           /* 0: 2 with --peer, else 1; --quick 1 */
    int         timeout_s;      /* --timeout: per request, and per window */
    char        threads[16];
} ba_args_t;

/* One server's figures over the reps. */
typedef struct {
    const char *name;           /* "serve", "peer" */
    na_bsh_opts_t o;
    char        model_[256];    /* the model id its /v1/models gives (o.model) */
    double     *steady, *arrive;   /* ITL gaps (s), pooled over the reps */
    long        n_steady, n_arrive;
    double      alone[BA_MAX_REPS], ttft[BA_MAX_REPS];
    int         n;              /* reps done */
    long        prompt_tokens;  /* the newcomer's, as the server counted it (-1: not said) */
    int         ended;          /* streams that ended before the arrival window closed */
    int         replaced;       /* streams that ended before it and were replaced */
} ba_side_t;

static void ba_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn bench arrivals [--config F] [--model F] [--mode M] [--url URL]\n"
        "                               [--api-key-file F] [--peer URL]\n"
        "                               [--peer-api-key-file F] [--streams N]\n"
        "                               [--prompt-tokens N] [--max-tokens N] [--steady S]\n"
        "                               [--steady-chunks N] [--warm N] [--reps N]\n"
        "                               [options]\n\n"
        "A long prompt arrives while streams decode. Starts `nearattn serve` (the given\n"
        "layout, model and mode; or --url) and, on it and on --peer (llama-server or any\n"
        "OpenAI-compatible server, same client and prompts), measures per rep: the\n"
        "newcomer's prefill alone (N token ids, nothing else running), then N streams\n"
        "decoding, a steady window, and the same prompt arriving. Prints the streams'\n"
        "inter-token latency (ITL) p50/p99 in the steady window and during the arrival\n"
        "(target: arrival p99 <= 2 x steady p99), and the newcomer's time to first token\n"
        "beside its prefill alone (target: <= 1.3 x).\n\n"
        "  --config F         layout for serve (its parallel.prefill_chunk is the knob)\n"
        "  --model F          model for serve (a context of >= prompt + max-tokens)\n"
        "  --mode M           monolithic (default), offload or kv-fetch\n"
        "  --url URL          bench a running server (http://HOST:PORT) instead\n"
        "  --api-key-file F   the server's bearer key (a started server gets it too)\n"
        "  --peer URL         also measure this server (already running) the same way\n"
        "  --peer-api-key-file F  the peer's bearer key\n"
        "  --streams N        streams decoding when the prompt arrives (default 8)\n"
        "  --prompt-tokens N  the newcomer's prompt, token ids %d..%d (default 4096)\n"
        "  --max-tokens N     each stream's max_tokens (default 4096; --quick 256): they\n"
        "                     must outlast the arrival window (a note counts those that\n"
        "                     did not)\n"
        "  --steady S         seconds of the steady window, at least (default 3; --quick 1)\n"
        "  --steady-chunks N  and at least N whole gaps of every stream in it (default 8)\n"
        "  --warm N           text chunks each stream gives before it (default 4)\n"
        "  --reps N           measurements of each server, medians (default 1; with\n"
        "                     --peer 2, alternated; at most %d)\n"
        "  --ready-timeout S  seconds to wait for a server's /health (default 120)\n"
        "  --timeout S        limit of each request and window (default 1800)\n"
        "  --gaps FILE        write every gap of the windows to FILE: server, rep,\n"
        "                     window (steady, arrival), stream, its end after the\n"
        "                     newcomer was sent (ms), its length (ms)\n"
        NA_CLI_BENCH_OPTS_HELP, BA_ID_LO, BA_ID_HI - 1, BA_MAX_REPS);
}

/* Append v to *a (grown). -1 out of memory. */
static int ba_push(double **a, long *n, double v)
{
    if ((*n & (*n - 1)) == 0) {
        double *b = realloc(*a, (size_t)(*n ? 2 * *n : 1) * sizeof(double));
        if (b == NULL)
            return -1;
        *a = b;
    }
    (*a)[(*n)++] = v;
    return 0;
}

/* The time of request t's first token: its first text chunk, else the end
 * of its answer (a token that gives no text on its own). */
static double ba_first(const na_bsh_trace_t *t)
{
    return t->n_text > 0 ? t->t_text[0] : t->t_end;
}

/* Poll s until request idx is no longer running, or timeout_s. */
static na_status_t ba_wait_done(na_bsh_session_t *s, int idx, int timeout_s)
{
    double end = na_bench_now() + timeout_s;
    na_status_t st;

    while (na_bsh_session_trace(s, idx)->state == NA_BSH_RUNNING) {
        if (na_bench_now() > end)
            return na_err(NA_ERR_TIMEOUT, "no answer within %d s (--timeout)", timeout_s);
        if ((st = na_bsh_session_poll(s, 50, NULL)) != NA_OK)
            return st;
    }
    return NA_OK;
}

/* A request of s that ended badly: its error. */
static na_status_t ba_check(const na_bsh_session_t *s, int idx, const char *what)
{
    const na_bsh_trace_t *t = na_bsh_session_trace(s, idx);

    if (t->state == NA_BSH_FAILED)
        return na_err(NA_ERR_PEER, "%s failed: %s", what, t->error);
    return NA_OK;
}

/* The newcomer's prompt of request number `variant`: ids[0] and ids[1]
 * are its own, the rest the same for all (a fixed pseudo-random sequence). */
static void ba_prompt(int *ids, int n, int variant)
{
    unsigned long x = 88172645463325252ul;
    int i;

    for (i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ids[i] = BA_ID_LO + (int)(x % (unsigned long)(BA_ID_HI - BA_ID_LO));
    }
    ids[0] = BA_ID_LO + variant % (BA_ID_HI - BA_ID_LO);
    if (n > 1)
        ids[1] = BA_ID_LO + variant / (BA_ID_HI - BA_ID_LO) % (BA_ID_HI - BA_ID_LO);
}

/* The prefill alone: the prompt (variant v) with nothing else running. */
static na_status_t ba_alone(const ba_args_t *a, ba_side_t *sd, int *ids, int v, double *out)
{
    na_bsh_session_t *s = NULL;
    const na_bsh_trace_t *t;
    na_status_t st;
    int idx;

    ba_prompt(ids, a->prompt_tokens, v);
    st = na_bsh_session_create(&sd->o, 1, &s);
    if (st == NA_OK)
        st = na_bsh_session_send(s, NULL, ids, a->prompt_tokens, 1, &idx);
    if (st == NA_OK)
        st = ba_wait_done(s, idx, a->timeout_s);
    if (st == NA_OK)
        st = ba_check(s, idx, "the prompt alone");
    if (st == NA_OK) {
        t = na_bsh_session_trace(s, idx);
        *out = ba_first(t) - t->t_sent;
        sd->prompt_tokens = t->prompt_tokens;
    }
    na_bsh_session_destroy(s);
    return st;
}

/* The streams of one arrival: stream k is request slot[k] of the session. */
typedef struct {
    na_bsh_session_t *s;
    int               slot[BA_MAX_STREAMS], n;
    int               next;        /* the next stream prompt's number */
    int               replaced, max_replaced;
} ba_streams_t;

/* Send stream k a new prompt (number st->next). */
static na_status_t ba_stream_send(const ba_args_t *a, ba_streams_t *st, int k)
{
    static const char *const start[] = { "Once upon a time", "The little dog",
                                         "Lily and Tom went to the park", "One day a bird" };
    char text[128];

    snprintf(text, sizeof(text), "%s number %d", start[st->next % 4], st->next);
    st->next++;
    return na_bsh_session_send(st->s, text, NULL, 0, a->max_tokens, &st->slot[k]);
}

/* Before the arrival: a stream that failed is an error; one that ended (a
 * stop token: random weights sample one now and then) is replaced by a
 * stream of the next prompt, at most max_replaced times; need[k] (its
 * chunks to give in the steady window) starts again. */
static na_status_t ba_streams_check(const ba_args_t *a, ba_streams_t *st, long *need)
{
    na_status_t rc;
    int k;

    for (k = 0; k < st->n; k++) {
        const na_bsh_trace_t *t = na_bsh_session_trace(st->s, st->slot[k]);
        if (t->state == NA_BSH_RUNNING)
            continue;
        if (t->state == NA_BSH_FAILED)
            return na_err(NA_ERR_PEER, "stream %d failed: %s", k, t->error);
        if (st->replaced == st->max_replaced)
            return na_err(NA_ERR_PEER, "stream %d ended after %ld text chunks, and %d streams "
                          "ended before it (stop tokens, or --max-tokens %d too small)", k,
                          t->n_text, st->replaced, a->max_tokens);
        st->replaced++;
        if ((rc = ba_stream_send(a, st, k)) != NA_OK)
            return rc;
        need[k] = a->warm + a->steady_chunks + 1;
    }
    return NA_OK;
}

/* The newcomer (request nc) answered, and every stream still running has
 * given a chunk after its first token (so the gap across its end is whole). */
static int ba_closed(const ba_streams_t *st, int nc)
{
    const na_bsh_trace_t *t = na_bsh_session_trace(st->s, nc);
    double t1;
    int k;

    if (t->state == NA_BSH_RUNNING)
        return 0;
    t1 = ba_first(t);
    for (k = 0; k < st->n; k++) {
        t = na_bsh_session_trace(st->s, st->slot[k]);
        if (t->state == NA_BSH_RUNNING && (t->n_text == 0 || t->t_text[t->n_text - 1] <= t1))
            return 0;
    }
    return 1;
}

/* The streams, a steady window, the arrival (variant v): the gaps into sd,
 * the newcomer's time to first token into *ttft. */
static na_status_t ba_arrival(const ba_args_t *a, ba_side_t *sd, int *ids, int v, int rep,
                              double *ttft)
{
    ba_streams_t st;
    const na_bsh_trace_t *t;
    long need[BA_MAX_STREAMS];
    double t0 = 0, t_send, t_first, until = 0, end = na_bench_now() + a->timeout_s;
    na_status_t rc;
    int k, nc = -1, n = a->streams;
    long j;

    memset(&st, 0, sizeof(st));
    st.n = n;
    st.next = rep * 1000;
    st.max_replaced = 4 * n;
    ba_prompt(ids, a->prompt_tokens, v);
    rc = na_bsh_session_create(&sd->o, n + 1 + st.max_replaced, &st.s);
    for (k = 0; k < n && rc == NA_OK; k++)
        rc = ba_stream_send(a, &st, k);
    /* warm-up, then the steady window: >= --steady s and --steady-chunks
     * gaps of every stream (of its replacement, if it ended) */
    for (k = 0; k < n; k++)
        need[k] = a->warm;
    while (rc == NA_OK) {
        if ((rc = na_bsh_session_poll(st.s, 5, NULL)) != NA_OK ||
            (rc = ba_streams_check(a, &st, need)) != NA_OK)
            break;
        for (k = 0; k < n; k++)
            if (na_bsh_session_trace(st.s, st.slot[k])->n_text < need[k])
                break;
        if (k == n && t0 == 0) {         /* warm: the window starts */
            t0 = na_bench_now();
            until = t0 + a->steady_s;
            for (k = 0; k < n; k++)
                need[k] = na_bsh_session_trace(st.s, st.slot[k])->n_text + a->steady_chunks + 1;
        } else if (k == n && na_bench_now() >= until) {
            break;
        }
        if (na_bench_now() > end)
            rc = na_err(NA_ERR_TIMEOUT, "the streams did not give a steady window within %d s "
                        "(--timeout)", a->timeout_s);
    }
    t_send = na_bench_now();
    if (rc == NA_OK)
        rc = na_bsh_session_send(st.s, NULL, ids, a->prompt_tokens, 1, &nc);
    /* the arrival window: streams that end in it are counted, not replaced */
    for (end = t_send + a->timeout_s; rc == NA_OK && !ba_closed(&st, nc);) {
        if (na_bench_now() > end)
            rc = na_err(NA_ERR_TIMEOUT, "the arrival window did not close within %d s "
                        "(--timeout)", a->timeout_s);
        else
            rc = na_bsh_session_poll(st.s, 5, NULL);
    }
    if (rc == NA_OK)
        rc = ba_check(st.s, nc, "the arriving prompt");
    if (rc != NA_OK) {
        na_bsh_session_destroy(st.s);
        return rc;
    }
    t = na_bsh_session_trace(st.s, nc);
    t_first = ba_first(t);
    *ttft = t_first - t->t_sent;
    if (t->prompt_tokens > 0)
        sd->prompt_tokens = t->prompt_tokens;
    sd->replaced += st.replaced;
    for (k = 0; k < n; k++) {
        t = na_bsh_session_trace(st.s, st.slot[k]);
        sd->ended += t->state != NA_BSH_RUNNING && t->t_end < t_first;
    }
    /* the gaps of every stream, replaced ones included */
    for (k = 0; (t = na_bsh_session_trace(st.s, k)) != NULL && rc == NA_OK; k++)
        for (j = 1; k != nc && j < t->n_text && rc == NA_OK; j++) {
            double p = t->t_text[j - 1], q = t->t_text[j];
            int w = p >= t0 && q <= t_send ? 1 : q > t_send && p < t_first ? 2 : 0;
            if ((w == 1 && ba_push(&sd->steady, &sd->n_steady, q - p) != 0) ||
                (w == 2 && ba_push(&sd->arrive, &sd->n_arrive, q - p) != 0))
                rc = na_err(NA_ERR_NOMEM, "bench arrivals: out of memory for the gaps");
            if (w > 0 && a->gaps_f != NULL)
                fprintf(a->gaps_f, "%s %d %s %d %.3f %.3f\n", sd->name, rep + 1,
                        w == 1 ? "steady" : "arrival", k, 1e3 * (q - t_send), 1e3 * (q - p));
        }
    na_bsh_session_destroy(st.s);     /* closes the streams' connections */
    usleep(500000);                   /* and lets the server see it */
    return rc;
}

/* The rows of one server into b. */
static void ba_report(na_bench_t *b, ba_side_t *sd)
{
    char name[96];
    double sp50, sp99, ap50, ap99, alone, ttft, spa, spt, r[BA_MAX_REPS];
    int k;

    sp50 = 1e3 * na_bench_percentile(sd->steady, sd->n_steady, 50);
    sp99 = 1e3 * na_bench_percentile(sd->steady, sd->n_steady, 99);
    ap50 = 1e3 * na_bench_percentile(sd->arrive, sd->n_arrive, 50);
    ap99 = 1e3 * na_bench_percentile(sd->arrive, sd->n_arrive, 99);
    memcpy(r, sd->alone, sizeof(r));
    spa = na_bench_spread(r, sd->n);
    alone = 1e3 * na_bench_median(r, sd->n);
    memcpy(r, sd->ttft, sizeof(r));
    spt = na_bench_spread(r, sd->n);
    ttft = 1e3 * na_bench_median(r, sd->n);
    snprintf(name, sizeof(name), "%s steady ITL p50", sd->name);
    na_bench_add(b, name, sp50, "ms", 0, NULL, 0);
    snprintf(name, sizeof(name), "%s steady ITL p99", sd->name);
    na_bench_add(b, name, sp99, "ms", 0, NULL, 0);
    snprintf(name, sizeof(name), "%s arrival ITL p50", sd->name);
    na_bench_add(b, name, ap50, "ms", 0, NULL, 0);
    snprintf(name, sizeof(name), "%s arrival ITL p99", sd->name);
    na_bench_add(b, name, ap99, "ms", 0, "2 x steady p99 (target)", 2 * sp99);
    snprintf(name, sizeof(name), "%s prefill alone", sd->name);
    na_bench_add(b, name, alone, "ms", spa, NULL, 0);
    snprintf(name, sizeof(name), "%s newcomer TTFT", sd->name);
    na_bench_add(b, name, ttft, "ms", spt, "1.3 x prefill alone (target)", 1.3 * alone);
    for (k = 0; k < sd->n; k++)
        r[k] = sd->alone[k] > 0 ? sd->ttft[k] / sd->alone[k] : 0;
    na_bench_note(b, "%s: arrival ITL p99 / steady p99 = %.2f (target <= 2: %s), newcomer "
                  "TTFT / prefill alone = %.2f (median of %d; target <= 1.3: %s); %ld steady "
                  "and %ld arrival gaps; newcomer prompt %ld tokens", sd->name,
                  sp99 > 0 ? ap99 / sp99 : 0, sp99 > 0 && ap99 <= 2 * sp99 ? "met" : "missed",
                  na_bench_median(r, sd->n), sd->n,
                  na_bench_median(r, sd->n) <= 1.3 ? "met" : "missed", sd->n_steady,
                  sd->n_arrive, sd->prompt_tokens);
    if (sd->replaced > 0)
        na_bench_note(b, "%s: %d streams ended (a stop token) before the arrival and were "
                      "replaced by new ones (their short prompts went in beside the others)",
                      sd->name,
                      sd->replaced);
    if (sd->ended > 0)
        na_bench_note(b, "%s: %d streams ended before the newcomer's first token (a stop "
                      "token or --max-tokens): the arrival gaps hold fewer streams", sd->name,
                      sd->ended);
}

/* One rep of one server: alone, then the arrival. */
static na_status_t ba_rep(const ba_args_t *a, ba_side_t *sd, int *ids, int *variant, int rep)
{
    na_status_t st;

    fprintf(stderr, "bench arrivals: %s rep %d: prefill alone (load %.2f)...\n", sd->name,
            rep + 1, na_bench_loadavg());
    st = ba_alone(a, sd, ids, (*variant)++, &sd->alone[sd->n]);
    if (st != NA_OK)
        return st;
    fprintf(stderr, "bench arrivals: %s rep %d: %d streams, then the arrival (load %.2f)...\n",
            sd->name, rep + 1, a->streams, na_bench_loadavg());
    st = ba_arrival(a, sd, ids, (*variant)++, rep, &sd->ttft[sd->n]);
    if (st == NA_OK)
        sd->n++;
    return st;
}

int na_cli_bench_arrivals(int argc, char **argv)
{
    ba_args_t a = { .srv = { .mode = "monolithic", .ready_s = 120 }, .streams = 8,
                    .prompt_tokens = 4096, .warm = 4, .steady_chunks = 8, .timeout_s = 1800 };
    const na_cli_bench_dflt_t dflt[] = { { &a.max_tokens, 256, 4096 }, { &a.steady_s, 1, 3 } };
    na_cli_bench_opts_t o;
    na_bench_t *b = NULL;
    ba_side_t sv, pe;
    char exe[4096], dir[512];
    na_bsv_t sr;
    const char *tmp = getenv("TMPDIR");
    int rc, k, variant = 0, *ids = NULL;
    na_status_t st = NA_OK;
    const na_cli_num_t num[] = {
        { "--streams", 1, BA_MAX_STREAMS, &a.streams },
        { "--prompt-tokens", 1, 1L << 20, &a.prompt_tokens },
        { "--max-tokens", 1, 1L << 20, &a.max_tokens }, { "--warm", 1, 1000, &a.warm },
        { "--reps", 1, BA_MAX_REPS, &a.reps }, { "--ready-timeout", 1, 86400, &a.srv.ready_s },
        { "--timeout", 1, 86400, &a.timeout_s },
        { "--steady-chunks", 1, 100000, &a.steady_chunks }, { "--steady", 1, 3600, &a.steady_s },
    };
    const na_cli_str_t str[] = { { "--gaps", &a.gaps } };
    const na_cli_bench_own_t own = { .num = num, .n_num = sizeof(num) / sizeof(num[0]),
                                     .str = str, .n_str = 1, .own = na_bsv_opt, .ctx = &a.srv };

    memset(&sv, 0, sizeof(sv));
    memset(&pe, 0, sizeof(pe));
    rc = na_cli_bench_parse("arrivals", argc, argv, &o, ba_usage, &own);
    if (rc >= 0)
        return rc;
    na_cli_bench_defaults(&o, dflt, sizeof(dflt) / sizeof(dflt[0]));
    if (a.reps == 0)
        a.reps = a.srv.peer != NULL && !o.quick ? 2 : 1;
    snprintf(a.threads, sizeof(a.threads), "%d", o.threads);
    if (na_bsv_keys("bench arrivals", &a.srv, &sr) != 0)
        return 1;
    if (na_proc_self_exe(exe, sizeof(exe)) != NA_OK)
        return na_cli_fail("bench arrivals", NA_ERR_IO);
    ids = malloc((size_t)a.prompt_tokens * sizeof(int));
    if (ids == NULL)
        return na_cli_fail("bench arrivals", NA_ERR_NOMEM);
    snprintf(dir, sizeof(dir), "%s/nearattn-bench-arrivals-XXXXXX",
             tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "nearattn bench arrivals: mkdtemp %s: %s\n", dir, strerror(errno));
        free(ids);
        return 1;
    }
    rc = 1;
    if (a.gaps != NULL && (a.gaps_f = fopen(a.gaps, "w")) == NULL) {
        fprintf(stderr, "nearattn bench arrivals: --gaps %s: %s\n", a.gaps, strerror(errno));
        goto out;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "nearattn bench arrivals: curl_global_init failed\n");
        goto out;
    }
    if (na_bsv_start("bench arrivals", &a.srv, exe, a.threads, dir, &sr, sv.model_,
                     sizeof(sv.model_)) != 0 ||
        na_bsv_peer("bench arrivals", &a.srv, &sr, pe.model_, sizeof(pe.model_)) != 0)
        goto out;
    sv.name = "serve";
    pe.name = "peer";
    sv.prompt_tokens = pe.prompt_tokens = -1;
    sv.o = (na_bsh_opts_t){ sr.base, sr.key[0] ? sr.key : NULL, sv.model_, 1, a.timeout_s };
    pe.o = (na_bsh_opts_t){ a.srv.peer, sr.pkey[0] ? sr.pkey : NULL, pe.model_, 1,
                            a.timeout_s };
    if (na_bench_create("arrivals", &b) != NA_OK)
        goto out;
    /* a server that outlives this run (--url, --peer) must not find these
     * prompts cached from an earlier run either: the variants start at a
     * number of this run's own */
    variant = (int)(((unsigned)getpid() * 2654435761u ^ (unsigned)na_bench_now()) %
                    (unsigned)((BA_ID_HI - BA_ID_LO) * (BA_ID_HI - BA_ID_LO) - 64));
    for (k = 0; k < a.reps && st == NA_OK; k++) {
        int peer_first = a.srv.peer != NULL && k % 2 == 1;
        if (peer_first)
            st = ba_rep(&a, &pe, ids, &variant, k);
        if (st == NA_OK)
            st = ba_rep(&a, &sv, ids, &variant, k);
        if (st == NA_OK && a.srv.peer != NULL && !peer_first)
            st = ba_rep(&a, &pe, ids, &variant, k);
    }
    if (st != NA_OK) {
        fprintf(stderr, "nearattn bench arrivals: %s\n", na_errmsg());
        goto out;
    }
    ba_report(b, &sv);
    if (a.srv.peer != NULL)
        ba_report(b, &pe);
    na_bench_note(b, "serve %s (%s, model \"%s\"); %d streams of short text prompts, greedy, "
                  "max_tokens %d; a steady window of >= %d s and >= %d gaps each after %d "
                  "text chunks each; the newcomer: %d token ids, max_tokens 1, its first two "
                  "its own per request (no cached prefix); %d reps, ITL gaps pooled, times "
                  "medians", sr.base,
                  a.srv.url != NULL ? "given" : "started here", sv.model_, a.streams, a.max_tokens,
                  a.steady_s, a.steady_chunks, a.warm, a.prompt_tokens, a.reps);
    if (a.srv.peer != NULL)
        na_bench_note(b, "peer %s, model \"%s\": the same client and prompts, alternated with "
                      "serve (serve first in even reps)", a.srv.peer, pe.model_);
    rc = na_cli_bench_finish("arrivals", b, &o);
out:
    na_bsv_stop(&sr);
    curl_global_cleanup();
    na_bench_destroy(b);
    free(sv.steady);
    free(sv.arrive);
    free(pe.steady);
    free(pe.arrive);
    free(ids);
    if (a.gaps_f != NULL && fclose(a.gaps_f) != 0 && rc == 0) {
        fprintf(stderr, "nearattn bench arrivals: --gaps %s: %s\n", a.gaps, strerror(errno));
        rc = 1;
    }
    na_bsv_done("bench arrivals", dir, rc);
    return rc;
}
