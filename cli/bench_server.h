/* cli/bench_server.h — the servers that `bench serve` and `bench arrivals`
 * drive over HTTP (cli/bench_server.c): `nearattn serve` started here on a
 * free loopback port (or one already running, --url) and an optional
 * OpenAI-compatible peer (--peer); their options, keys, start and wait. */
#ifndef NA_BENCH_SERVER_H
#define NA_BENCH_SERVER_H

#include <stddef.h>
#include <sys/types.h>

#include "cli/cli.h"
#include "common/status.h"

/* The options naming the servers. */
typedef struct {
    const char *config, *model, *mode;  /* for the serve started here (NULL: its default) */
    const char *url;                    /* --url: a running server instead */
    const char *key_file;               /* --api-key-file */
    const char *peer, *peer_key_file;   /* --peer URL, its bearer key */
    int         ready_s;                /* --ready-timeout: wait for a server's /health */
} na_bsv_args_t;

/* Take argv[*i] into srv (a na_bsv_args_t) when it is --config, --model,
 * --mode, --url, --api-key-file, --peer or --peer-api-key-file (each with a
 * value; --url and --peer http(s)://HOST:PORT): 1 (*i at its value), 2 after
 * a usage error said as "nearattn <cmd>: ...", 0 when it is none of them.
 * A bench kind's own options (na_cli_bench_own_fn, cli/bench.h). */
int na_bsv_opt(const char *cmd, void *srv, int argc, char **argv, int *i);

/* The servers once ready. */
typedef struct {
    char  key[NA_CLI_KEY_MAX], pkey[NA_CLI_KEY_MAX];  /* "" when not given */
    char  base[600];          /* serve's http://HOST:PORT */
    char  log[600];           /* the log of the serve started here */
    pid_t pid;                /* the serve started here; 0 with --url */
} na_bsv_t;

/* Read the --api-key-file and --peer-api-key-file keys into s (zeroed
 * first): 0, or 1 after saying why ("nearattn <cmd>: ..."). */
int na_bsv_keys(const char *cmd, const na_bsv_args_t *a, na_bsv_t *s);

/* Start `exe serve --host 127.0.0.1 --port 0 --threads threads` with the
 * layout / model / mode / key of a (its log dir/serve.log) and wait for its
 * READY line, unless --url; then wait for serve's /health, its model id into
 * model[len]. 0, or 1 after saying why (a started serve stays in s->pid:
 * na_bsv_stop). */
int na_bsv_start(const char *cmd, const na_bsv_args_t *a, const char *exe, const char *threads,
                 const char *dir, na_bsv_t *s, char *model, size_t len);
/* With --peer: wait for the peer's /health, its model id into pmodel[len].
 * 0, or 1 after saying why. */
int na_bsv_peer(const char *cmd, const na_bsv_args_t *a, na_bsv_t *s, char *pmodel, size_t len);

/* Stop the serve started here, if any. */
void na_bsv_stop(na_bsv_t *s);

/* The end of a bench's run in its directory dir (char dir[512]): removed when
 * rc is 0, else kept with its logs (said on stderr). */
void na_bsv_done(const char *cmd, const char *dir, int rc);

#endif /* NA_BENCH_SERVER_H */
