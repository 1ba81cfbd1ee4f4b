/* cluster/setup.c — start or connect to the storage nodes of a layout, or
 * use its slots in this process, and create the attention service over
 * them (see cluster/setup.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cluster/nodes.h"
#include "cluster/rundir.h"
#include "cluster/inproc.h"
#include "cluster/setup.h"
#include "common/log.h"
#include "common/model.h"
#include "compute-node/attn_kvfetch.h"
#include "compute-node/replica.h"

struct na_cluster {
    na_cfg_t   *cfg;        /* loaded here; ports of private nodes rewritten */
    na_nodes_t *nodes;      /* start: the child processes */
    na_asvc_t  *svc;
    na_rep_t   *rep;
    const char *how;
    char        kv_dir[PATH_MAX];  /* inproc, private: this run's KV, "" if none */
};

void na_cluster_opts_default(na_cluster_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->mode = "start";
    o->private_run = 1;
}

const na_cfg_t *na_cluster_cfg(const na_cluster_t *c) { return c->cfg; }
na_asvc_t *na_cluster_service(const na_cluster_t *c) { return c->svc; }
struct na_rep *na_cluster_rep(const na_cluster_t *c) { return c->rep; }
const char *na_cluster_how(const na_cluster_t *c) { return c->how; }

int na_cluster_heal(na_cluster_t *c)
{
    return c != NULL ? na_nodes_heal(c->nodes) : 0;
}

na_asvc_t *na_cluster_take_service(na_cluster_t *c)
{
    na_asvc_t *s = c->svc;
    c->svc = NULL;
    return s;
}

void na_cluster_keep_logs(na_cluster_t *c)
{
    if (c != NULL)
        na_nodes_keep_logs(c->nodes);
}

void na_cluster_destroy(na_cluster_t *c)
{
    if (c == NULL)
        return;
    na_rep_destroy(c->rep);
    na_asvc_destroy(c->svc);
    na_nodes_stop(c->nodes);
    na_rundir_remove(c->kv_dir);
    na_cfg_destroy(c->cfg);
    free(c);
}

