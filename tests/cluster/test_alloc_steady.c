/* tests/cluster/test_alloc_steady.c — heap allocations per decode round trip
 * on a running cluster: this process is the compute node (the offload engine
 * over remote attention), one `nearattn node` process started by the
 * cluster library is the storage node, over UCX (argv[2]: shm or tcp).
 *
 * Both processes run with the counting allocator preloaded
 * (tests/tools/alloc_count.h, libna_alloc_count.so = argv[1]): the test
 * execs itself again with LD_PRELOAD set, and the storage node inherits it
 * with its own table. One request decodes at batch 1; after WARM tokens (KV
 * blocks, pools and buffers have grown to their size) the window is opened
 * for WINDOW tokens (a multiple of the KV block), and each side's count is
 * printed per layer round trip (one DECODE_ATTN and its ATTN_OUT), site by
 * site.
 *
 * What it asserts: the compute node allocates nothing in that window but
 * the one allocation this test makes there on purpose (which the counter
 * must see: it is live); the transport and the session layer (rdma/)
 * allocate nothing on the storage node either, and the counter is live
 * there (it counted its start-up allocations).
 *
 * The storage node (its decode path: node_decode.c, slotset.c, the CPU
 * attention engine, the KV store) allocates nothing per round trip: its
 * parts, batches, replies, engine items and jobs, views' block tables and
 * write records come from free lists. What it may still allocate in the
 * window, asserted site by site:
 *   - the KV cache growing: a new block per layer every block_tokens (16)
 *     tokens (stacks through na_kv_append, not through a spill): at most
 *     (WINDOW / 16 + 1) * n_layers;
 *   - the writeback pool reaching its high-water mark (a record and its
 *     bounce buffer per write in flight beyond the most seen before; through
 *     na_kv_spill or na_kv_poll): at most STOR_WB_GROW, two per write the
 *     queue holds (depth 32); 0 to 10 seen in the window;
 *   - nothing else: 0.
 * Before the pools it was 21.5 per round trip (6,900 in the window) on the
 * storage node and 2.0 on the compute node.
 *
 * Skipped (77) in sanitizer builds: ASan owns malloc there. */
#define _GNU_SOURCE 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/setup.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/genmodel.h"
#include "common/model.h"
#include "compute-node/offload.h"
#include "tests/cluster/cluster_util.h"
#include "tests/testutil.h"
#include "tests/tools/alloc_count.h"

#define WARM    40               /* tokens before the window */
#define WINDOW  64               /* tokens in it (4 KV blocks of 16) */
#define MAX_NEW (WARM + WINDOW + 8)
#define STOR_WB_GROW 64          /* writeback pool growth allowed in the window */

static char g_tmp[512];

typedef struct {
    na_ac_shm_t *comp, *stor;
    int          tokens;
    int          opened, closed;
    void        *probe;          /* the deliberate allocation */
    double       t0, t1;         /* when the window opened, closed */
} win_t;

/* The deliberate allocation in the window: a site the report must show. */
__attribute__((noinline)) static void *alloc_probe(void)
{
    void *volatile p = malloc(4321);
    return p;
}

static void w_token(void *user, const na_request_t *r, int t)
{
    win_t *w = user;
    (void)r;
    (void)t;
    w->tokens++;
    if (w->tokens == WARM) {
        na_ac_window(w->stor, 1);
        na_ac_window(w->comp, 1);
        w->opened = w->tokens;
        w->t0 = na_now_s();
        w->probe = alloc_probe();
    } else if (w->tokens == WARM + WINDOW) {
        na_ac_window(w->comp, 0);
        na_ac_window(w->stor, 0);
        w->closed = w->tokens;
        w->t1 = na_now_s();
    }
}

static void w_done(void *user, const na_request_t *r)
{
    (void)user;
    (void)r;
}

static void w_error(void *user, const na_request_t *r, na_status_t st, const char *why)
{
    (void)user;
    (void)r;
    NA_CHECK_MSG(0, "request failed: %s (%s)", na_status_string(st), why ? why : "");
}

