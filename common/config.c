/* common/config.c — loading a cluster layout: read the file, parse it with
 * libyaml's event API into a small positioned tree (config_yaml.c), bind it
 * against the key table (config_schema.c), then check what spans several keys (unique names
 * and addresses, pipelining vs compute nodes, budgets, the secret, the KV
 * directories) and put the nodes in rank order. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "common/mapfile.h"
#include "config_internal.h"
#include "log.h"

/* ---- files ------------------------------------------------------------- */

/* Read a whole regular file of at most max bytes into a new buffer. */
static na_status_t na_cfg_read_file(const char *path, size_t max, unsigned char **buf_p,
                                    size_t *len_p, struct stat *sb)
{
    unsigned char *buf;
    size_t got = 0;
    int fd = -1;
    na_status_t st = na_open_regular(path, "file", NA_ERR_IO, &fd, sb);

    if (st != NA_OK)
        return st == NA_ERR_IO && errno == ENOENT ? NA_ERR_NOT_FOUND : st;
    if ((size_t)sb->st_size > max) {
        close(fd);
        return na_err(NA_ERR_RANGE, "%s:1:1: file is larger than %zu bytes", path, max);
    }
    buf = malloc((size_t)sb->st_size + 1);
    if (buf == NULL) {
        close(fd);
        return na_err(NA_ERR_NOMEM, "'%s': out of memory", path);
    }
    while (got < (size_t)sb->st_size) {
        ssize_t r = read(fd, buf + got, (size_t)sb->st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = errno;
            free(buf);
            close(fd);
            return na_err(NA_ERR_IO, "read '%s': %s", path, r < 0 ? strerror(e) : "short read");
        }
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    *buf_p = buf;
    *len_p = got;
    return NA_OK;
}

/* ---- which hosts are this machine -------------------------------------- */

typedef struct {
    char            hostname[256];
    struct ifaddrs *ifs;          /* from getifaddrs, NULL if unavailable */
} na_cfg_here_t;

/* 1 when host names this machine: loopback, the host name, an interface address (no DNS). */
static int na_cfg_host_is_local(const na_cfg_here_t *h, const char *host)
{
    const struct ifaddrs *ifa;
    size_t hl = strlen(h->hostname);
    char addr[INET6_ADDRSTRLEN];

    if (!strcmp(host, "localhost") || !strcmp(host, "::1") || !strcmp(host, "0.0.0.0") ||
        !strncmp(host, "127.", 4) || !strcmp(host, "ip6-localhost"))
        return 1;
    if (hl > 0 && (!strcmp(host, h->hostname) ||
                   (!strncmp(host, h->hostname, strlen(host)) && h->hostname[strlen(host)] == '.')))
        return 1;
    for (ifa = h->ifs; ifa != NULL; ifa = ifa->ifa_next) {
        const void *a;
        if (ifa->ifa_addr == NULL)
            continue;
        if (ifa->ifa_addr->sa_family == AF_INET)
            a = &((const struct sockaddr_in *)ifa->ifa_addr)->sin_addr;
        else if (ifa->ifa_addr->sa_family == AF_INET6)
            a = &((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr;
        else
            continue;
        if (inet_ntop(ifa->ifa_addr->sa_family, a, addr, sizeof(addr)) != NULL &&
            !strcmp(addr, host))
            return 1;
    }
    return 0;
}

/* ---- cross-key checks -------------------------------------------------- */

/* Position of key `key` in top-level section `sec`, else of the section, else of the root. */
static const na_yn_t *na_cfg_section_at(const na_cfg_parse_t *p, const char *sec,
                                        const char *key)
{
    const na_yn_t *m = na_cfg_yn_get(p->root, sec);
    return m != NULL ? na_cfg_key_at(m, key) : p->root;
}

/* Unique node names and host:port pairs. NA_ERR_INVALID at the second occurrence. */
static na_status_t na_cfg_check_nodes(na_cfg_parse_t *p, na_cfg_t *cfg)
{
    int i, j;

    for (i = 0; i < cfg->n_nodes; i++) {
        const na_cfg_node_t *a = &cfg->nodes[i];
        for (j = 0; j < i; j++) {
            const na_cfg_node_t *b = &cfg->nodes[j];
            if (!strcmp(a->name, b->name))
                return na_cfg_errat(p, na_cfg_key_at(na_cfg_node_yn(p, a), "name"),
                                    NA_ERR_INVALID, "duplicate node name '%s' (also %s node "
                                    "at line %d)", a->name, na_cfg_role_name(b->role),
                                    na_cfg_node_yn(p, b)->line);
            if (a->port != 0 && a->port == b->port &&
                (!strcmp(a->host, b->host) || (a->is_local && b->is_local)))
                return na_cfg_errat(p, na_cfg_key_at(na_cfg_node_yn(p, a), "port"),
                                    NA_ERR_INVALID, "duplicate address %s:%ld (node '%s' uses "
                                    "%s:%ld too)", a->host, a->port, b->name, b->host, b->port);
        }
    }
    return NA_OK;
}

/* Whitespace trimmed from a secret: space, tab, CR, LF. */
static int na_cfg_isspace(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* Read the secret: the file's bytes, whitespace trimmed at both ends. */
static na_status_t na_cfg_load_secret(na_cfg_parse_t *p, na_cfg_t *cfg)
{
    const na_yn_t *at = na_cfg_section_at(p, "cluster", "secret_file");
    unsigned char *buf;
    size_t len, b = 0, e;
    struct stat sb;
    na_status_t st;

    st = na_cfg_read_file(cfg->cluster.secret_file, NA_CFG_SECRET_MAX, &buf, &len, &sb);
    if (st != NA_OK)
        return na_cfg_errat(p, at, st, "cluster.secret_file: %s", na_errmsg());
    e = len;
    while (b < e && na_cfg_isspace(buf[b]))
        b++;
    while (e > b && na_cfg_isspace(buf[e - 1]))
        e--;
    if (e - b < NA_CFG_SECRET_MIN) {
        free(buf);
        return na_cfg_errat(p, at, NA_ERR_RANGE, "cluster.secret_file: '%s' holds %zu bytes, "
                            "a secret needs at least %d", cfg->cluster.secret_file, e - b,
                            NA_CFG_SECRET_MIN);
    }
    memmove(buf, buf + b, e - b);
    cfg->secret = buf;
    cfg->secret_len = e - b;
    cfg->secret_is_dev = cfg->secret_len >= strlen(NA_CFG_DEV_SECRET_MARK) &&
                         !memcmp(buf, NA_CFG_DEV_SECRET_MARK, strlen(NA_CFG_DEV_SECRET_MARK));
    if (!cfg->secret_is_dev && (sb.st_mode & (S_IRGRP | S_IROTH)))
        na_log_warn("%s: secret file '%s' is readable by other users (mode %03o); "
                    "use chmod 600", p->file, cfg->cluster.secret_file,
                    (unsigned)(sb.st_mode & 0777));
    return NA_OK;
}

/* Checks across keys of the settings sections; also sets transport.tls_kind. */
static na_status_t na_cfg_check_settings(na_cfg_parse_t *p, na_cfg_t *cfg)
{
    const char *tls = cfg->transport.tls;

    cfg->transport.tls_kind = !strcmp(tls, "auto") ? NA_CFG_TLS_AUTO
                            : !strcmp(tls, "shm")  ? NA_CFG_TLS_SHM
                            : !strcmp(tls, "tcp")  ? NA_CFG_TLS_TCP : NA_CFG_TLS_RAW;
    if (cfg->transport.peer_timeout_ms < 2 * cfg->transport.heartbeat_ms)
        return na_cfg_errat(p, na_cfg_section_at(p, "transport", "peer_timeout_ms"),
                            NA_ERR_INVALID, "transport.peer_timeout_ms (%ld) must be at least "
                            "2 x heartbeat_ms (%ld)", cfg->transport.peer_timeout_ms,
                            cfg->transport.heartbeat_ms);
    if (cfg->parallel.pipelining == NA_CFG_PIPE_ROTATIONAL && cfg->n_compute < 2)
        return na_cfg_errat(p, na_cfg_section_at(p, "parallel", "pipelining"), NA_ERR_INVALID,
                            "parallel.pipelining: rotational needs at least 2 compute nodes, "
                            "the layout has %d", cfg->n_compute);
    if (cfg->xcache.enabled && cfg->xcache.host_mb < 1)
        return na_cfg_errat(p, na_cfg_section_at(p, "xcache", "host_mb"), NA_ERR_RANGE,
                            "xcache.host_mb: a budget of 0 with xcache enabled");
    if (cfg->xcache.enabled && !(cfg->xcache.share > 0))
        return na_cfg_errat(p, na_cfg_section_at(p, "xcache", "share"), NA_ERR_RANGE,
                            "xcache.share: must be > 0 with xcache enabled");
    return NA_OK;
}

/* ---- assembling -------------------------------------------------------- */

/* Move the bound compute and storage lists into cfg->nodes in rank order and
 * number the device slots. Takes the lists out of doc. */
static na_status_t na_cfg_assemble(na_cfg_parse_t *p, na_cfg_doc_t *doc)
{
    na_cfg_t *cfg = &doc->cfg;
    na_cfg_here_t here = { { 0 }, NULL };
    long i, d, n = doc->n_compute + doc->n_storage;
    int slot = 0;

    if (n > NA_CFG_MAX_NODES)
        return na_cfg_errat(p, p->root, NA_ERR_RANGE, "%ld nodes, at most %d", n,
                            NA_CFG_MAX_NODES);
    cfg->nodes = calloc((size_t)n, sizeof(*cfg->nodes));
    if (cfg->nodes == NULL)
        return na_err(NA_ERR_NOMEM, "%s: out of memory", p->file);
    for (i = 0; i < doc->n_compute; i++)
        cfg->nodes[i] = doc->compute[i];
    for (i = 0; i < doc->n_storage; i++)
        cfg->nodes[doc->n_compute + i] = doc->storage[i];
    cfg->n_nodes = (int)n;
    cfg->n_compute = (int)doc->n_compute;
    cfg->n_storage = (int)doc->n_storage;
    free(doc->compute);
    free(doc->storage);
    doc->compute = doc->storage = NULL;
    doc->n_compute = doc->n_storage = 0;

    if (gethostname(here.hostname, sizeof(here.hostname) - 1) != 0)
        here.hostname[0] = '\0';
    if (getifaddrs(&here.ifs) != 0)
        here.ifs = NULL;
    for (i = 0; i < n; i++) {
        na_cfg_node_t *node = &cfg->nodes[i];
        node->role = i < cfg->n_compute ? NA_CFG_ROLE_COMPUTE : NA_CFG_ROLE_STORAGE;
        node->index = (int)(i < cfg->n_compute ? i : i - cfg->n_compute);
        node->rank = (int)i;
        node->is_local = na_cfg_host_is_local(&here, node->host);
        node->first_slot = slot;
        slot += (int)node->n_devices;
    }
    if (here.ifs != NULL)
        freeifaddrs(here.ifs);
    cfg->slots = calloc((size_t)(slot > 0 ? slot : 1), sizeof(*cfg->slots));
    if (cfg->slots == NULL)
        return na_err(NA_ERR_NOMEM, "%s: out of memory", p->file);
    for (i = 0; i < n; i++)
        for (d = 0; d < cfg->nodes[i].n_devices; d++) {
            cfg->slots[cfg->n_slots].node = (int)i;
            cfg->slots[cfg->n_slots++].dev = (int)d;
        }
    return NA_OK;
}

/* Resolve the layout's directory (realpath); cfg owns it, p borrows it. */
static na_status_t na_cfg_set_dir(na_cfg_parse_t *p, na_cfg_t *cfg, const char *path)
{
    char *copy = strdup(path);
    char *real;

    if (copy == NULL)
        return na_err(NA_ERR_NOMEM, "%s: out of memory", path);
    real = realpath(dirname(copy), NULL);
    free(copy);
    if (real == NULL)
        return na_err(NA_ERR_IO, "%s: cannot resolve its directory: %s", path, strerror(errno));
    cfg->dir = real;
    p->dir = real;
    return NA_OK;
}

na_status_t na_cfg_load(const char *path, na_cfg_t **cfg_p)
{
    na_cfg_parse_t p = { .file = path };
    na_cfg_doc_t *doc;
    na_cfg_t *cfg;
    unsigned char *buf;
    size_t len;
    struct stat sb;
    na_status_t st;

    st = na_cfg_read_file(path, NA_CFG_MAX_FILE_BYTES, &buf, &len, &sb);
    if (st != NA_OK)
        return st;
    doc = calloc(1, sizeof(*doc));
    cfg = (na_cfg_t *)doc;              /* its first member (NULL with doc) */
    if (cfg == NULL || (cfg->file = strdup(path)) == NULL)
        st = na_err(NA_ERR_NOMEM, "%s: out of memory", path);
    else if ((st = na_cfg_set_dir(&p, cfg, path)) == NA_OK &&
             (st = na_cfg_parse_yaml(&p, buf, len)) == NA_OK &&
             (st = na_cfg_bind_doc(&p, doc)) == NA_OK &&
             (st = na_cfg_assemble(&p, doc)) == NA_OK &&
             (st = na_cfg_check_settings(&p, cfg)) == NA_OK &&
             (st = na_cfg_check_nodes(&p, cfg)) == NA_OK &&
             (st = na_cfg_check_engines(&p, cfg)) == NA_OK &&
             (st = na_cfg_load_secret(&p, cfg)) == NA_OK)
        st = na_cfg_check_kv_dirs(&p, cfg);
    /* One ending for success and failure: the parse tree and the file's
     * bytes go; a failure frees cfg with what a step left bound in doc. */
    na_cfg_parse_cleanup(&p);
    free(buf);
    if (st != NA_OK) {
        na_cfg_destroy(cfg);
        return st;
    }
    *cfg_p = cfg;
    return NA_OK;
}

void na_cfg_destroy(na_cfg_t *cfg)
{
    na_cfg_doc_t *doc = (na_cfg_doc_t *)cfg;    /* cfg heads its doc (na_cfg_load) */
    int i;

    if (cfg == NULL)
        return;
    for (i = 0; i < cfg->n_nodes; i++)
        na_cfg_node_cleanup(&cfg->nodes[i]);
    free(cfg->nodes);
    free(cfg->slots);
    na_cfg_doc_free(doc);   /* what the key table bound: sections' strings, lists left */
    if (cfg->secret != NULL) {
        explicit_bzero(cfg->secret, cfg->secret_len);
        free(cfg->secret);
    }
    free(cfg->dir);
    free(cfg->file);
    free(doc);
}
