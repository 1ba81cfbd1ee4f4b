/* cli/bench_peer.c — `nearattn bench e2e --peers --llama-bench PATH`: batch-1
 * decode (tg64) and 512-token prompt processing (pp512) of nearattn's
 * monolithic engine beside llama.cpp's llama-bench on the same GGUF files.
 *
 * Models are generated here (common/genmodel.h, GGUF in each weight dtype):
 * the 15M shape (dim 288, hidden 768, 6 layers, 6 heads, vocab 32000) and a
 * 110M-class shape (dim 768, hidden 2048, 12 layers, 12 heads, vocab 32000).
 * For every shape x dtype x threads, --reps pairs in ABBA order: nearattn
 * (in this process: a 512-token prompt for pp, then one token generating 64
 * for tg, as llama-bench's pp512 / tg64 do) and `llama-bench -m F -t T -p
 * 512 -n 64 -r 1 -o csv`, the first of a pair alternating (on these VMs what
 * runs right after a 2-thread burst is slower); each row is nearattn's median beside the peer's
 * median, ratio >= 1 meaning nearattn is faster. Without --llama-bench the
 * peer columns are empty and a note says so. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/e2e_sweep.h"
#include "common/genmodel.h"
#include "common/model.h"
#include "compute-node/engine.h"
#include "compute-node/generate.h"

#define PR_MAX_REPS 9
#define PR_PP       512
#define PR_TG       64
#define PR_PEER_S   600

typedef struct {
    const char *llama_bench;
    int         shapes;          /* bit 0: 15M, bit 1: 110M */
    int         dtypes;          /* bit per na_dtype_t */
    int         threads[4], n_threads;
    int         reps;
    const char *models;          /* --models: GGUF files to bench instead, comma-separated */
} pr_args_t;

static void pr_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn bench e2e --peers [--llama-bench PATH] [--shapes 15m,110m]\n"
        "                          [--dtypes f32,f16,bf16,q8_0] [--threads-list 1,2]\n"
        "                          [--reps N] [--models F,F...] [--json FILE] [--quick]\n\n"
        "Batch-1 decode (tg64) and 512-token prompt processing (pp512) of the monolithic\n"
        "engine beside llama.cpp's llama-bench on the same generated GGUF files: the 15M\n"
        "shape (dim 288, 6 layers) and a 110M-class shape (dim 768, 12 layers), every\n"
        "weight dtype, 1 and 2 threads; pairs in ABBA order, medians (ratio >= 1: nearattn\n"
        "faster). llama.cpp is built outside this repository (docs/benchmarks.md).\n\n"
        "  --llama-bench PATH  the peer (without it: nearattn's figures only)\n"
        "  --shapes LIST       15m and/or 110m (default both; --quick: 15m)\n"
        "  --dtypes LIST       weight dtypes (default f32,f16,bf16,q8_0)\n"
        "  --threads-list LIST thread counts (default 1,2)\n"
        "  --reps N            pairs per row, ABBA order (default 4; --quick: 1)\n"
        "  --models LIST       bench these GGUF files (comma-separated) instead of the\n"
        "                      generated shapes (e.g. gen-model --dtype q4_k_m files)\n"
        "  --json FILE         also write the results as JSON\n"
        "  --quick             15m only, one pair\n");
}

/* Comma list of names into a bit set; -1 on an unknown one. */
static int pr_bits(const char *s, const char *const *names, int n)
{
    int bits = 0;
    while (*s) {
        size_t len = strcspn(s, ",");
        int i, hit = 0;
        for (i = 0; i < n; i++)
            if (strlen(names[i]) == len && !strncmp(s, names[i], len)) {
                bits |= 1 << i;
                hit = 1;
            }
        if (!hit)
            return -1;
        s += len + (s[len] == ',');
    }
    return bits;
}

