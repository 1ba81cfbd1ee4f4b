/* cli/bench_server.c — the servers that `bench serve` and `bench arrivals`
 * drive (see bench_server.h). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/bench_server.h"
#include "cli/bench_serve_http.h"
#include "cluster/proc.h"

int na_bsv_opt(const char *cmd, void *srv, int argc, char **argv, int *i)
{
    static const char *const str[] = { "--config", "--model", "--mode", "--url",
                                       "--api-key-file", "--peer", "--peer-api-key-file" };
    na_bsv_args_t *s = srv;
    const char *f = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    const char **dst[] = { &s->config, &s->model, &s->mode, &s->url, &s->key_file,
                           &s->peer, &s->peer_key_file };
    size_t k;

    for (k = 0; k < sizeof(str) / sizeof(str[0]); k++)
        if (!strcmp(f, str[k])) {
            if (v == NULL) {
                fprintf(stderr, "nearattn %s: %s needs a value\n", cmd, f);
                return 2;
            }
            if ((k == 3 || k == 5) && strncmp(v, "http://", 7) != 0 &&
                strncmp(v, "https://", 8) != 0) {
                fprintf(stderr, "nearattn %s: %s expects a server's URL, http://HOST:PORT "
                        "(got '%s')\n", cmd, f, v);
                return 2;
            }
            *dst[k] = v;
            ++*i;
            return 1;
        }
    return 0;
}

int na_bsv_keys(const char *cmd, const na_bsv_args_t *a, na_bsv_t *s)
{
    memset(s, 0, sizeof(*s));
    if (a->key_file != NULL &&
        na_cli_read_key(a->key_file, "--api-key-file", s->key, sizeof(s->key)) != NA_OK)
        return na_cli_fail(cmd, NA_ERR_IO);
    if (a->peer_key_file != NULL &&
        na_cli_read_key(a->peer_key_file, "--peer-api-key-file", s->pkey, sizeof(s->pkey)) !=
        NA_OK)
        return na_cli_fail(cmd, NA_ERR_IO);
    return 0;
}

/* Wait up to timeout_s for serve's "READY http://HOST:PORT ..." line in
 * log, the URL into base; *pid (the server) is set to 0 when it exited.
 * NA_ERR_PEER (it exited), NA_ERR_TIMEOUT. */
static na_status_t bsv_wait_ready_line(const char *log, pid_t *pid, int timeout_s, char *base,
                                       size_t len)
{
    double end = na_bench_now() + timeout_s;
    char line[512];
    int status;
    FILE *f;

    for (;;) {
        f = fopen(log, "r");
        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
            if (strncmp(line, "READY http://", 13) == 0) {
                line[6 + strcspn(line + 6, " \r\n")] = '\0';
                snprintf(base, len, "%s", line + 6);
                fclose(f);
                return NA_OK;
            }
        }
        if (f != NULL)
            fclose(f);
        if (waitpid(*pid, &status, WNOHANG) == *pid) {
            *pid = 0;
            return na_err(NA_ERR_PEER, "nearattn serve exited before it was ready");
        }
        if (na_bench_now() > end)
            return na_err(NA_ERR_TIMEOUT, "nearattn serve was not ready within %d s", timeout_s);
        usleep(50000);
    }
}

/* Start `exe serve` on a free loopback port, its output into log. */
static na_status_t bsv_spawn(const na_bsv_args_t *a, const char *exe, const char *threads,
                             const char *log, const char *key_file, pid_t *pid_p)
{
    const char *flag[] = { "--config", "--model", "--mode", "--api-key-file" };
    const char *val[] = { a->config, a->model, a->mode, key_file };
    char *argv[20];
    na_proc_opts_t po = { argv, log, 1, NULL, NULL };
    int k = 0, j;

    argv[k++] = (char *)exe;
    argv[k++] = "serve";
    argv[k++] = "--host";
    argv[k++] = "127.0.0.1";
    argv[k++] = "--port";
    argv[k++] = "0";
    argv[k++] = "--threads";
    argv[k++] = (char *)threads;
    for (j = 0; j < 4; j++)
        if (val[j] != NULL) {
            argv[k++] = (char *)flag[j];
            argv[k++] = (char *)val[j];
        }
    argv[k] = NULL;
    return na_proc_spawn(&po, pid_p);
}

/* The wait for /health asks this between tries: 0 once the serve started
 * here (ctx: its pid) has exited. */
static int bsv_alive(void *ctx)
{
    pid_t *pid = ctx;
    int status;

    if (*pid <= 0)
        return 1;                      /* --url, the peer: not ours to watch */
    if (waitpid(*pid, &status, WNOHANG) == *pid) {
        *pid = 0;
        return 0;
    }
    return 1;
}

int na_bsv_start(const char *cmd, const na_bsv_args_t *a, const char *exe, const char *threads,
                 const char *dir, na_bsv_t *s, char *model, size_t len)
{
    if (a->url != NULL) {
        snprintf(s->base, sizeof(s->base), "%s", a->url);
    } else {
        snprintf(s->log, sizeof(s->log), "%s/serve.log", dir);
        if (bsv_spawn(a, exe, threads, s->log, a->key_file, &s->pid) != NA_OK ||
            bsv_wait_ready_line(s->log, &s->pid, a->ready_s, s->base, sizeof(s->base)) !=
            NA_OK) {
            fprintf(stderr, "nearattn %s: cannot start nearattn serve: %s; its log: %s\n", cmd,
                    na_errmsg(), s->log);
            return 1;
        }
    }
    if (na_bsh_wait_ready(s->base, s->key[0] ? s->key : NULL, a->ready_s, bsv_alive, &s->pid,
                          model, len) != NA_OK) {
        fprintf(stderr, "nearattn %s: %s%s%s\n", cmd, na_errmsg(),
                a->url == NULL ? "; its log: " : "", a->url == NULL ? s->log : "");
        return 1;
    }
    return 0;
}

int na_bsv_peer(const char *cmd, const na_bsv_args_t *a, na_bsv_t *s, char *pmodel, size_t len)
{
    pid_t no_pid = 0;

    if (a->peer != NULL &&
        na_bsh_wait_ready(a->peer, s->pkey[0] ? s->pkey : NULL, a->ready_s, bsv_alive, &no_pid,
                          pmodel, len) != NA_OK) {
        fprintf(stderr, "nearattn %s: the peer: %s\n", cmd, na_errmsg());
        return 1;
    }
    return 0;
}

void na_bsv_stop(na_bsv_t *s)
{
    if (s->pid > 0)
        na_proc_stop(&s->pid, 1, SIGTERM, 20000);
}

void na_bsv_done(const char *cmd, const char *dir, int rc)
{
    char rm[600];

    if (rc == 0) {
        snprintf(rm, sizeof(rm), "rm -rf '%s'", dir);
        if (system(rm) != 0)
            fprintf(stderr, "nearattn %s: cannot remove %s\n", cmd, dir);
    } else {
        fprintf(stderr, "nearattn %s: logs kept in %s\n", cmd, dir);
    }
}
