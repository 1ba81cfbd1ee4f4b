/* cli/bench_prefix.c — `nearattn bench prefix`: prefix reuse
 * (docs/prefix-reuse.md). N requests whose prompts share a P-token prefix
 * (then a few tokens of their own) are run offloaded against one storage
 * node started here, all submitted at once, with prefix reuse on and off:
 * prompt tokens prefilled on the compute node, time to first token (p50,
 * p99, from the submission) and total time, and whether the greedy tokens
 * are the same either way. A generated GQA model (common/genmodel.h), so it
 * runs on any machine. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cluster/setup.h"
#include "common/clock.h"
#include "common/genmodel.h"
#include "common/model.h"
#include "compute-node/engine.h"
#include "compute-node/generate.h"
#include "compute-node/offload.h"

typedef struct {
    int    n_req, prefix, suffix, n_new;
    char   dir[PATH_MAX];
} pb_t;

typedef struct {
    double t0;           /* submission */
    double *first;       /* [n_req] time of each request's first token (0: none yet) */
} pb_ttft_t;

static void pb_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn bench prefix [--requests N] [--prefix P] [--suffix S] [--new K]\n"
        "                             [options]\n\n"
        "Prefix reuse: N requests whose prompts share a P-token prefix (then S tokens\n"
        "of their own) run offloaded against one storage node started here (shared\n"
        "memory), all submitted at once, with prefix reuse on and off: prompt tokens\n"
        "prefilled on the compute node, TTFT p50 / p99 (from the submission), total\n"
        "time, and whether the greedy tokens are identical. Generated GQA model: dim\n"
        "256, 4 layers, 8 q / 2 kv heads, f16 KV, block 16.\n\n"
        "  --requests N   requests (default 64; --quick 16)\n"
        "  --prefix P     shared prompt tokens (default 2000; --quick 500)\n"
        "  --suffix S     each prompt's own tokens after it (default 16)\n"
        "  --new K        tokens generated per request (default 8)\n"
        NA_CLI_BENCH_OPTS_HELP);
}

static void pb_on_token(void *user, const na_request_t *r, int token)
{
    pb_ttft_t *t = user;
    (void)token;
    if (t->first[r->id] == 0)
        t->first[r->id] = na_now_s() - t->t0;
}

static int pb_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pb_pct(const double *sorted, long n, double q)
{
    long i = (long)(q * (double)(n - 1) + 0.5);
    return n > 0 ? sorted[i < n ? i : n - 1] : 0;
}

/* One run: a cluster started here, the requests submitted at once. */
static na_status_t pb_run(const pb_t *c, const char *cfg, na_engine_t *e, const int *prompts,
                          int reuse, int **out, double *ttft, na_off_stats_t *st, double *wall)
{
    na_cluster_opts_t co;
    na_cluster_t *cl = NULL;
    na_request_t **reqs;
    na_off_opts_t oo;
    na_off_t *g = NULL;
    pb_ttft_t t;
    na_status_t s;
    long i, np = c->prefix + c->suffix;
    int stop = -1;

    reqs = calloc((size_t)c->n_req, sizeof(*reqs));
    t.first = ttft;
    if (reqs == NULL)
        return na_err(NA_ERR_NOMEM, "bench prefix: out of memory");
    memset(ttft, 0, sizeof(double) * (size_t)c->n_req);
    for (i = 0, s = NA_OK; i < c->n_req && s == NA_OK; i++) {
        na_sampler_cfg_t sc = { 0.0f, 1.0f, (uint64_t)i + 1 };
        s = na_request_create(e, (int)i, prompts + i * np, (int)np, (int)c->n_new, &sc, &reqs[i]);
    }
    na_cluster_opts_default(&co);
    co.config_path = cfg;
    co.mode = "start";
    if (s == NA_OK)
        s = na_cluster_create(&co, e, &cl);
    memset(&oo, 0, sizeof(oo));
    oo.max_batch = 64;
    oo.batches_in_flight = 1;
    oo.stop_ids = &stop;
    oo.n_stop = 0;
    oo.prefix_reuse = reuse;
    oo.on_token = pb_on_token;
    oo.user = &t;
    if (s == NA_OK)
        s = na_off_create(e, na_cluster_service(cl), &oo, &g);
    t.t0 = na_now_s();
    for (i = 0; i < c->n_req && s == NA_OK; i++)
        s = na_off_submit(g, reqs[i], NULL);
    while (s == NA_OK && na_off_pending(g) > 0)
        s = na_off_progress(g, -1);
    *wall = na_now_s() - t.t0;
    if (g != NULL) {
        na_off_stats(g, st);
        na_off_destroy(g);
    }
    for (i = 0; i < c->n_req; i++) {
        if (s == NA_OK && reqs[i] != NULL && reqs[i]->n_out > 0)
            memcpy(out[i], reqs[i]->out, sizeof(int) * (size_t)reqs[i]->n_out);
        if (s == NA_OK && (reqs[i] == NULL || reqs[i]->n_out != c->n_new))
            s = na_err(NA_ERR_INTERNAL, "bench prefix: request %ld made %d of %d tokens", i,
                       reqs[i] ? reqs[i]->n_out : 0, c->n_new);
        na_request_destroy(reqs[i]);
    }
    free(reqs);
    na_cluster_destroy(cl);
    return s;
}

