/* cli/bench.h — the kinds of `nearattn bench <kind>`. Each kind lives in
 * cli/bench_<kind>.c as `int na_cli_bench_<kind>(int argc, char **argv)`
 * (argv[0] = the kind), is listed in the table of cli/cmd_bench.c, and
 * returns 0 ok / 1 runtime error / 2 usage error. Kinds share the options
 * below through na_cli_bench_opt(). */
#ifndef NA_CLI_BENCH_H
#define NA_CLI_BENCH_H

#include <stddef.h>
#include <stdio.h>

#include "cli/cli.h"
#include "common/bench.h"

/* Options every bench kind takes. */
typedef struct {
    const char *json;       /* --json FILE: also write the report here; NULL if not */
    int         threads;    /* --threads N: threads for the multi-threaded figures (default: all cores) */
    int         quick;      /* --quick: fewer sizes and repeats (a smoke run) */
} na_cli_bench_opts_t;

#define NA_CLI_BENCH_OPTS_HELP \
    "  --json FILE    also write the results as JSON to FILE\n" \
    "  --threads N    threads for the multi-threaded figures (default: all cores)\n" \
    "  --quick        fewer sizes and repeats (a quick smoke run)\n"

/* Set defaults in *o. */
void na_cli_bench_opts_init(na_cli_bench_opts_t *o);
/* If argv[*i] is a shared option, consume it (and its value) and return 1;
 * return 0 if it is not one; -1 after printing a usage error. */
int  na_cli_bench_opt(const char *kind, int argc, char **argv, int *i, na_cli_bench_opts_t *o);
/* A kind's own options: the whole numbers, lists, switches and strings of
 * its tables (cli/cli.h), each with the field it sets, then own(cmd, ctx,
 * ...) for the others (NULL: none): take argv[*i] (and its value, advancing
 * *i) into ctx, messages as "nearattn <cmd>: ..." (cmd: "bench <kind>"); 1
 * taken, 0 not one of them, 2 after printing a usage error. */
typedef int (*na_cli_bench_own_fn)(const char *cmd, void *ctx, int argc, char **argv, int *i);
typedef struct {
    const na_cli_num_t      *num;
    size_t                   n_num;
    const na_cli_list_opt_t *list;
    size_t                   n_list;
    const na_cli_switch_t   *sw;
    size_t                   n_sw;
    const na_cli_str_t      *str;
    size_t                   n_str;
    na_cli_bench_own_fn      own;
    void                    *ctx;
} na_cli_bench_own_t;
/* The options loop of `bench kind`: sets defaults in *o, then takes
 * --help/-h (usage(stdout)), the shared options and the kind's (own);
 * anything else is an unknown option (said so, usage(stderr)). Returns -1 to
 * go on, else the command's exit code: 0 after --help, 2 on a usage error. */
int  na_cli_bench_parse(const char *kind, int argc, char **argv, na_cli_bench_opts_t *o,
                        void (*usage)(FILE *f), const na_cli_bench_own_t *own);
/* A fresh private directory $TMPDIR/nearattn-NAME-XXXXXX (/tmp without
 * TMPDIR) into dir[cap]: 0, or 1 after "nearattn <cmd>: mkdtemp: ..." on
 * stderr. */
int  na_cli_bench_dir(const char *cmd, const char *name, char *dir, size_t cap);
/* Create the layout file path of a cluster started by a bench and write its
 * first lines: the cluster (name, the secret file) and the generated model
 * dir/model.bin with f16 KV. The file to write the rest to (the caller
 * closes it), or NULL when it cannot be created. */
FILE *na_cli_bench_layout(const char *path, const char *name, const char *secret,
                          const char *dir);
/* Remove dir (from na_cli_bench_dir) and all it holds; "nearattn <cmd>:
 * cannot remove DIR" on stderr when that fails. */
void na_cli_bench_rmdir(const char *cmd, const char *dir);
/* n distinct TCP ports free on 127.0.0.1 now (the kernel's picks) into
 * ports[], for the storage nodes of a cluster a bench starts, so that two
 * runs at once (a Release and a sanitizer build's tests, two users) do not
 * collide; port0 + i for a port that cannot be picked (past
 * NA_CLI_BENCH_MAX_PORTS, or no socket). */
#define NA_CLI_BENCH_MAX_PORTS 64
void na_cli_bench_ports(int *ports, int n, int port0);
/* Counts a kind's options left 0 take their defaults: quick with --quick,
 * else full. */
typedef struct {
    int *v;
    int  quick, full;
} na_cli_bench_dflt_t;
void na_cli_bench_defaults(const na_cli_bench_opts_t *o, const na_cli_bench_dflt_t *d, size_t n);
/* Print the table, write the JSON if asked; 0 or 1 (error printed). */
int  na_cli_bench_finish(const char *kind, const na_bench_t *b, const na_cli_bench_opts_t *o);
/* The end of a kind's run: na_cli_bench_finish when st is NA_OK, else
 * na_cli_fail(cmd, st); b destroyed either way. The exit code. */
int  na_cli_bench_end(const char *kind, const char *cmd, na_status_t st, na_bench_t *b,
                      const na_cli_bench_opts_t *o);

int na_cli_bench_kernels(int argc, char **argv);    /* cli/bench_kernels.c */
int na_cli_bench_storage(int argc, char **argv);    /* cli/bench_storage.c */
/* `bench storage --engine csd` (cli/bench_csd.c): files under base, rates
 * file or NULL. */
int na_cli_bench_csd(const na_cli_bench_opts_t *o, const char *base, const char *rates);
int na_cli_bench_transport(int argc, char **argv);  /* cli/bench_transport.c */
int na_cli_bench_e2e(int argc, char **argv);        /* cli/bench_e2e.c */
int na_cli_bench_capacity(int argc, char **argv);   /* cli/bench_capacity.c */
int na_cli_bench_serve(int argc, char **argv);      /* cli/bench_serve.c */
int na_cli_bench_prefix(int argc, char **argv);     /* cli/bench_prefix.c */
int na_cli_bench_arrivals(int argc, char **argv);   /* cli/bench_arrivals.c */
int na_cli_bench_longctx(int argc, char **argv);    /* cli/bench_longctx.c */

#endif /* NA_CLI_BENCH_H */
