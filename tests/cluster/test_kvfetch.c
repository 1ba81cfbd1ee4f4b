/* tests/cluster/test_kvfetch.c — the kv-fetch baseline (compute-node/
 * attn_kvfetch.c) against real storage-node processes (`nearattn node`,
 * NA_BIN) gives the same greedy tokens as monolithic generation: stories260K
 * (GQA) and a generated MHA model, 2 storage nodes over TCP with the KV on
 * the SSD tier (spill 1) and 1 node over shared memory with the KV in DRAM
 * (spill 4); 1 and 2 batches in flight. The storage nodes must hold every
 * appended row, or the next step's KV_FETCH of the whole context is refused
 * ("outside what the request holds") and the request fails. Exit 77 without
 * NA_BIN. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/genmodel.h"
#include "common/model.h"
#include "compute-node/attn_kvfetch.h"
#include "compute-node/generate.h"
#include "compute-node/offload.h"
#include "tests/testutil.h"

#define N_REQ   4
#define MAX_NEW 6

typedef struct {
    int         nodes;
    const char *tls;
    const char *tier;
    int         spill;
    int         bif;
} variant_t;

static char g_tmp[512];
static int  g_port = 14400;

static na_status_t write_layout(const variant_t *v, const char *model, int idx, char *path,
                                size_t cap)
{
    char kvdir[600];

    snprintf(path, cap, "%s/kvf%d.yaml", g_tmp, idx);
    snprintf(kvdir, sizeof(kvdir), "%s/kv%d", g_tmp, idx);
    return na_test_layout_write(path, "kvf", v->nodes, g_port, kvdir, 16,
                                "model: { path: \"%s\", kv_dtype: f16 }\n"
                                "transport: { tls: %s, timeout_ms: 5000, heartbeat_ms: 200, "
                                "peer_timeout_ms: 5000 }\n"
                                "parallel: { partition: request, batches_in_flight: %d }\n"
                                "kv: { block_tokens: 16, spill_interval: %d, tier: %s }\n",
                                model, v->tls, v->bif, v->spill, v->tier);
}

/* Start `NA_BIN node --config path --name sI` and wait for READY. */
static pid_t start_node(const char *bin, const char *path, int i)
{
    char name[16], buf[256];
    int p[2];
    size_t have = 0;
    time_t t0 = time(NULL);
    pid_t pid;

    snprintf(name, sizeof(name), "s%d", i);
    if (pipe(p) != 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        execl(bin, bin, "node", "--config", path, "--name", name, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    while (pid > 0 && time(NULL) - t0 < 30) {
        ssize_t n = read(p[0], buf + have, sizeof(buf) - 1 - have);
        if (n <= 0)
            break;
        have += (size_t)n;
        buf[have] = '\0';
        if (strstr(buf, "READY") != NULL) {
            close(p[0]);
            return pid;
        }
        if (have == sizeof(buf) - 1)
            have = 0;
    }
    close(p[0]);
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return -1;
}

static void stop_nodes(pid_t *pids, int n)
{
    int i;
    for (i = 0; i < n; i++)
        if (pids[i] > 0)
            kill(pids[i], SIGTERM);
    for (i = 0; i < n; i++)
        if (pids[i] > 0)
            waitpid(pids[i], NULL, 0);
}

static void make_requests(na_engine_t *e, na_request_t **r, int vocab)
{
    na_sampler_cfg_t sc = { 0.0f, 1.0f, 1 };
    uint64_t rng = 777;
    int i, toks[40];

    for (i = 0; i < N_REQ; i++)     /* prompts of 2 + (i * 11) % 29 tokens */
        NA_CHECK_OK(na_request_create(e, i, toks, na_test_prompt(&rng, toks, 2 + (i * 11) % 29,
                                                                  vocab),
                                      MAX_NEW, &sc, &r[i]));
}

static void run_model(const char *bin, const char *model, const variant_t *vs, int nv)
{
    static int idx;
    na_model_t *m;
    na_engine_t *e;
    na_engine_opts_t eo = { "cpu", 1, NA_DTYPE_F16, 0 };
    na_request_t *ref[N_REQ], *got[N_REQ];
    na_gen_opts_t go;
    int i, k;

    if (na_model_open(model, &m) != NA_OK) {
        NA_CHECK_MSG(0, "cannot open %s: %s", model, na_errmsg());
        return;
    }
    NA_CHECK_OK(na_engine_create(m, &eo, &e));
    memset(&go, 0, sizeof(go));
    go.max_batch = N_REQ;
    make_requests(e, ref, m->cfg.vocab_size);
    NA_CHECK_OK(na_generate(e, ref, N_REQ, &go, NULL));
    for (k = 0; k < nv; k++) {
        const variant_t *v = &vs[k];
        char path[700];
        pid_t pids[4] = { 0 };
        na_cfg_t *cfg = NULL;
        na_asvc_t *svc = NULL;
        na_off_opts_t oo;
        na_off_stats_t os;
        int s, up = 1;

        NA_CHECK_OK(write_layout(v, model, idx++, path, sizeof(path)));
        for (s = 0; s < v->nodes; s++)
            up &= (pids[s] = start_node(bin, path, s)) > 0;
        NA_CHECK_MSG(up, "variant %d: storage nodes did not start", k);
        if (up && na_cfg_load(path, &cfg) == NA_OK &&
            na_asvc_kvfetch_create(cfg, &m->cfg, "c0", e->kern, &svc) == NA_OK) {
            make_requests(e, got, m->cfg.vocab_size);
            memset(&oo, 0, sizeof(oo));
            oo.max_batch = (N_REQ + v->bif - 1) / v->bif;
            oo.batches_in_flight = v->bif;
            NA_CHECK_OK(na_offload_generate(e, svc, got, N_REQ, &oo, &os));
            NA_CHECK(os.failed == 0);
            for (i = 0; i < N_REQ; i++)
                NA_CHECK_MSG(na_test_same_ints(got[i]->out, got[i]->n_out, ref[i]->out,
                                               ref[i]->n_out),
                             "%s variant %d (%d nodes, %s, %s, spill %d, bif %d): request "
                             "%d differs", model, k, v->nodes, v->tls, v->tier, v->spill, v->bif,
                             i);
            /* every decode entry fetched the context: bytes in >> bytes out */
            NA_CHECK(os.svc.decode_entries > 0);
            NA_CHECK(os.svc.bytes_recv > os.svc.bytes_sent);
            fprintf(stderr, "%s v%d: %ld tokens, %llu entries, %llu B out, %llu B in\n", model,
                    k, os.gen.gen_tokens, (unsigned long long)os.svc.decode_entries,
                    (unsigned long long)os.svc.bytes_sent, (unsigned long long)os.svc.bytes_recv);
            for (i = 0; i < N_REQ; i++)
                na_request_destroy(got[i]);
        } else if (up) {
            NA_CHECK_MSG(0, "variant %d: %s", k, na_errmsg());
        }
        na_asvc_destroy(svc);
        na_cfg_destroy(cfg);
        stop_nodes(pids, v->nodes);
    }
    for (i = 0; i < N_REQ; i++)
        na_request_destroy(ref[i]);
    na_engine_destroy(e);
    na_model_destroy(m);
}

int main(void)
{
    static const variant_t vs[] = {
        { 2, "tcp", "ssd", 1, 1 },
        { 1, "shm", "dram", 4, 2 },
    };
    const char *bin = getenv("NA_BIN");
    const char *stories = na_test_shared_model("stories260K.bin");
    na_genmodel_opts_t go;
    char path[720];

    if (bin == NULL || access(bin, X_OK) != 0)
        NA_SKIP("NA_BIN (the nearattn binary) is not set");
    if (na_test_tmpdir(g_tmp, sizeof(g_tmp)) != 0)
        return 1;
    setenv("NA_KV_DIR", g_tmp, 1);
    g_port += (int)(getpid() % 50) * 4;
    if (stories != NULL)
        run_model(bin, stories, vs, 2);
    else
        fprintf(stderr, "stories260K absent: generated model only\n");
    na_genmodel_shape(&go, 64, 128, 2, 4, 4, 300, 64);
    na_test_genmodel(g_tmp, "mha", &go, "bin", path, sizeof(path));
    run_model(bin, path, vs + 1, 1);
    na_test_rmtree(g_tmp);
    return na_test_finish();
}