int na_cli_bench_prefix(int argc, char **argv)
{
    pb_t c;
    const na_cli_bench_dflt_t dflt[] = { { &c.n_req, 16, 64 }, { &c.prefix, 500, 2000 } };
    na_cli_bench_opts_t o;
    na_genmodel_opts_t go;
    na_model_t *m = NULL;
    na_engine_t *e = NULL;
    na_bench_t *b = NULL;
    na_off_stats_t st[2];
    double wall[2], *ttft[2] = { NULL, NULL }, p50[2], p99[2];
    int *prompts = NULL, **out[2] = { NULL, NULL }, rc = 1, same = 1, r;
    char path[PATH_MAX + 64], cfg[PATH_MAX + 64];
    na_engine_opts_t eo;
    na_status_t s = NA_OK;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    long i, j, np;
    FILE *f;
    const na_cli_num_t num[] = {
        { "--requests", 1, 100000, &c.n_req }, { "--prefix", 1, 100000, &c.prefix },
        { "--suffix", 1, 100000, &c.suffix }, { "--new", 1, 100000, &c.n_new },
    };
    const na_cli_bench_own_t own = { .num = num, .n_num = sizeof(num) / sizeof(num[0]) };

    memset(&c, 0, sizeof(c));
    c.suffix = 16;
    c.n_new = 8;
    r = na_cli_bench_parse("prefix", argc, argv, &o, pb_usage, &own);
    if (r >= 0)
        return r;
    na_cli_bench_defaults(&o, dflt, sizeof(dflt) / sizeof(dflt[0]));
    np = c.prefix + c.suffix;
    if (na_cli_bench_dir("bench prefix", "pfx", c.dir, sizeof(c.dir)) != 0)
        return 1;
    na_genmodel_defaults(&go);
    na_genmodel_shape(&go, 256, 512, 4, 8, 2, 512, (int)(np + c.n_new + 8));
    snprintf(path, sizeof(path), "%s/model", c.dir);
    if ((s = na_genmodel_write(path, &go)) != NA_OK)
        goto out;
    snprintf(path, sizeof(path), "%s/pfx.secret", c.dir);
    if ((s = na_cli_write_secret(path)) != NA_OK)
        goto out;
    snprintf(cfg, sizeof(cfg), "%s/pfx.yaml", c.dir);
    f = na_cli_bench_layout(cfg, "prefix", path, c.dir);
    if (f == NULL) {
        s = na_err(NA_ERR_IO, "cannot write %s", cfg);
        goto out;
    }
    fprintf(f, "transport: { tls: shm, timeout_ms: 20000, peer_timeout_ms: 60000 }\n"
               "compute:\n  - { name: c0, host: 127.0.0.1 }\n"
               "storage:\n  - name: s0\n    host: 127.0.0.1\n    port: 1\n    devices:\n"
               "      - { path: \"%s/kv\", dram_mb: %ld, ssd_mb: 1 }\n"
               "parallel: { partition: request, batches_in_flight: 1, max_batch: 64 }\n"
               "kv: { block_tokens: 16, spill_interval: 4, tier: dram, prefix_cache_mb: 256 }\n",
            c.dir, 64 + (c.n_req * (np + c.n_new) * 4 * 2 * 2 * 32 * 2 >> 20) * 2);
    if (fclose(f) != 0) {
        s = na_err(NA_ERR_IO, "cannot write %s", cfg);
        goto out;
    }
    snprintf(path, sizeof(path), "%s/model.bin", c.dir);
    if ((s = na_model_open(path, &m)) != NA_OK)
        goto out;
    eo = (na_engine_opts_t){ "cpu", o.threads, NA_DTYPE_F16, 0 };
    if ((s = na_engine_create(m, &eo, &e)) != NA_OK)
        goto out;
    prompts = malloc(sizeof(int) * (size_t)(c.n_req * np));
    for (r = 0; r < 2; r++) {
        ttft[r] = calloc((size_t)c.n_req, sizeof(double));
        out[r] = calloc((size_t)c.n_req, sizeof(int *));
        for (i = 0; out[r] != NULL && i < c.n_req; i++)
            out[r][i] = calloc((size_t)c.n_new, sizeof(int));
        if (ttft[r] == NULL || out[r] == NULL || (c.n_req > 0 && out[r][c.n_req - 1] == NULL)) {
            s = na_err(NA_ERR_NOMEM, "bench prefix: out of memory");
            goto out;
        }
    }
    if (prompts == NULL) {
        s = na_err(NA_ERR_NOMEM, "bench prefix: out of memory");
        goto out;
    }
    for (j = 0; j < np; j++)            /* the shared prefix, then each request's own tail */
        for (i = 0; i < c.n_req; i++) {
            if (i == 0 || j >= c.prefix)
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            prompts[i * np + j] = 1 + (int)(rng % 511);
        }
    for (r = 0; r < 2 && s == NA_OK; r++) {     /* r = 0: reuse on, 1: off */
        fprintf(stderr, "bench prefix: %d requests, %d + %d prompt tokens, reuse %s ...\n",
                c.n_req, c.prefix, c.suffix, r == 0 ? "on" : "off");
        s = pb_run(&c, cfg, e, prompts, r == 0, out[r], ttft[r], &st[r], &wall[r]);
        if (s == NA_OK) {
            qsort(ttft[r], (size_t)c.n_req, sizeof(double), pb_cmp);
            p50[r] = pb_pct(ttft[r], c.n_req, 0.50);
            p99[r] = pb_pct(ttft[r], c.n_req, 0.99);
        }
    }
    if (s != NA_OK)
        goto out;
    for (i = 0; i < c.n_req; i++)
        if (memcmp(out[0][i], out[1][i], sizeof(int) * (size_t)c.n_new) != 0)
            same = 0;
    if ((s = na_bench_create("prefix", &b)) != NA_OK)
        goto out;
    na_bench_add(b, "prompt tokens prefilled on the compute node, reuse on",
                 (double)st[0].gen.prompt_tokens, "tokens", 0, "reuse off",
                 (double)st[1].gen.prompt_tokens);
    na_bench_add(b, "prompt tokens a storage node held already, reuse on",
                 (double)st[0].prefix_hit_tokens, "tokens", 0, "all prompt tokens",
                 (double)(c.n_req * np));
    na_bench_add(b, "TTFT p50, reuse on", p50[0], "s", 0, "reuse off", p50[1]);
    na_bench_add(b, "TTFT p99, reuse on", p99[0], "s", 0, "reuse off", p99[1]);
    na_bench_add(b, "total time, reuse on", wall[0], "s", 0, "reuse off", wall[1]);
    na_bench_add(b, "prefill compute time, reuse on", st[0].prefill_s, "s", 0, "reuse off",
                 st[1].prefill_s);
    na_bench_add(b, "greedy tokens identical on / off (1 = yes)", same, "", 0, NULL, 0);
    na_bench_note(b, "%d requests submitted at once, prompts of %d shared + %d own tokens, "
                  "%d new tokens each, greedy; generated model dim %d, %d layers, %d q / %d kv "
                  "heads, f16 KV, block 16; one storage node (shared memory, KV in DRAM) started "
                  "per run; max_batch 64, 1 batch in flight; %d compute threads", c.n_req,
                  c.prefix, c.suffix, c.n_new, go.dim, go.n_layers, go.n_heads, go.n_kv_heads,
                  o.threads);
    rc = na_cli_bench_finish("prefix", b, &o);
    if (rc == 0 && !same) {
        fprintf(stderr, "nearattn bench prefix: the greedy tokens differ with reuse on and off\n");
        rc = 1;
    }
out:
    if (s != NA_OK)
        rc = na_cli_fail("bench prefix", s);
    for (r = 0; r < 2; r++) {
        for (i = 0; out[r] != NULL && i < c.n_req; i++)
            free(out[r][i]);
        free(out[r]);
        free(ttft[r]);
    }
    free(prompts);
    na_bench_destroy(b);
    na_engine_destroy(e);
    na_model_destroy(m);
    na_cli_bench_rmdir("bench prefix", c.dir);
    return rc;
}