/* Column col of CSV line row (fields may be quoted); copies into out. */
static int pr_csv_field(const char *row, int col, char *out, size_t cap)
{
    int c = 0;
    while (*row) {
        const char *start = row;
        size_t len;
        int q = *row == '"';
        if (q) {
            start = ++row;
            while (*row && *row != '"')
                row++;
            len = (size_t)(row - start);
            if (*row == '"')
                row++;
        } else {
            while (*row && *row != ',')
                row++;
            len = (size_t)(row - start);
        }
        if (c == col) {
            snprintf(out, cap, "%.*s", (int)len, start);
            return 0;
        }
        if (*row == ',')
            row++;
        c++;
    }
    return -1;
}

static int pr_csv_col(const char *hdr, const char *name)
{
    char f[64];
    int c;
    for (c = 0; pr_csv_field(hdr, c, f, sizeof(f)) == 0; c++)
        if (!strcmp(f, name))
            return c;
    return -1;
}

/* One llama-bench run: its pp512 and tg64 tokens/s (0 when absent). */
static int pr_peer(const char *exe, const char *gguf, int threads, double *pp, double *tg)
{
    char out[16384], th[16], np[16], ng[16], *save = NULL, *hdr, *row;
    char *argv[] = { (char *)exe, "-m", (char *)gguf, "-t", th, "-p", np, "-n", ng, "-r", "1",
                     "-o", "csv", NULL };
    int cp, cg, ct;

    snprintf(th, sizeof(th), "%d", threads);
    snprintf(np, sizeof(np), "%d", PR_PP);
    snprintf(ng, sizeof(ng), "%d", PR_TG);
    *pp = *tg = 0;
    if (na_e2e_run_capture(NULL, argv, out, sizeof(out), PR_PEER_S) != 0)
        return -1;
    hdr = strtok_r(out, "\n", &save);
    if (hdr == NULL || (cp = pr_csv_col(hdr, "n_prompt")) < 0 ||
        (cg = pr_csv_col(hdr, "n_gen")) < 0 || (ct = pr_csv_col(hdr, "avg_ts")) < 0)
        return -1;
    while ((row = strtok_r(NULL, "\n", &save)) != NULL) {
        char a[32], b[32], t[32];
        if (pr_csv_field(row, cp, a, sizeof(a)) || pr_csv_field(row, cg, b, sizeof(b)) ||
            pr_csv_field(row, ct, t, sizeof(t)))
            continue;
        if (atoi(a) == PR_PP && atoi(b) == 0)
            *pp = atof(t);
        else if (atoi(a) == 0 && atoi(b) == PR_TG)
            *tg = atof(t);
    }
    return *pp > 0 && *tg > 0 ? 0 : -1;
}

/* Bytes of weights one decode token reads: every layer matrix and the
 * classifier (the embedding when tied), in their file dtypes; vectors
 * (norms, biases) are left out, and an untied embedding (one row read). */
static double pr_decode_bytes(const na_model_t *m)
{
    double b = 0;
    int l;
    for (l = 0; l < m->cfg.n_layers; l++) {
        const na_tensor_t *t[7] = { &m->layers[l].wq, &m->layers[l].wk, &m->layers[l].wv,
                                    &m->layers[l].wo, &m->layers[l].w1, &m->layers[l].w2,
                                    &m->layers[l].w3 };
        int k;
        for (k = 0; k < 7; k++)
            b += (double)na_dtype_bytes(t[k]->dtype, (size_t)t[k]->rows * (size_t)t[k]->cols);
    }
    return b + (double)na_dtype_bytes(m->output.dtype,
                                      (size_t)m->output.rows * (size_t)m->output.cols);
}

/* nearattn, in this process: pp = 512 prompt tokens / prefill time; tg = 64
 * decode tokens / decode time after a one-token prompt. */
