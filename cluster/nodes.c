/* cluster/nodes.c — storage nodes (and compute replicas) of a layout started
 * on this machine, private to one run or on the layout's ports (see
 * cluster/nodes.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster/nodes.h"
#include "cluster/proc.h"
#include "cluster/rundir.h"
#include "common/clock.h"
#include "common/log.h"

#define NA_NODES_READY_MS 30000      /* a node must say READY within this */
#define NA_NODES_STOP_MS  5000
#define NA_NODES_RESTARTS 5          /* restarts in a row (each lived < NA_NODES_STABLE_S) */
#define NA_NODES_STABLE_S 30.0       /* a node that ran this long starts its count afresh */
#define NA_NODES_BACKOFF_S 0.5       /* first restart after this, doubling per restart */

/* What a storage node was started with: the same again on a restart. */
typedef struct {
    int    storage;                  /* 1: a storage node (restarted); 0: a replica */
    char   name[256];                /* a longer name: not restarted */
    char   listen[300];              /* "" : the layout's address */
    char   kv[PATH_MAX + 64];        /* "" : the layout's KV paths */
    double t_start;                  /* when it was (re)started */
    double t_due;                    /* > 0: exited, restart at this time */
    int    tries;                    /* restarts in a row */
    int    given_up;
} na_node_run_t;

struct na_nodes {
    pid_t pid[NA_CFG_MAX_NODES];
    int   fd[NA_CFG_MAX_NODES];
    char  log[NA_CFG_MAX_NODES][PATH_MAX + 64];   /* each node's log file */
    na_node_run_t run[NA_CFG_MAX_NODES];
    char  exe[PATH_MAX];
    char  *config_path, *shape, *kv_dtype;         /* copies (restarts) */
    int   n;
    int   private_run;
    int   keep_logs;              /* na_nodes_keep_logs was called */
    char  dir[PATH_MAX];          /* private run directory, "" if none */
};

const char *na_nodes_dir(const na_nodes_t *n)
{
    return n->dir;
}

void na_nodes_keep_logs(na_nodes_t *n)
{
    if (n != NULL)
        n->keep_logs = 1;
}

void na_nodes_stop(na_nodes_t *n)
{
    const char *keep = getenv("NA_KEEP_LOGS");
    int i, unclean;

    if (n == NULL)
        return;
    unclean = na_proc_stop(n->pid, n->n, SIGTERM, NA_NODES_STOP_MS);
    for (i = 0; i < n->n; i++)
        if (n->fd[i] >= 0)
            close(n->fd[i]);
    if (n->dir[0] != '\0')
        na_rundir_remove(n->dir);
    free(n->config_path);
    free(n->shape);
    free(n->kv_dtype);
    /* a private run's logs go with it when all went well; kept (and named)
     * when a node did not exit cleanly, the run failed, or NA_KEEP_LOGS=1 */
    if (n->private_run && n->n > 0) {
        if (unclean == 0 && !n->keep_logs && (keep == NULL || strcmp(keep, "1") != 0)) {
            for (i = 0; i < n->n; i++)
                unlink(n->log[i]);
        } else if (unclean > 0 || n->keep_logs) {
            char why[64] = "requests failed or were re-placed";
            if (unclean > 0)
                snprintf(why, sizeof(why), "%d node(s) did not exit cleanly", unclean);
            na_log_warn("run: %s: the nodes' logs are kept: %s%s", why, n->log[0],
                        n->n > 1 ? " and the others beside it" : "");
        }
    }
    free(n);
}

