/* cli/cmd_bench.c — `nearattn bench <kind> ...`: measured comparisons, each
 * printing its figures beside an in-run limit or peer (table + JSON). To add
 * a kind: write cli/bench_<kind>.c, declare it in cli/bench.h, add one line
 * to na_cli_bench_kinds below and the file to cli/CMakeLists.txt. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "kernels/kernels.h"

static const na_cli_cmd_t na_cli_bench_kinds[] = {
    { "kernels", "decode attention vs STREAM copy, matmul vs cblas_sgemm", na_cli_bench_kernels },
    { "storage", "attention over SSD KV vs best O_DIRECT read, over DRAM KV vs STREAM copy", na_cli_bench_storage },
    { "transport", "message round trip and bandwidth vs ucx_perftest", na_cli_bench_transport },
    { "e2e", "decode tok/s monolithic vs offload, t_m/t_a, pipelining gain vs ideal", na_cli_bench_e2e },
    { "capacity", "most KV tokens within a compute memory budget: monolithic vs 1/2/4 storage nodes", na_cli_bench_capacity },
    { "serve", "HTTP serving: tok/s, TTFT, ITL at concurrency 1..64 vs nearattn run", na_cli_bench_serve },
    { "arrivals", "a long prompt arrives while N streams decode: their ITL p99, its TTFT vs alone", na_cli_bench_arrivals },
    { "prefix", "prefix reuse: N prompts sharing a long prefix, reuse on vs off (tokens, TTFT, time)", na_cli_bench_prefix },
    { "longctx", "long prompts: compute peak RSS at 2K..32K offload, TTFT and decode offload vs monolithic", na_cli_bench_longctx },
    { NULL, NULL, NULL }
};

void na_cli_bench_opts_init(na_cli_bench_opts_t *o)
{
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    o->json = NULL;
    o->threads = nc > 0 ? (int)nc : 1;
    o->quick = 0;
}

int na_cli_bench_opt(const char *kind, int argc, char **argv, int *i, na_cli_bench_opts_t *o)
{
    char cmd[64];
    const char *a = argv[*i];
    long v;

    snprintf(cmd, sizeof(cmd), "bench %s", kind);
    if (!strcmp(a, "--quick")) {
        o->quick = 1;
        return 1;
    }
    if (!strcmp(a, "--json")) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "nearattn %s: --json needs a file name\n", cmd);
            return -1;
        }
        o->json = argv[++*i];
        return 1;
    }
    if (!strcmp(a, "--threads")) {
        if (na_cli_int(cmd, "--threads", *i + 1 < argc ? argv[*i + 1] : NULL, 1, 1024, &v) != NA_OK)
            return -1;
        o->threads = (int)v;
        ++*i;
        return 1;
    }
    return 0;
}

/* One of the kind's own options (own): 1 taken, 0 none, 2 after a usage error. */
static int na_cli_bench_own(const char *cmd, const na_cli_bench_own_t *own, int argc,
                            char **argv, int *i)
{
    int r;

    if (na_cli_switch(own->sw, own->n_sw, argv[*i]))
        return 1;
    r = na_cli_num(cmd, own->num, own->n_num, argc, argv, i);
    if (r == 0)
        r = na_cli_list_opt(cmd, own->list, own->n_list, argc, argv, i);
    if (r == 0)
        r = na_cli_str(cmd, own->str, own->n_str, argc, argv, i);
    if (r == 0 && own->own != NULL)
        r = own->own(cmd, own->ctx, argc, argv, i);
    return r;
}

int na_cli_bench_parse(const char *kind, int argc, char **argv, na_cli_bench_opts_t *o,
                       void (*usage)(FILE *f), const na_cli_bench_own_t *own)
{
    char cmd[64];
    int i, r;

    snprintf(cmd, sizeof(cmd), "bench %s", kind);
    na_cli_bench_opts_init(o);
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        r = na_cli_bench_opt(kind, argc, argv, &i, o);
        if (r == 0)
            r = na_cli_bench_own(cmd, own, argc, argv, &i);
        if (r == 1)
            continue;
        if (r == 0) {
            fprintf(stderr, "nearattn bench %s: unknown option '%s'\n", kind, argv[i]);
            usage(stderr);
        }
        return 2;
    }
    return -1;
}

