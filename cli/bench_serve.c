/* cli/bench_serve.c — `nearattn bench serve`: the cost of serving over HTTP.
 *
 * Starts `nearattn serve --port 0` (cluster/proc.h: the one fork/exec) with
 * the given layout / model / mode, reads its READY line, waits for /health,
 * then for each concurrency C (1, 2, 4, ..., 64 by default) sends R greedy
 * streamed completions (cli/bench_serve_http.c: libcurl multi, C in flight)
 * and reports:
 *   throughput    completion tokens / wall time of the level, beside
 *                 `nearattn run --batch C` on the same prompts, greedy, in one
 *                 process (its own "tok/s overall": the generation without
 *                 start-up), ratio = serve / run
 *   TTFT          p50 / p90 / p99 of the time from sending a request to its
 *                 first text chunk
 *   ITL           p50 / p90 / p99 of the gaps between successive text chunks
 *   CPU per token the started server's user + system time over the level /
 *                 its completion tokens (hardly moved by a shared machine's
 *                 load, unlike the wall times)
 * `--url` benches a server that is already running (no start, no stop).
 * `--peer URL` drives another OpenAI-compatible server (llama-server, or a
 * second `nearattn serve`) with the same client, prompts, max_tokens and
 * concurrency, pairs alternated (serve first, then the peer first, ...), and
 * sets serve's throughput, ITL p50 / p99 and TTFT p50 beside the peer's
 * (ratio = serve / peer: above 1 is better for throughput, below 1 for
 * latencies). */
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

#define BS_MAX_LEVELS 16
#define BS_MAX_REPS   9

typedef struct {
    na_bsv_args_t srv;          /* the servers: layout, model, mode, --url, --peer, keys */
    int         reps;           /* pairs per level (0: 2 with --peer, else 1; --quick 1) */
    int         peer_pid;       /* --peer-pid: the peer's process, for its CPU time (0: none) */
    int         levels[BS_MAX_LEVELS], n_levels;
    int         requests;       /* per level; 0: max(16, 4 C), --quick max(8, 2 C) */
    int         max_tokens;     /* 0: 128, --quick 16 */
    int         no_run;         /* --no-run: skip the `nearattn run` reference */
    char        threads[16];    /* --threads of serve and run (the bench's --threads) */
} bs_args_t;

static void bs_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn bench serve [--config F] [--model F] [--mode M] [--url URL]\n"
        "                            [--concurrency LIST] [--requests N] [--max-tokens N]\n"
        "                            [--api-key-file F] [--no-run] [--peer URL]\n"
        "                            [--peer-api-key-file F] [--peer-pid PID] [--reps N]\n"
        "                            [options]\n\n"
        "Serving over HTTP against generation in one process. Starts `nearattn serve`\n"
        "(the given layout, model and mode) on a free loopback port and, at each\n"
        "concurrency C, sends N greedy streamed completions with C in flight:\n"
        "throughput (completion tokens/s) beside `nearattn run --batch C` on the same\n"
        "prompts (ratio = serve/run: the cost of serving), and the time to first token\n"
        "(TTFT) and inter-token latency (ITL) p50/p90/p99.\n\n"
        "  --config F         layout for serve and run (default: theirs)\n"
        "  --model F          model for serve and run (default: theirs)\n"
        "  --mode M           offload, monolithic or kv-fetch (default: theirs)\n"
        "  --url URL          bench a running server (http://HOST:PORT) instead of starting\n"
        "                     one; run still uses --config/--model/--mode\n"
        "  --concurrency L    comma-separated levels (default 1,2,4,8,16,32,64; --quick 1,4)\n"
        "  --requests N       requests per level (default max(16, 4 x C); --quick\n"
        "                     max(8, 2 x C))\n"
        "  --max-tokens N     new tokens per request (default 128; --quick 16)\n"
        "  --api-key-file F   the server's bearer key (a started server gets it too)\n"
        "  --no-run           skip the `nearattn run` reference\n"
        "  --ready-timeout S  seconds to wait for the server's /health (default 120)\n"
        "  --peer URL         also drive this OpenAI-compatible server (llama-server, or\n"
        "                     another nearattn serve; already running, http://HOST:PORT)\n"
        "                     with the same prompts, max_tokens and concurrency, and set\n"
        "                     serve's throughput, ITL p50/p99 and TTFT p50 beside its\n"
        "                     (ratio serve/peer); the two alternate, serve first in even\n"
        "                     pairs, the peer first in odd ones\n"
        "  --peer-api-key-file F  the peer's bearer key\n"
        "  --peer-pid PID     the peer's process: its CPU time per completion token is\n"
        "                     set beside serve's (a started serve's is always given)\n"
        "  --reps N           measurements of each server per level, medians (default 1;\n"
        "                     with --peer 2, --quick 1; at most 9)\n"
        NA_CLI_BENCH_OPTS_HELP);
}