static na_status_t load_layout(const char *model, const char *tls, na_cfg_t **cfg_p)
{
    /* heartbeats every 10 ms (the least): the window holds some each way */
    return na_test_layout_cluster(g_tmp, "alloc", 1, 14300, model, tls, 10, 5000, cfg_p,
                                  "parallel: { partition: request, batches_in_flight: 1, "
                                  "max_batch: 1 }\n"
                                  "kv: { block_tokens: 16 }\n");
}

/* Exec this program again with the counter preloaded, its table at
 * g_tmp/compute.ac. Returns only on failure. */
static void reexec(char **argv, const char *lib)
{
    char table[700];

    snprintf(table, sizeof(table), "%s/compute.ac", g_tmp);
    if (na_ac_map(table, 1) == NULL)
        return;
    setenv("NA_ALLOC_FILE", table, 1);
    setenv("NA_ALLOC_TMP", g_tmp, 1);
    setenv("LD_PRELOAD", lib, 1);
    execv("/proc/self/exe", argv);
    fprintf(stderr, "exec /proc/self/exe: failed\n");
}

int main(int argc, char **argv)
{
    const char *tls = argc > 2 ? argv[2] : "shm";
    const char *tmp = getenv("NA_ALLOC_TMP");
    na_engine_opts_t eo = { "cpu", 1, NA_DTYPE_F16, 0 };
    na_sampler_cfg_t sc = { 0.0f, 1.0f, 1 };
    na_cluster_t *cl = NULL;
    na_test_off_cb_t cb = { w_token, w_done, w_error, NULL };
    na_genmodel_opts_t gm;
    na_off_t *g = NULL;
    na_request_t *r = NULL;
    na_model_t *m = NULL;
    na_engine_t *e = NULL;
    na_cfg_t *cfg = NULL;
    win_t w;
    char path[700], table[700];
    uint64_t rng = 777;
    int toks[16], guard = 0;

#if defined(__SANITIZE_ADDRESS__)
    (void)argv;
    (void)tmp;
    fprintf(stderr, "SKIP: the sanitizer build owns malloc\n");
    return 77;
#endif
    if (argc < 2) {
        fprintf(stderr, "usage: %s LIBNA_ALLOC_COUNT.so [shm|tcp]\n", argv[0]);
        return 2;
    }
    if (tmp == NULL) {                 /* first start: make the tables, preload, exec */
        if (na_test_tmpdir(g_tmp, sizeof(g_tmp)) != 0)
            return 1;
        reexec(argv, argv[1]);
        return 1;
    }
    snprintf(g_tmp, sizeof(g_tmp), "%s", tmp);
    memset(&w, 0, sizeof(w));
    snprintf(table, sizeof(table), "%s/compute.ac", g_tmp);
    w.comp = na_ac_map(table, 0);      /* made before the exec, the library's now */
    NA_CHECK_MSG(na_ac_attached(w.comp), "the counter is not preloaded here");
    if (!na_ac_attached(w.comp))
        return na_test_finish();
    snprintf(table, sizeof(table), "%s/storage.ac", g_tmp);
    w.stor = na_ac_map(table, 1);
    if (w.stor == NULL)
        return 1;
    setenv("NA_ALLOC_FILE", table, 1); /* what the storage node maps */

    na_genmodel_shape(&gm, 64, 128, 2, 8, 2, 300, 128);
    if (na_test_stories_or_gen(g_tmp, "alloc", &gm, path, sizeof(path)) == 0)
        NA_CHECK_OK(na_model_open(path, &m));
    if (m != NULL)
        NA_CHECK_OK(na_engine_create(m, &eo, &e));
    if (e != NULL)
        NA_CHECK_OK(load_layout(path, tls, &cfg));
    if (cfg != NULL)
        cl = na_test_cluster_start(cfg, e);
    cb.user = &w;
    if (cl != NULL)
        g = na_test_off_create(e, na_cluster_service(cl), 1, 1, 0, &cb);
    if (g != NULL) {
        na_test_prompt(&rng, toks, 12, e->cfg.vocab_size);
        NA_CHECK_OK(na_request_create(e, 1, toks, 12, MAX_NEW, &sc, &r));
    }
    if (r != NULL) {
        NA_CHECK_OK(na_off_submit(g, r, NULL));
        while (na_off_pending(g) > 0 && guard++ < 1000000 && na_test_failures == 0)
            NA_CHECK_OK(na_off_progress(g, 10));
        NA_CHECK_MSG(w.closed == WARM + WINDOW, "the window did not close (%d tokens)",
                     w.tokens);
    }
    if (w.closed > 0) {
        double rts = (double)(w.closed - w.opened) * e->cfg.n_layers;
        fprintf(stderr, "window: %d tokens x %d layers = %.0f round trips (tls %s) in %.1f ms\n",
                w.closed - w.opened, e->cfg.n_layers, rts, tls, 1e3 * (w.t1 - w.t0));
        long rc = na_ac_report(w.comp, "compute node (this process)", rts, stderr);
        long rs = na_ac_report(w.stor, "storage node", rts, stderr);
        NA_CHECK_MSG(w.comp->calls > 0 && w.stor->calls > 0,
                     "the counter is not live (compute %llu, storage %llu calls)",
                     (unsigned long long)w.comp->calls, (unsigned long long)w.stor->calls);
        NA_CHECK_MSG(na_ac_fn_count(w.comp, "alloc_probe") == 1,
                     "the window did not see the deliberate allocation (%ld)",
                     na_ac_fn_count(w.comp, "alloc_probe"));
        NA_CHECK_MSG(rc == 0, "compute node: %ld transport/session allocations in %d tokens",
                     rc, WINDOW);
        NA_CHECK_MSG(rs == 0, "storage node: %ld transport/session allocations in %d tokens",
                     rs, WINDOW);
        {
            /* a stack is counted once, whichever of its frames matched (a
             * spill may be called from na_kv_append, tail call or not) */
            static const char *const wb_fn[] = { "na_kv_spill", "na_kv_poll", NULL };
            static const char *const kv_fn[] = { "na_kv_append", "na_kv_spill", "na_kv_poll",
                                                 NULL };
            long wb = na_ac_fn_count_any(w.stor, wb_fn);
            long both = na_ac_fn_count_any(w.stor, kv_fn);
            long kv = both - wb;
            long rest = (long)w.stor->total - both;
            long kv_max = (WINDOW / 16 + 1) * (long)e->cfg.n_layers;
            fprintf(stderr, "storage node: %ld KV blocks grown (at most %ld), %ld writeback "
                    "pool growth (at most %d), %ld other\n", kv, kv_max, wb, STOR_WB_GROW, rest);
            NA_CHECK_MSG(kv >= 0 && kv <= kv_max, "storage node: %ld allocations under "
                         "na_kv_append in %d tokens, at most %ld (a new block per layer every "
                         "16 tokens)", kv, WINDOW, kv_max);
            NA_CHECK_MSG(wb >= 0 && wb <= STOR_WB_GROW, "storage node: %ld writeback "
                         "allocations in %d tokens, at most %d (pool high-water growth)", wb,
                         WINDOW, STOR_WB_GROW);
            NA_CHECK_MSG(rest == 0, "storage node: %ld allocations in %d tokens outside KV "
                         "growth and writeback (%.2f per round trip): the decode path must "
                         "take them from its pools", rest, WINDOW, (double)rest / rts);
        }
        /* the compute side: the offload engine, the attention service over
         * storage nodes and the storage client, not only rdma/ */
        NA_CHECK_MSG(w.comp->total == 1, "compute node: %llu allocations in %d tokens, where "
                     "only the deliberate one was expected (sites above)",
                     (unsigned long long)w.comp->total, WINDOW);
    }
    free(w.probe);
    na_off_destroy(g);
    na_request_destroy(r);
    na_cluster_destroy(cl);
    na_cfg_destroy(cfg);
    na_engine_destroy(e);
    na_model_destroy(m);
    na_test_rmtree(g_tmp);
    return na_test_finish();
}