/* 1 when paths a and b (b may be NULL) name the same file. */
static int na_cluster_same_file(const char *a, const char *b)
{
    struct stat sa, sb;

    return b != NULL && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* connect: a running cluster keeps its layout's model shape and KV dtype;
 * refuse an engine that differs before any request is made. */
static na_status_t na_cluster_connect_check(const na_cfg_t *cfg, const na_cluster_opts_t *o,
                                            const na_engine_t *e)
{
    const na_model_config_t *m = &e->cfg;
    na_model_t *lm = NULL;
    na_status_t st = NA_OK;

    if (o->kv_dtype_given && (int)e->opts.kv_dtype != (int)cfg->model.kv_dtype)
        return na_err(NA_ERR_INVALID, "--kv-dtype %s: the running cluster of %s keeps "
                      "model.kv_dtype %s (its nodes were started with it); leave --kv-dtype "
                      "out, or use --cluster start/inproc for a run with %s KV",
                      na_dtype_name(e->opts.kv_dtype), cfg->file,
                      na_dtype_name((na_dtype_t)cfg->model.kv_dtype),
                      na_dtype_name(e->opts.kv_dtype));
    if (o->model_path != NULL && cfg->parallel.pipelining == NA_CFG_PIPE_ROTATIONAL &&
        cfg->n_compute > 1 && !na_cluster_same_file(o->model_path, cfg->model.path))
        return na_err(NA_ERR_INVALID, "--model %s: the running compute replicas of %s compute "
                      "with its model %s; use --cluster start for another model",
                      o->model_path, cfg->file, cfg->model.path ? cfg->model.path : "(none)");
    if (cfg->model.path == NULL)
        return NA_OK;           /* the nodes got their shape by hand (--shape) */
    if (na_model_open(cfg->model.path, &lm) != NA_OK) {
        na_log_debug("run: layout model %s not readable here; shape not checked (%s)",
                     cfg->model.path, na_errmsg());
        return NA_OK;
    }
    if (lm->cfg.n_layers != m->n_layers || lm->cfg.n_heads != m->n_heads ||
        lm->cfg.n_kv_heads != m->n_kv_heads || lm->cfg.head_dim != m->head_dim)
        st = na_err(NA_ERR_INVALID, "--cluster connect: the running cluster of %s holds KV "
                    "for its model %s (%d layers, %d heads, %d KV heads, head_dim %d), not for "
                    "this model (%d, %d, %d, %d); use --cluster start or inproc with --model",
                    cfg->file, cfg->model.path, lm->cfg.n_layers, lm->cfg.n_heads,
                    lm->cfg.n_kv_heads, lm->cfg.head_dim, m->n_layers, m->n_heads,
                    m->n_kv_heads, m->head_dim);
    na_model_destroy(lm);
    return st;
}

na_status_t na_cluster_create(const na_cluster_opts_t *o, na_engine_t *e, na_cluster_t **c_p)
{
    const char *mode = o->mode != NULL ? o->mode : "start";
    int inproc = !strcmp(mode, "inproc");
    na_cluster_t *c;
    const char *me;
    char shape[64];
    na_status_t st;

    if (strcmp(mode, "start") != 0 && strcmp(mode, "connect") != 0 && !inproc)
        return na_err(NA_ERR_INVALID, "cluster: unknown mode '%s' (start, connect or inproc)",
                      mode);
    if (o->kvfetch && inproc)
        return na_err(NA_ERR_INVALID, "--mode kv-fetch needs storage nodes (--cluster start or "
                      "connect), not --cluster inproc");
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return na_err(NA_ERR_NOMEM, "cluster: out of memory");
    st = na_cfg_load(o->config_path, &c->cfg);
    if (st != NA_OK)
        goto err_destroy;
    if (!strcmp(mode, "connect")) {
        st = na_cluster_connect_check(c->cfg, o, e);
        if (st != NA_OK)
            goto err_destroy;
    } else if (o->kv_dtype_given) {     /* the nodes/slots started here take it */
        c->cfg->model.kv_dtype = (na_cfg_kv_dtype_t)e->opts.kv_dtype;
    }
    me = c->cfg->n_compute > 0 ? c->cfg->nodes[0].name : "c0";
    if (c->cfg->parallel.pipelining == NA_CFG_PIPE_ROTATIONAL && (c->cfg->n_compute < 2 || inproc))
        na_log_warn("run: rotational pipelining needs several compute processes (compute "
                    "nodes with ports, not --cluster inproc); this run is one compute node "
                    "and uses the fixed schedule");
    if (inproc) {
        c->how = "in-process slots";
        if (o->private_run) {           /* this run's own KV directory */
            st = na_rundir_make(c->kv_dir, sizeof(c->kv_dir));
            if (st == NA_OK)
                st = na_rundir_move_kv(c->cfg, c->kv_dir);
            if (st != NA_OK)
                goto err_destroy;
        }
        st = na_inproc_create(c->cfg, &e->cfg, &c->svc);
    } else {
        if (!strcmp(mode, "start")) {
            na_nodes_opts_t no = { o->config_path, o->exe, o->private_run, o->stop,
                                   o->model_path, shape,
                                   o->kv_dtype_given ? na_dtype_name(e->opts.kv_dtype) : NULL };
            snprintf(shape, sizeof(shape), "%d:%d:%d:%d", e->cfg.n_layers, e->cfg.n_heads,
                     e->cfg.n_kv_heads, e->cfg.head_dim);
            c->how = "cluster started here";
            st = na_nodes_start(c->cfg, &no, &c->nodes);
            if (st != NA_OK)
                goto err_destroy;
        } else {
            c->how = "connected to a running cluster";
        }
        if (o->kvfetch)
            st = na_asvc_kvfetch_create(c->cfg, &e->cfg, me, e->kern, &c->svc);
        else
            st = na_asvc_remote_create(c->cfg, &e->cfg, me, &c->svc);
    }
    if (st == NA_OK && c->cfg->parallel.pipelining == NA_CFG_PIPE_ROTATIONAL &&
        c->cfg->n_compute > 1 && !inproc)
        st = na_rep_create(c->cfg, me, &c->rep);
    if (st != NA_OK)
        goto err_destroy;
    *c_p = c;
    return NA_OK;

err_destroy:
    na_cluster_destroy(c);
    return st;
}