/* Append the layout/model/mode/threads flags of a to argv at *k. */
static void bs_common_argv(const bs_args_t *a, char **argv, int *k)
{
    argv[(*k)++] = "--threads";
    argv[(*k)++] = (char *)a->threads;
    if (a->srv.config != NULL) {
        argv[(*k)++] = "--config";
        argv[(*k)++] = (char *)a->srv.config;
    }
    if (a->srv.model != NULL) {
        argv[(*k)++] = "--model";
        argv[(*k)++] = (char *)a->srv.model;
    }
    if (a->srv.mode != NULL) {
        argv[(*k)++] = "--mode";
        argv[(*k)++] = (char *)a->srv.mode;
    }
}

/* `exe run --prompts file -n N --temp 0 --batch C ...`: its generation
 * tok/s (the offload summary's "tok/s overall"; monolithic: generated
 * tokens over prefill + decode time from its rates), 0 when it failed. */
static double bs_run_ref(const bs_args_t *a, const char *exe, const char *prompts, int n_req,
                         int max_tokens, int c, const char *log)
{
    char ns[16], cs[16], *argv[24], line[1024];
    na_proc_opts_t po = { argv, log, 1, NULL, NULL };
    long pt = 0, gt = 0;
    double v = 0, pre = 0, dec = 0;
    int k = 0, status = 0;
    pid_t pid;
    FILE *f;

    snprintf(ns, sizeof(ns), "%d", max_tokens);
    snprintf(cs, sizeof(cs), "%d", c);
    argv[k++] = (char *)exe;
    argv[k++] = "run";
    argv[k++] = "--prompts";
    argv[k++] = (char *)prompts;
    argv[k++] = "-n";
    argv[k++] = ns;
    argv[k++] = "--temp";
    argv[k++] = "0";
    argv[k++] = "--batch";
    argv[k++] = cs;
    bs_common_argv(a, argv, &k);
    argv[k] = NULL;
    if (na_proc_spawn(&po, &pid) != NA_OK || waitpid(pid, &status, 0) != pid ||
        !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 0;
    f = fopen(log, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        const char *g = strstr(line, "generated tokens ");
        if (g == NULL)
            continue;
        if (sscanf(g, "generated tokens %ld, %lf tok/s overall", &gt, &v) == 2)
            break;
        if (sscanf(line, "prompt tokens %ld, generated tokens %ld, prefill %lf tok/s, decode "
                   "%lf tok/s", &pt, &gt, &pre, &dec) == 4 && pre > 0 && dec > 0) {
            long dt = gt - n_req;              /* the first token of each comes with prefill */
            v = (double)gt / ((double)pt / pre + (double)(dt > 0 ? dt : 0) / dec);
            break;
        }
    }
    if (f != NULL)
        fclose(f);
    return v;
}

/* Requests of level c: --requests, else max(16, 4c) (--quick: max(8, 2c)). */
static int bs_requests(const bs_args_t *a, int quick, int c)
{
    int k = quick ? 2 : 4, lo = quick ? 8 : 16;
    return a->requests > 0 ? a->requests : k * c > lo ? k * c : lo;
}

/* One server's measurements of a level over its reps: the throughput of
 * each, the TTFT / ITL samples and failures of all together. */
typedef struct {
    double          tps[BS_MAX_REPS];
    int             n;
    na_bsh_result_t all;
    double          cpu_s;          /* the server's CPU time over the reps; < 0: unknown */
} bs_side_t;

/* CPU time (user + system, all threads) of process pid so far, in seconds;
 * -1 when it cannot be read (no such process, pid <= 0). */
static double bs_cpu_s(long pid)
{
    char path[64], buf[1024], *p;
    unsigned long long ut, st;
    size_t n;
    FILE *f;

    if (pid <= 0)
        return -1;
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')');            /* the name may hold spaces: fields after its ')' */
    /* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (p == NULL || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                            &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Append r's samples to a (grown) pool; -1 out of memory. */
static int bs_cat(double **dst, long *n_dst, const double *src, long n)
{
    double *p;

    if (n == 0)
        return 0;
    p = realloc(*dst, (size_t)(*n_dst + n) * sizeof(double));
    if (p == NULL)
        return -1;
    memcpy(p + *n_dst, src, (size_t)n * sizeof(double));
    *dst = p;
    *n_dst += n;
    return 0;
}

/* Take the figures of one measurement r into side. NA_ERR_NOMEM. */
static na_status_t bs_side_add(bs_side_t *side, const na_bsh_result_t *r)
{
    na_bsh_result_t *a = &side->all;

    side->tps[side->n++] = r->wall_s > 0 ? (double)r->tokens / r->wall_s : 0;
    if (bs_cat(&a->ttft, &a->n_ttft, r->ttft, r->n_ttft) != 0 ||
        bs_cat(&a->itl, &a->n_itl, r->itl, r->n_itl) != 0)
        return na_err(NA_ERR_NOMEM, "bench serve: out of memory for the latencies");
    a->requests += r->requests;
    a->failed += r->failed;
    a->tokens += r->tokens;
    a->prompt_said += r->prompt_said;
    a->prompt_tokens += r->prompt_tokens;
    a->prompt_computed += r->prompt_computed;
    a->wall_s += r->wall_s;
    if (a->first_error[0] == '\0')
        memcpy(a->first_error, r->first_error, sizeof(a->first_error));
    return NA_OK;
}

/* Median throughput of side (its spread into *spread). */
static double bs_side_tps(const bs_side_t *side, double *spread)
{
    double v[BS_MAX_REPS];

    memcpy(v, side->tps, (size_t)side->n * sizeof(double));
    *spread = na_bench_spread(v, side->n);
    return na_bench_median(v, side->n);
}

/* The figures of level c into b: serve's, beside run's throughput and,
 * with a peer, beside the peer's. */
static void bs_report(na_bench_t *b, int c, bs_side_t *sv, double run, bs_side_t *peer)
{
    static const double pct[] = { 50, 90, 99 };
    na_bsh_result_t *r = &sv->all;
    char name[96];
    double spread, pspread, tps = bs_side_tps(sv, &spread);
    int i;

    snprintf(name, sizeof(name), "c=%d serve throughput", c);
    na_bench_add(b, name, tps, "tok/s", spread, run > 0 ? "nearattn run (one process)" : NULL,
                 run);
    for (i = 0; i < 3; i++) {
        snprintf(name, sizeof(name), "c=%d TTFT p%.0f", c, pct[i]);
        na_bench_add(b, name, 1e3 * na_bench_percentile(r->ttft, r->n_ttft, pct[i]), "ms", 0,
                     NULL, 0);
    }
    for (i = 0; i < 3; i++) {
        snprintf(name, sizeof(name), "c=%d ITL p%.0f", c, pct[i]);
        na_bench_add(b, name, 1e3 * na_bench_percentile(r->itl, r->n_itl, pct[i]), "ms", 0,
                     NULL, 0);
    }
    if (r->failed > 0)
        na_bench_note(b, "c=%d: %ld of %ld requests failed (first: %s)", c, r->failed,
                      r->requests, r->first_error);
    if (sv->cpu_s >= 0 && r->tokens > 0) {
        int pk = peer != NULL && peer->cpu_s >= 0 && peer->all.tokens > 0;
        snprintf(name, sizeof(name), "c=%d serve CPU per token", c);
        na_bench_add(b, name, 1e3 * sv->cpu_s / (double)r->tokens, "ms", 0,
                     pk ? "peer" : NULL, pk ? 1e3 * peer->cpu_s / (double)peer->all.tokens : 0);
    }
    if (peer == NULL)
        return;
    snprintf(name, sizeof(name), "c=%d serve vs peer throughput", c);
    na_bench_add(b, name, tps, "tok/s", spread, "peer", bs_side_tps(peer, &pspread));
    snprintf(name, sizeof(name), "c=%d serve vs peer ITL p50", c);
    na_bench_add(b, name, 1e3 * na_bench_percentile(r->itl, r->n_itl, 50), "ms", 0, "peer",
                 1e3 * na_bench_percentile(peer->all.itl, peer->all.n_itl, 50));
    snprintf(name, sizeof(name), "c=%d serve vs peer ITL p99", c);
    na_bench_add(b, name, 1e3 * na_bench_percentile(r->itl, r->n_itl, 99), "ms", 0, "peer",
                 1e3 * na_bench_percentile(peer->all.itl, peer->all.n_itl, 99));
    snprintf(name, sizeof(name), "c=%d serve vs peer TTFT p50", c);
    na_bench_add(b, name, 1e3 * na_bench_percentile(r->ttft, r->n_ttft, 50), "ms", 0, "peer",
                 1e3 * na_bench_percentile(peer->all.ttft, peer->all.n_ttft, 50));
    if (r->prompt_said > 0 && peer->all.prompt_said > 0) {
        /* a prompt cache (llama-server's slots reuse any common prefix, serve's
         * prefix reuse whole KV blocks) shortens the TTFT of the requests it
         * serves: how many prompt tokens each server computed */
        snprintf(name, sizeof(name), "c=%d prompt tokens computed per request", c);
        na_bench_add(b, name, (double)r->prompt_computed / (double)r->prompt_said, "tok", 0,
                     "peer", (double)peer->all.prompt_computed / (double)peer->all.prompt_said);
        na_bench_note(b, "c=%d: prompt tokens per request %.1f (serve), %.1f (peer); computed "
                      "%.1f and %.1f, the rest came from each server's prompt cache", c,
                      (double)r->prompt_tokens / (double)r->prompt_said,
                      (double)peer->all.prompt_tokens / (double)peer->all.prompt_said,
                      (double)r->prompt_computed / (double)r->prompt_said,
                      (double)peer->all.prompt_computed / (double)peer->all.prompt_said);
    }
    if (peer->all.failed > 0)
        na_bench_note(b, "c=%d: %ld of %ld requests to the peer failed (first: %s)", c,
                      peer->all.failed, peer->all.requests, peer->all.first_error);
}

/* Drive one server (o; its process pid, 0 if unknown) with n prompts, c in
 * flight, into side. */
static na_status_t bs_measure(const na_bsh_opts_t *o, long pid, char *const *texts, int n,
                              int c, bs_side_t *side)
{
    na_bsh_result_t r;
    double c0 = bs_cpu_s(pid), c1;
    na_status_t st = na_bsh_drive(o, texts, n, c, &r);

    c1 = bs_cpu_s(pid);
    if (c0 < 0 || c1 < 0 || side->cpu_s < 0)
        side->cpu_s = -1;
    else
        side->cpu_s += c1 - c0;
    if (st == NA_OK)
        st = bs_side_add(side, &r);
    na_bsh_result_free(&r);
    return st;
}

int na_cli_bench_serve(int argc, char **argv)
{
    static const int full[] = { 1, 2, 4, 8, 16, 32, 64 }, quick[] = { 1, 4 };
    bs_args_t a = { .srv.ready_s = 120 };
    na_cli_bench_opts_t o;
    na_bsh_opts_t ho, po;
    na_bench_t *b = NULL;
    char exe[4096], dir[512], log[600], prompts[600], model[256], pmodel[256];
    na_bsv_t sr;
    char **texts = NULL;
    const char *tmp = getenv("TMPDIR");
    int rc, i, j, k, n_max = 0;
    FILE *f;
    const na_cli_num_t num[] = {
        { "--requests", 1, 1 << 20, &a.requests }, { "--max-tokens", 1, 1 << 20, &a.max_tokens },
        { "--ready-timeout", 1, 1 << 20, &a.srv.ready_s }, { "--reps", 1, BS_MAX_REPS, &a.reps },
        { "--peer-pid", 1, 1L << 30, &a.peer_pid },
    };
    const na_cli_list_opt_t list[] = {
        { "--concurrency", 1, 1024, a.levels, BS_MAX_LEVELS, &a.n_levels, 0 },
    };
    const na_cli_switch_t sw[] = { { "--no-run", &a.no_run, 1 } };
    const na_cli_bench_own_t own = { .num = num, .n_num = sizeof(num) / sizeof(num[0]),
                                     .list = list, .n_list = sizeof(list) / sizeof(list[0]),
                                     .sw = sw, .n_sw = 1, .own = na_bsv_opt, .ctx = &a.srv };

    rc = na_cli_bench_parse("serve", argc, argv, &o, bs_usage, &own);
    if (rc >= 0)
        return rc;
    if (a.n_levels == 0) {
        a.n_levels = o.quick ? 2 : 7;
        memcpy(a.levels, o.quick ? quick : full, (size_t)a.n_levels * sizeof(int));
    }
    if (a.max_tokens == 0)
        a.max_tokens = o.quick ? 16 : 128;
    snprintf(a.threads, sizeof(a.threads), "%d", o.threads);
    if (a.reps == 0)
        a.reps = a.srv.peer != NULL && !o.quick ? 2 : 1;
    if (na_bsv_keys("bench serve", &a.srv, &sr) != 0)
        return 1;
    if (na_proc_self_exe(exe, sizeof(exe)) != NA_OK)
        return na_cli_fail("bench serve", NA_ERR_IO);
    snprintf(dir, sizeof(dir), "%s/nearattn-bench-serve-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "nearattn bench serve: mkdtemp %s: %s\n", dir, strerror(errno));
        return 1;
    }
    rc = 1;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "nearattn bench serve: curl_global_init failed\n");
        goto out;
    }
    for (i = 0; i < a.n_levels; i++) {
        int n = bs_requests(&a, o.quick, a.levels[i]);
        n_max = n > n_max ? n : n_max;
    }
    /* the prompts, for serve and (as a file) for run */
    texts = calloc((size_t)n_max, sizeof(*texts));
    snprintf(prompts, sizeof(prompts), "%s/prompts.txt", dir);
    f = fopen(prompts, "w");
    for (i = 0; texts != NULL && f != NULL && i < n_max; i++) {
        static const char *const start[] = { "Once upon a time", "The little dog",
                                             "Lily and Tom went to the park", "One day a bird" };
        if (asprintf(&texts[i], "%s number %d", start[i % 4], i) < 0)
            texts[i] = NULL;
        if (texts[i] == NULL)
            break;
        fprintf(f, "%s\n", texts[i]);
    }
    if (f == NULL || fclose(f) != 0 || texts == NULL || i < n_max) {
        fprintf(stderr, "nearattn bench serve: cannot write %s\n", prompts);
        goto out;
    }
    if (na_bsv_start("bench serve", &a.srv, exe, a.threads, dir, &sr, model, sizeof(model)) != 0)
        goto out;
    if (a.peer_pid > 0 && bs_cpu_s(a.peer_pid) < 0) {
        fprintf(stderr, "nearattn bench serve: --peer-pid %d: no such process (its "
                "/proc/%d/stat cannot be read)\n", a.peer_pid, a.peer_pid);
        goto out;
    }
    if (na_bsv_peer("bench serve", &a.srv, &sr, pmodel, sizeof(pmodel)) != 0)
        goto out;
    if (na_bench_create("serve", &b) != NA_OK)
        goto out;
    ho = (na_bsh_opts_t){ sr.base, sr.key[0] ? sr.key : NULL, model, a.max_tokens, 600 };
    po = (na_bsh_opts_t){ a.srv.peer, sr.pkey[0] ? sr.pkey : NULL, pmodel, a.max_tokens, 600 };
    for (i = 0; i < a.n_levels; i++) {
        int c = a.levels[i], n = bs_requests(&a, o.quick, c);
        bs_side_t sv, pe;
        na_status_t st = NA_OK;
        double run = 0;

        memset(&sv, 0, sizeof(sv));
        memset(&pe, 0, sizeof(pe));
        for (k = 0; k < a.reps && st == NA_OK; k++) {
            /* pairs alternate: serve first, then the peer first (ABBA) */
            int peer_first = a.srv.peer != NULL && (i + k) % 2 == 1;
            fprintf(stderr, "bench serve: concurrency %d, %d requests%s...\n", c, n,
                    a.srv.peer != NULL ? (peer_first ? ", peer then serve" : ", serve then peer")
                                   : "");
            if (peer_first)
                st = bs_measure(&po, a.peer_pid, texts, n, c, &pe);
            if (st == NA_OK)
                st = bs_measure(&ho, sr.pid, texts, n, c, &sv);
            if (st == NA_OK && a.srv.peer != NULL && !peer_first)
                st = bs_measure(&po, a.peer_pid, texts, n, c, &pe);
        }
        if (st != NA_OK) {
            fprintf(stderr, "nearattn bench serve: %s\n", na_errmsg());
            na_bsh_result_free(&sv.all);
            na_bsh_result_free(&pe.all);
            goto out;
        }
        if (!a.no_run) {
            FILE *pf = fopen(prompts, "w");      /* run gets the same n prompts */
            for (j = 0; pf != NULL && j < n; j++)
                fprintf(pf, "%s\n", texts[j]);
            if (pf != NULL)
                fclose(pf);
            snprintf(log, sizeof(log), "%s/run-%d.log", dir, c);
            run = bs_run_ref(&a, exe, prompts, n, a.max_tokens, c, log);
            if (run <= 0)
                na_bench_note(b, "c=%d: nearattn run gave no figure (see %s)", c, log);
        }
        bs_report(b, c, &sv, run, a.srv.peer != NULL ? &pe : NULL);
        na_bsh_result_free(&sv.all);
        na_bsh_result_free(&pe.all);
    }
    na_bench_note(b, "server %s (%s), model \"%s\"; greedy, max_tokens %d, streamed; "
                  "throughput = completion tokens / wall time of the level (median of %d); "
                  "reference = `nearattn run --batch C` on the same prompts, its tok/s "
                  "without start-up", sr.base, a.srv.url != NULL ? "given" : "started here", model,
                  a.max_tokens, a.reps);
    if (sr.pid > 0 || a.peer_pid > 0)
        na_bench_note(b, "CPU per token: the server process's user + system time over the level "
                      "/ its completion tokens (all its threads; storage-node processes not "
                      "counted), load-independent where the wall times are not; the peer's "
                      "with --peer-pid");
    if (a.srv.peer != NULL)
        na_bench_note(b, "peer %s, model \"%s\": the same client, prompts, max_tokens and "
                      "concurrency, alternated with serve; ratio = serve / peer (throughput: "
                      "above 1 serve is faster; ITL and TTFT: below 1 serve is faster)",
                      a.srv.peer, pmodel);
    rc = na_cli_bench_finish("serve", b, &o);
out:
    na_bsv_stop(&sr);
    curl_global_cleanup();
    na_bench_destroy(b);
    for (i = 0; texts != NULL && i < n_max; i++)
        free(texts[i]);
    free(texts);
    na_bsv_done("bench serve", dir, rc);
    return rc;
}