static na_status_t pr_ours(na_model_t *m, int threads, double *pp, double *tg)
{
    na_engine_opts_t eo = { "cpu", threads, NA_DTYPE_F16, 0 };
    na_sampler_cfg_t sc = { 0.0f, 1.0f, 1 };
    na_engine_t *e = NULL;
    na_request_t *r = NULL;
    na_gen_opts_t go;
    na_gen_stats_t gs;
    int toks[PR_PP], i;
    na_status_t st;

    for (i = 0; i < PR_PP; i++)
        toks[i] = i == 0 ? 1 : 3 + (i * 7919) % (m->cfg.vocab_size - 3);
    memset(&go, 0, sizeof(go));
    st = na_engine_create(m, &eo, &e);
    if (st == NA_OK)
        st = na_request_create(e, 0, toks, PR_PP, 1, &sc, &r);
    if (st == NA_OK)
        st = na_generate(e, &r, 1, &go, &gs);
    *pp = st == NA_OK && gs.prefill_s > 0 ? PR_PP / gs.prefill_s : 0;
    na_request_destroy(r);
    r = NULL;
    if (st == NA_OK)
        st = na_request_create(e, 1, toks, 1, PR_TG + 1, &sc, &r);
    if (st == NA_OK)
        st = na_generate(e, &r, 1, &go, &gs);
    *tg = st == NA_OK && gs.decode_s > 0 ? (double)gs.decode_tokens / gs.decode_s : 0;
    na_request_destroy(r);
    na_engine_destroy(e);
    return st;
}

static int pr_own(void *ctx, int argc, char **argv, int *i)
{
    static const char *const shapes[] = { "15m", "110m" };
    static const char *const dts[] = { "f32", "f16", "bf16", "q8_0" };
    pr_args_t *a = ctx;
    const char *f = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;

    if (!strcmp(f, "--peers"))
        return 1;
    if (v == NULL)
        return 0;
    if (!strcmp(f, "--llama-bench")) {
        a->llama_bench = v;
    } else if (!strcmp(f, "--shapes")) {
        if ((a->shapes = pr_bits(v, shapes, 2)) <= 0) {
            fprintf(stderr, "nearattn bench e2e --peers: --shapes expects 15m and/or 110m\n");
            return 2;
        }
    } else if (!strcmp(f, "--dtypes")) {
        int b = pr_bits(v, dts, 4);
        if (b <= 0) {
            fprintf(stderr, "nearattn bench e2e --peers: --dtypes expects f32, f16, bf16, q8_0\n");
            return 2;
        }
        /* bit i of dts -> the na_dtype_t */
        a->dtypes = ((b & 1) ? 1 << NA_DTYPE_F32 : 0) | ((b & 2) ? 1 << NA_DTYPE_F16 : 0) |
                    ((b & 4) ? 1 << NA_DTYPE_BF16 : 0) | ((b & 8) ? 1 << NA_DTYPE_Q8_0 : 0);
    } else if (!strcmp(f, "--threads-list")) {
        const char *s = v;
        a->n_threads = 0;
        while (*s && a->n_threads < 4) {
            char *end;
            long t = strtol(s, &end, 10);
            if (end == s || t < 1 || t > 256 || (*end && *end != ',')) {
                fprintf(stderr, "nearattn bench e2e --peers: --threads-list expects counts "
                        "like 1,2\n");
                return 2;
            }
            a->threads[a->n_threads++] = (int)t;
            s = *end ? end + 1 : end;
        }
    } else if (!strcmp(f, "--models")) {
        a->models = v;
    } else if (!strcmp(f, "--reps")) {
        long r;
        if (na_cli_int("bench e2e --peers", f, v, 1, PR_MAX_REPS, &r) != NA_OK)
            return 2;
        a->reps = (int)r;
    } else {
        return 0;
    }
    ++*i;
    return 1;
}

/* The rows of one model (label, dtname: how the rows name it): every thread
 * count, a->reps pairs in ABBA order. -1 when nearattn failed (said). */