int na_cli_bench_finish(const char *kind, const na_bench_t *b, const na_cli_bench_opts_t *o)
{
    na_status_t st;
    const char *better = na_kernels_blas_better_core(), *set = getenv("OPENBLAS_CORETYPE");
    na_bench_print(b, stdout);
    if (better != NULL)     /* the matmul figures ran on OpenBLAS's older kernels */
        printf("NOTE: OpenBLAS runs its AVX2 kernels%s%s%s; this CPU can run its %s kernels "
               "(faster cblas_sgemm peer rows and F32/F16 matmuls at batches 16-63; nearattn's "
               "own AVX-512 GEMM takes batches from 64; docs/benchmarks.md): %s\n",
               set ? " (OPENBLAS_CORETYPE=" : "", set ? set : "", set ? ")" : "", better,
               set ? "unset OPENBLAS_CORETYPE to use them" : "set OPENBLAS_CORETYPE to use them");
    if (o->json == NULL)
        return 0;
    st = na_bench_write_json(b, o->json);
    if (st != NA_OK) {
        char cmd[64];
        snprintf(cmd, sizeof(cmd), "bench %s", kind);
        return na_cli_fail(cmd, st);
    }
    printf("wrote %s\n", o->json);
    return 0;
}

int na_cli_bench_end(const char *kind, const char *cmd, na_status_t st, na_bench_t *b,
                     const na_cli_bench_opts_t *o)
{
    int rc = st == NA_OK ? na_cli_bench_finish(kind, b, o) : na_cli_fail(cmd, st);

    na_bench_destroy(b);
    return rc;
}

void na_cli_bench_defaults(const na_cli_bench_opts_t *o, const na_cli_bench_dflt_t *d, size_t n)
{
    size_t k;

    for (k = 0; k < n; k++)
        if (*d[k].v == 0)
            *d[k].v = o->quick ? d[k].quick : d[k].full;
}

static void na_cli_bench_usage(FILE *f)
{
    fprintf(f, "usage: nearattn bench <kind> [options]   (nearattn bench <kind> --help)\n\n"
               "Measured comparisons: every figure is printed beside a limit or peer\n"
               "measured in the same run; --json FILE writes\n"
               "{\"bench\", \"machine\", \"results\": [{name, value, unit, reference_name,\n"
               "reference_value, ratio, spread}]}.\n\nkinds:\n");
    na_cli_list(f, na_cli_bench_kinds, 10);
    fprintf(f, "\ncommon options:\n" NA_CLI_BENCH_OPTS_HELP);
}

int na_cmd_bench(int argc, char **argv)
{
    if (argc < 2) {
        na_cli_bench_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        na_cli_bench_usage(stdout);
        return 0;
    }
    return na_cli_dispatch(na_cli_bench_kinds, "nearattn bench", "kind", argc, argv);
}

int na_cli_bench_dir(const char *cmd, const char *name, char *dir, size_t cap)
{
    const char *tmp = getenv("TMPDIR");

    snprintf(dir, cap, "%s/nearattn-%s-XXXXXX", tmp && tmp[0] ? tmp : "/tmp", name);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "nearattn %s: mkdtemp: %s\n", cmd, strerror(errno));
        return 1;
    }
    return 0;
}

FILE *na_cli_bench_layout(const char *path, const char *name, const char *secret,
                          const char *dir)
{
    FILE *f = fopen(path, "w");

    if (f != NULL)
        fprintf(f, "cluster: { name: %s, secret_file: \"%s\" }\n"
                   "model: { path: \"%s/model.bin\", kv_dtype: f16 }\n", name, secret, dir);
    return f;
}

void na_cli_bench_ports(int *ports, int n, int port0)
{
    int fd[NA_CLI_BENCH_MAX_PORTS], i;

    for (i = 0; i < n && i < NA_CLI_BENCH_MAX_PORTS; i++) {
        struct sockaddr_in a;
        socklen_t len = sizeof(a);
        ports[i] = port0 + i;
        memset(&a, 0, sizeof(a));
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fd[i] = socket(AF_INET, SOCK_STREAM, 0);      /* held open: n distinct picks */
        if (fd[i] >= 0 && bind(fd[i], (struct sockaddr *)&a, sizeof(a)) == 0 &&
            getsockname(fd[i], (struct sockaddr *)&a, &len) == 0)
            ports[i] = ntohs(a.sin_port);
    }
    for (; i < n; i++)
        ports[i] = port0 + i;
    for (i = 0; i < n && i < NA_CLI_BENCH_MAX_PORTS; i++)
        if (fd[i] >= 0)
            close(fd[i]);
}

void na_cli_bench_rmdir(const char *cmd, const char *dir)
{
    char rm[PATH_MAX + 16];

    snprintf(rm, sizeof(rm), "rm -rf '%s'", dir);
    if (system(rm) != 0)
        fprintf(stderr, "nearattn %s: cannot remove %s\n", cmd, dir);
}
