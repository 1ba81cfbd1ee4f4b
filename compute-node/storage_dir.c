/* compute-node/storage_dir.c — the compute node's directory of storage
 * nodes: layout re-reads and connection retries. See storage_dir.h. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/config.h"
#include "common/log.h"
#include "compute-node/storage_dir.h"

typedef struct {
    char     name[NA_XP_NAME_MAX];
    char     host[256];
    int      port;
    na_peer_t *sc;               /* NULL while not connected */
    uint64_t next_try_ns;
} na_sc_dir_node_t;

struct na_sc_dir {
    na_ses_t         *ses;
    struct stat       seen;      /* the layout file as last loaded */
    uint64_t          retry_ns;
    na_sc_dir_node_t *nodes;     /* [n] of [cap] */
    int               n, cap;
    char              path[];    /* the layout file, in the directory's allocation */
};

/* Whether the file at path differs from *seen_p (modification time, size or
 * inode: an editor's rename counts); when it does, *seen_p becomes the file
 * as it is now. A file that cannot be stat'ed counts as unchanged. */
static int na_sc_dir_file_changed(const char *path, struct stat *seen_p)
{
    struct stat sb;

    if (stat(path, &sb) != 0)
        return 0;
    if (sb.st_ino == seen_p->st_ino && sb.st_dev == seen_p->st_dev &&
        sb.st_size == seen_p->st_size && sb.st_mtim.tv_sec == seen_p->st_mtim.tv_sec &&
        sb.st_mtim.tv_nsec == seen_p->st_mtim.tv_nsec)
        return 0;
    *seen_p = sb;
    return 1;
}

/* Add the storage nodes of cfg that are not known yet. */
static na_status_t na_sc_dir_merge(na_sc_dir_t *d, const na_cfg_t *cfg, int first)
{
    int i, j;

    for (i = cfg->n_compute; i < cfg->n_nodes; i++) {
        const na_cfg_node_t *cn = &cfg->nodes[i];
        int known = 0;
        for (j = 0; j < d->n; j++)
            known |= !strcmp(d->nodes[j].name, cn->name);
        if (known)
            continue;
        if (d->n == d->cap) {
            int cap = d->cap ? 2 * d->cap : 8;
            na_sc_dir_node_t *nn = realloc(d->nodes, (size_t)cap * sizeof(*nn));
            if (nn == NULL)
                return na_err(NA_ERR_NOMEM, "storage directory: out of memory");
            d->nodes = nn;
            d->cap = cap;
        }
        memset(&d->nodes[d->n], 0, sizeof(d->nodes[0]));
        snprintf(d->nodes[d->n].name, sizeof(d->nodes[0].name), "%s", cn->name);
        snprintf(d->nodes[d->n].host, sizeof(d->nodes[0].host), "%s", cn->host);
        d->nodes[d->n].port = (int)cn->port;
        if (!first)
            na_log_info("storage directory: %s (%s:%ld) joined the layout", cn->name,
                        cn->host, cn->port);
        d->n++;
    }
    return NA_OK;
}

/* (Re)load the layout if the file changed. */
static na_status_t na_sc_dir_load(na_sc_dir_t *d, int first)
{
    na_cfg_t *cfg;
    na_status_t st;

    if (!na_sc_dir_file_changed(d->path, &d->seen) && !first)
        return NA_OK;                       /* (a failed load is retried at the next change) */
    st = na_cfg_load(d->path, &cfg);
    if (st != NA_OK) {
        if (!first)
            na_log_warn("storage directory: %s changed but does not load: %s", d->path,
                        na_errmsg());
        return st;
    }
    st = na_sc_dir_merge(d, cfg, first);
    na_cfg_destroy(cfg);
    return st;
}

na_status_t na_sc_dir_create(na_ses_t *ses, const char *path, unsigned retry_ms,
                             na_sc_dir_t **dir_p)
{
    size_t len = strlen(path);
    na_sc_dir_t *d = calloc(1, sizeof(*d) + len + 1);
    na_status_t st;

    if (d == NULL)
        return na_err(NA_ERR_NOMEM, "storage directory: out of memory");
    d->ses = ses;
    d->retry_ns = (uint64_t)(retry_ms ? retry_ms : 1000) * 1000000ull;
    memcpy(d->path, path, len + 1);
    st = na_sc_dir_load(d, 1);
    if (st != NA_OK) {
        na_sc_dir_destroy(d);
        return st;
    }
    *dir_p = d;
    return NA_OK;
}

void na_sc_dir_destroy(na_sc_dir_t *d)
{
    int i;
    if (d == NULL)
        return;
    for (i = 0; i < d->n; i++)
        na_peer_close(d->nodes[i].sc, 0, "done");
    free(d->nodes);
    free(d);
}

int na_sc_dir_refresh(na_sc_dir_t *d)
{
    uint64_t now;
    int i, joined = 0;

    (void)na_sc_dir_load(d, 0);
    now = na_xp_now_ns();
    for (i = 0; i < d->n; i++) {
        na_sc_dir_node_t *e = &d->nodes[i];
        if (e->sc != NULL || now < e->next_try_ns)
            continue;
        e->next_try_ns = now + d->retry_ns;
        if (na_ses_connect(d->ses, e->host, e->port, &e->sc) != NA_OK) {
            e->sc = NULL;
            na_log_debug("storage directory: %s not reachable yet: %s", e->name, na_errmsg());
            continue;
        }
        na_log_info("storage directory: connected to storage node %s (%s:%d)", e->name,
                    e->host, e->port);
        joined++;
    }
    return joined;
}

int na_sc_dir_reload(na_sc_dir_t *d)
{
    (void)na_sc_dir_load(d, 0);
    return d->n;
}

const char *na_sc_dir_host(const na_sc_dir_t *d, int i, int *port_p)
{
    *port_p = i >= 0 && i < d->n ? d->nodes[i].port : 0;
    return i >= 0 && i < d->n ? d->nodes[i].host : "?";
}

int na_sc_dir_count(const na_sc_dir_t *d) { return d->n; }

const char *na_sc_dir_name(const na_sc_dir_t *d, int i)
{
    return i >= 0 && i < d->n ? d->nodes[i].name : "?";
}

na_peer_t *na_sc_dir_conn(na_sc_dir_t *d, int i)
{
    return i >= 0 && i < d->n ? d->nodes[i].sc : NULL;
}

void na_sc_dir_lost(na_sc_dir_t *d, int i)
{
    if (i < 0 || i >= d->n || d->nodes[i].sc == NULL)
        return;
    na_peer_close(d->nodes[i].sc, 0, "done");
    d->nodes[i].sc = NULL;
    d->nodes[i].next_try_ns = na_xp_now_ns() + d->retry_ns;
}