static int pr_rows(na_bench_t *b, const pr_args_t *a, na_model_t *m, const char *path,
                   const char *label, const char *dtname)
{
    char name[160], ref[96];
    int ti, k;

    for (ti = 0; ti < a->n_threads; ti++) {
        double opp[PR_MAX_REPS], otg[PR_MAX_REPS], ppp[PR_MAX_REPS], ptg[PR_MAX_REPS];
        double mpp, mtg, spp, stg;
        int np = 0, t = a->threads[ti];
        for (k = 0; k < a->reps; k++) {
            /* ABBA order: what runs right after a 2-thread burst of the
             * other is slower on these VMs, so neither always goes second */
            if (k % 2 == 1 && a->llama_bench != NULL &&
                pr_peer(a->llama_bench, path, t, &ppp[np], &ptg[np]) == 0)
                np++;
            if (pr_ours(m, t, &opp[k], &otg[k]) != NA_OK) {
                na_cli_fail("bench e2e --peers", NA_ERR_INTERNAL);
                return -1;
            }
            if (k % 2 == 0 && a->llama_bench != NULL &&
                pr_peer(a->llama_bench, path, t, &ppp[np], &ptg[np]) == 0)
                np++;
        }
        spp = na_bench_spread(opp, a->reps);
        stg = na_bench_spread(otg, a->reps);
        mpp = na_bench_median(opp, a->reps);
        mtg = na_bench_median(otg, a->reps);
        snprintf(name, sizeof(name), "decode b=1 %s %s t=%d (tg%d)", label,
                 dtname, t, PR_TG);
        snprintf(ref, sizeof(ref), "llama-bench tg%d t=%d", PR_TG, t);
        na_bench_add(b, name, mtg, "tok/s", stg, np ? ref : NULL,
                     np ? na_bench_median(ptg, np) : 0);
        snprintf(name, sizeof(name), "prompt %s %s t=%d (pp%d)", label,
                 dtname, t, PR_PP);
        snprintf(ref, sizeof(ref), "llama-bench pp%d t=%d", PR_PP, t);
        na_bench_add(b, name, mpp, "tok/s", spp, np ? ref : NULL,
                     np ? na_bench_median(ppp, np) : 0);
        {   /* decode reads every weight once a token: beside the copy
             * bandwidth of the same thread count, measured now */
            double gbs = 0, csp = 0;
            if (na_bench_stream_copy(t, (size_t)256 << 20, 5, &gbs, &csp) == NA_OK) {
                snprintf(name, sizeof(name), "decode weight read %s %s t=%d (%.0f MB x tg)",
                         label, dtname, t, pr_decode_bytes(m) / 1e6);
                snprintf(ref, sizeof(ref), "copy t=%d (in-run)", t);
                na_bench_add(b, name, pr_decode_bytes(m) * mtg / 1e9, "GB/s", stg, ref, gbs);
            }
        }
        if (a->llama_bench != NULL && np < a->reps)
            na_bench_note(b, "llama-bench failed %d of %d runs on %s %s t=%d",
                          a->reps - np, a->reps, label, dtname, t);
    }
    return 0;
}