na_status_t na_nodes_start(na_cfg_t *cfg, const na_nodes_opts_t *o, na_nodes_t **n_p)
{
    char exe[PATH_MAX];
    const char *tmp = getenv("TMPDIR");
    na_nodes_t *n;
    na_status_t st;
    int j, n_rep = 0, free_ports;

    if (o->exe != NULL)
        snprintf(exe, sizeof(exe), "%s", o->exe);
    else if ((st = na_proc_self_exe(exe, sizeof(exe))) != NA_OK)
        return st;
    n = calloc(1, sizeof(*n));
    if (n == NULL)
        return na_err(NA_ERR_NOMEM, "run: out of memory");
    *n_p = n;       /* the caller stops what started, also on failure */
    if (cfg->parallel.pipelining == NA_CFG_PIPE_ROTATIONAL && cfg->n_compute > 1)
        n_rep = cfg->n_compute - 1;
    free_ports = o->private_run && n_rep == 0;
    n->private_run = o->private_run;
    snprintf(n->exe, sizeof(n->exe), "%s", exe);
    n->config_path = strdup(o->config_path);
    n->shape = o->shape != NULL ? strdup(o->shape) : NULL;
    n->kv_dtype = o->kv_dtype != NULL ? strdup(o->kv_dtype) : NULL;
    if (n->config_path == NULL || (o->shape != NULL && n->shape == NULL) ||
        (o->kv_dtype != NULL && n->kv_dtype == NULL))
        return na_err(NA_ERR_NOMEM, "run: out of memory");
    if (o->private_run && (st = na_rundir_make(n->dir, sizeof(n->dir))) != NA_OK)
        return st;
    if (free_ports && cfg->n_compute > 0)
        cfg->nodes[0].port = 0;     /* private: no door for storage nodes to announce at */
    for (j = 0; j < cfg->n_storage + n_rep; j++) {
        na_cfg_node_t *nd = j < cfg->n_storage ? &cfg->nodes[cfg->n_compute + j]
                                               : &cfg->nodes[1 + j - cfg->n_storage];
        char *log = n->log[n->n], listen[300], kv[PATH_MAX + 64];
        na_proc_node_t pn = { exe, o->config_path, nd->name, NULL, NULL, NULL, NULL,
                              o->kv_dtype };
        na_proc_opts_t po;
        long port = -1;

        memset(&po, 0, sizeof(po));
        po.log = log;
        po.out_fd_p = &n->fd[n->n];
        /* one log per run and node: concurrent runs of a layout never share one */
        snprintf(log, sizeof(n->log[0]), "%s/nearattn-run-%s-%s-%ld.log", tmp && tmp[0] ? tmp : "/tmp",
                 cfg->cluster.name, nd->name, (long)getpid());
        if (nd->role == NA_CFG_ROLE_STORAGE)
            pn.shape = o->shape;
        else
            pn.model = o->model_path;
        if (o->private_run && nd->role == NA_CFG_ROLE_STORAGE) {
            snprintf(kv, sizeof(kv), "%s/%s", n->dir, nd->name);
            pn.kv_dir = kv;
        }
        if (free_ports && nd->role == NA_CFG_ROLE_STORAGE) {
            snprintf(listen, sizeof(listen), "%s:0", nd->host);
            pn.listen = listen;
        }
        n->fd[n->n] = -1;
        n->run[n->n].storage = nd->role == NA_CFG_ROLE_STORAGE &&
                               strlen(nd->name) < sizeof(n->run[0].name);
        snprintf(n->run[n->n].name, sizeof(n->run[0].name), "%s", nd->name);
        if (pn.kv_dir != NULL)
            snprintf(n->run[n->n].kv, sizeof(n->run[0].kv), "%s", pn.kv_dir);
        n->run[n->n].t_start = na_now_s();
        st = na_proc_start_node(&pn, &po, &n->pid[n->n]);
        if (st != NA_OK)
            return st;
        n->n++;
        st = na_proc_wait_ready(n->fd[n->n - 1], nd->name, log, NA_NODES_READY_MS, o->stop,
                                &port);
        if (st != NA_OK)
            return st;
        if (pn.listen != NULL) {
            if (port <= 0 || port > 65535)
                return na_err(NA_ERR_PEER, "node %s said READY without its port (log: %s)",
                              nd->name, log);
            nd->port = port;
            na_log_debug("run: node %s listens on %s:%ld", nd->name, nd->host, port);
            /* a restart takes the same port: the compute node dials it again */
            snprintf(n->run[n->n - 1].listen, sizeof(n->run[0].listen), "%s:%ld", nd->host,
                     port);
        }
    }
    return NA_OK;
}

/* Start storage node i again, as it was started (its port, its KV directory). */
static void nodes_restart(na_nodes_t *n, int i)
{
    na_node_run_t *r = &n->run[i];
    na_proc_node_t pn = { n->exe, n->config_path, r->name, r->listen[0] ? r->listen : NULL,
                          r->kv[0] ? r->kv : NULL, NULL, n->shape, n->kv_dtype };
    na_proc_opts_t po;
    char prev[PATH_MAX + 80];
    na_status_t st;

    /* the log of the run that ended is kept beside (the new one truncates) */
    if (snprintf(prev, sizeof(prev), "%s.%d", n->log[i], r->tries) < (int)sizeof(prev) &&
        rename(n->log[i], prev) != 0 && errno != ENOENT)
        na_log_warn("run: cannot keep the log of node %s as %s: %s", r->name, prev,
                    strerror(errno));
    memset(&po, 0, sizeof(po));
    po.log = n->log[i];
    po.out_fd_p = &n->fd[i];
    r->t_due = 0;
    r->t_start = na_now_s();
    st = na_proc_start_node(&pn, &po, &n->pid[i]);
    if (st != NA_OK) {
        n->pid[i] = 0;
        n->fd[i] = -1;
        na_log_warn("run: storage node %s could not be started again: %s", r->name,
                    na_errmsg());
        if (r->tries >= NA_NODES_RESTARTS) {
            r->given_up = 1;
            return;
        }
        r->t_due = na_now_s() + NA_NODES_BACKOFF_S * (double)(1 << r->tries);
        r->tries++;
        return;
    }
    na_log_info("run: storage node %s started again (pid %ld, restart %d of at most %d in a "
                "row; log %s)", r->name, (long)n->pid[i], r->tries, NA_NODES_RESTARTS,
                n->log[i]);
}

int na_nodes_heal(na_nodes_t *n)
{
    double now = na_now_s();
    int i, ws, down = 0;

    if (n == NULL)
        return 0;
    for (i = 0; i < n->n; i++) {
        na_node_run_t *r = &n->run[i];
        if (n->pid[i] > 0 && waitpid(n->pid[i], &ws, WNOHANG) == n->pid[i]) {
            char how[48];
            n->pid[i] = 0;
            if (n->fd[i] >= 0)
                close(n->fd[i]);
            n->fd[i] = -1;
            n->keep_logs = 1;
            if (WIFSIGNALED(ws))
                snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(ws));
            else
                snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(ws));
            if (now - r->t_start >= NA_NODES_STABLE_S)
                r->tries = 0;
            if (!r->storage || r->tries >= NA_NODES_RESTARTS) {
                r->given_up = 1;
                na_log_warn("run: node %s %s; not started again (%s; log %s)", r->name, how,
                            r->storage ? "it failed too often" : "a compute replica",
                            n->log[i]);
            } else {
                double wait = NA_NODES_BACKOFF_S * (double)(1 << r->tries);
                r->tries++;
                r->t_due = now + wait;
                na_log_warn("run: storage node %s %s; starting it again in %.1f s (its log "
                            "kept as %s.%d)", r->name, how, wait, n->log[i], r->tries);
            }
        }
        if (n->pid[i] <= 0 && !r->given_up && r->t_due > 0 && now >= r->t_due)
            nodes_restart(n, i);
        down += n->pid[i] <= 0;
    }
    return down;
}