int na_cli_e2e_peers(int argc, char **argv)
{
    static const struct { const char *name; int dim, hidden, layers, heads; } shp[2] = {
        { "15M", 288, 768, 6, 6 }, { "110M", 768, 2048, 12, 12 },
    };
    pr_args_t a = { NULL, 0, 0, { 1, 2 }, 2, 0, NULL };
    na_cli_bench_opts_t o;
    na_bench_t *b = NULL;
    char dir[512], prefix[600], path[620];
    int rc, s, dt;

    rc = na_cli_bench_parse("e2e", argc, argv, &o, pr_usage, pr_own, &a);
    if (rc >= 0)
        return rc;
    if (a.shapes == 0)
        a.shapes = o.quick ? 1 : 3;
    if (a.dtypes == 0)
        a.dtypes = (1 << NA_DTYPE_F32) | (1 << NA_DTYPE_F16) | (1 << NA_DTYPE_BF16) |
                   (1 << NA_DTYPE_Q8_0);
    if (a.reps == 0)
        a.reps = o.quick ? 1 : 4;
    if (a.llama_bench != NULL && access(a.llama_bench, X_OK) != 0) {
        fprintf(stderr, "nearattn bench e2e --peers: --llama-bench %s: %s\n", a.llama_bench,
                strerror(errno));
        return 2;
    }
    if (na_cli_bench_dir("bench e2e --peers", "peers", dir, sizeof(dir)) != 0)
        return 1;
    rc = 1;
    if (na_bench_create("e2e-peers", &b) != NA_OK)
        goto out;
    if (a.models != NULL) {                 /* the given files, in order */
        char list[4096], *tok, *save = NULL;
        snprintf(list, sizeof(list), "%s", a.models);
        for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            na_model_t *m = NULL;
            const char *base = strrchr(tok, '/');
            if (na_model_open(tok, &m) != NA_OK) {
                na_cli_fail("bench e2e --peers", NA_ERR_IO);
                goto out;
            }
            fprintf(stderr, "bench e2e --peers: %s ...\n", tok);
            if (pr_rows(b, &a, m, tok, base ? base + 1 : tok,
                        na_dtype_name(m->layers[0].wq.dtype)) != 0) {
                na_model_destroy(m);
                goto out;
            }
            na_model_destroy(m);
        }
        a.shapes = 0;
    }
    for (s = 0; s < 2; s++) {
        if (!(a.shapes & (1 << s)))
            continue;
        for (dt = 0; dt < NA_DTYPE_COUNT; dt++) {
            na_genmodel_opts_t go;
            na_model_t *m = NULL;

            if (!(a.dtypes & (1 << dt)))
                continue;
            na_genmodel_shape(&go, shp[s].dim, shp[s].hidden, shp[s].layers, shp[s].heads,
                              shp[s].heads, 32000, 1024);
            go.dtype = (na_dtype_t)dt;
            go.write_llama2c = 0;
            go.write_gguf = 1;
            snprintf(prefix, sizeof(prefix), "%s/m%s-%s", dir, shp[s].name, na_dtype_name(go.dtype));
            snprintf(path, sizeof(path), "%s.gguf", prefix);
            fprintf(stderr, "bench e2e --peers: %s %s ...\n", shp[s].name, na_dtype_name(go.dtype));
            if (na_genmodel_write(prefix, &go) != NA_OK || na_model_open(path, &m) != NA_OK) {
                na_cli_fail("bench e2e --peers", NA_ERR_IO);
                goto out;
            }
            if (pr_rows(b, &a, m, path, shp[s].name, na_dtype_name(go.dtype)) != 0) {
                na_model_destroy(m);
                goto out;
            }
            na_model_destroy(m);
            unlink(path);
        }
    }
    if (a.llama_bench == NULL)
        na_bench_note(b, "skipped: peer llama.cpp llama-bench: not given (--llama-bench PATH)");
    na_bench_note(b, "%s, greedy; nearattn: monolithic engine, backend cpu, f16 KV, in this "
                  "process; pp = 512-token prompt / prefill time, tg = %d tokens after a 1-token "
                  "prompt / decode time; %d pair(s) per row in ABBA order, medians; ratio >= "
                  "100%%: nearattn faster", a.models != NULL ? "the GGUF files given (--models)" :
                  "generated GGUF models (vocab 32000, MHA)", PR_TG, a.reps);
    rc = na_cli_bench_finish("e2e", b, &o);
out:
    na_bench_destroy(b);
    if (rmdir(dir) != 0)
        fprintf(stderr, "nearattn bench e2e --peers: cannot remove %s: %s\n", dir, strerror(errno));
    return rc;
}
