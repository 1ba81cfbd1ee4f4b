/* common/config.c — loading a cluster layout: read the file, parse it with
 * libyaml's event API into a small positioned tree, bind it against the key
 * table (config_schema.c), then check what spans several keys (unique names
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

/* ---- messages and tree ------------------------------------------------- */

na_status_t na_cfg_errat(const na_cfg_parse_t *p, const na_yn_t *n, na_status_t st,
                         const char *fmt, ...)
{
    char msg[768], esc[1024];
    size_t i, o = 0;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* Values quoted in the message may hold control characters ("a\nb"):
     * escape them so that the message stays one line. */
    for (i = 0; msg[i] != '\0' && o + 5 < sizeof(esc); i++) {
        unsigned char c = (unsigned char)msg[i];
        if (c == '\n' || c == '\t' || c == '\r')
            o += (size_t)snprintf(esc + o, sizeof(esc) - o, "\\%c",
                                  c == '\n' ? 'n' : c == '\t' ? 't' : 'r');
        else if (c < 0x20 || c == 0x7f)
            o += (size_t)snprintf(esc + o, sizeof(esc) - o, "\\x%02x", c);
        else
            esc[o++] = (char)c;
    }
    esc[o] = '\0';
    return na_err(st, "%s:%d:%d: %s", p->file, n ? n->line : 1, n ? n->col : 1, esc);
}

na_yn_t *na_cfg_yn_get(const na_yn_t *m, const char *key)
{
    size_t i;

    if (m == NULL || m->kind != NA_YN_MAP)
        return NULL;
    for (i = 0; i + 1 < m->n; i += 2)
        if (m->items[i]->kind == NA_YN_SCALAR && !strcmp(m->items[i]->text, key))
            return m->items[i + 1];
    return NULL;
}

/* A new node of `kind` at `mark`, owned by the arena; NULL when out of memory. */
static na_yn_t *na_cfg_yn_new(na_cfg_parse_t *p, na_yn_kind_t kind, const yaml_mark_t *mark)
{
    na_yn_t *n = calloc(1, sizeof(*n));

    if (n == NULL)
        return NULL;
    n->kind = kind;
    n->line = (int)mark->line + 1;
    n->col = (int)mark->column + 1;
    n->next_alloc = p->all;
    p->all = n;
    return n;
}

/* Append child to parent->items, growing it; fails only with NA_ERR_NOMEM. */
static na_status_t na_cfg_yn_append(na_cfg_parse_t *p, na_yn_t *parent, na_yn_t *child)
{
    if (parent->n == parent->cap) {
        size_t cap = parent->cap ? parent->cap * 2 : 8;
        na_yn_t **items = realloc(parent->items, cap * sizeof(*items));
        if (items == NULL)
            return na_err(NA_ERR_NOMEM, "%s: out of memory", p->file);
        parent->items = items;
        parent->cap = cap;
    }
    parent->items[parent->n++] = child;
    return NA_OK;
}

/* Register anchor `name` for node (a later one with the same name wins); NA_ERR_NOMEM only. */
static na_status_t na_cfg_anchor_add(na_cfg_parse_t *p, const char *name, na_yn_t *node)
{
    if (p->n_anchors == p->cap_anchors) {
        size_t cap = p->cap_anchors ? p->cap_anchors * 2 : 8;
        na_cfg_anchor_t *a = realloc(p->anchors, cap * sizeof(*a));
        if (a == NULL)
            return na_err(NA_ERR_NOMEM, "%s: out of memory", p->file);
        p->anchors = a;
        p->cap_anchors = cap;
    }
    p->anchors[p->n_anchors].name = strdup(name);
    if (p->anchors[p->n_anchors].name == NULL)
        return na_err(NA_ERR_NOMEM, "%s: out of memory", p->file);
    p->anchors[p->n_anchors++].node = node;
    return NA_OK;
}

/* Free every tree node and anchor of the parse context. Cannot fail. */
static void na_cfg_parse_cleanup(na_cfg_parse_t *p)
{
    size_t i;

    while (p->all != NULL) {
        na_yn_t *n = p->all;
        p->all = n->next_alloc;
        free(n->text);
        free(n->items);
        free(n->anchor);
        free(n);
    }
    for (i = 0; i < p->n_anchors; i++)
        free(p->anchors[i].name);
    free(p->anchors);
    p->anchors = NULL;
    p->n_anchors = p->cap_anchors = 0;
    p->root = NULL;
}

/* Line and column (1-based) of byte offset `off` in buf. */
static void na_cfg_offset_pos(const unsigned char *buf, size_t len, size_t off, int *line,
                              int *col)
{
    size_t i, bol = 0;

    *line = 1;
    for (i = 0; i < off && i < len; i++)
        if (buf[i] == '\n') {
            (*line)++;
            bol = i + 1;
        }
    *col = (int)(off - bol) + 1;
}

/* Turn libyaml's error into "file:line:col: ..."; returns NA_ERR_FORMAT (NA_ERR_NOMEM for
 * memory). */
static na_status_t na_cfg_syntax_error(na_cfg_parse_t *p, const yaml_parser_t *y,
                                       const unsigned char *buf, size_t len)
{
    na_yn_t at = { 0 };

    if (y->error == YAML_MEMORY_ERROR)
        return na_err(NA_ERR_NOMEM, "%s: out of memory while parsing", p->file);
    if (y->error == YAML_READER_ERROR) {
        na_cfg_offset_pos(buf, len, y->problem_offset, &at.line, &at.col);
        if (y->problem_value != -1)
            return na_cfg_errat(p, &at, NA_ERR_FORMAT, "invalid text: %s (#x%X); a layout is "
                                "UTF-8 text", y->problem, (unsigned)y->problem_value);
        return na_cfg_errat(p, &at, NA_ERR_FORMAT, "invalid text: %s; a layout is UTF-8 text",
                            y->problem ? y->problem : "unreadable input");
    }
    at.line = (int)y->problem_mark.line + 1;
    at.col = (int)y->problem_mark.column + 1;
    if (y->context != NULL)
        return na_cfg_errat(p, &at, NA_ERR_FORMAT, "YAML syntax error: %s %s (from line %d)",
                            y->problem ? y->problem : "?", y->context,
                            (int)y->context_mark.line + 1);
    return na_cfg_errat(p, &at, NA_ERR_FORMAT, "YAML syntax error: %s",
                        y->problem ? y->problem : "?");
}

/* Handle one parser event: build the tree. *done is set at the stream end. */
static na_status_t na_cfg_on_event(na_cfg_parse_t *p, const yaml_event_t *ev, na_yn_t **stack,
                                   int *depth, int *docs, int *done)
{
    na_yn_t at = { .line = (int)ev->start_mark.line + 1, .col = (int)ev->start_mark.column + 1 };
    na_yn_t *n = NULL;
    const char *anchor = NULL, *tag;
    size_t i;
    na_status_t st;

    switch (ev->type) {
    case YAML_STREAM_END_EVENT:
        *done = 1;
        return NA_OK;
    case YAML_DOCUMENT_START_EVENT:
        if (++*docs > 1)
            return na_cfg_errat(p, &at, NA_ERR_FORMAT, "a layout is one YAML document; "
                                "a second one starts here");
        return NA_OK;
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        n = stack[--*depth];
        if (n->anchor != NULL)
            return na_cfg_anchor_add(p, n->anchor, n);
        return NA_OK;
    case YAML_ALIAS_EVENT:
        for (i = p->n_anchors; i > 0; i--)
            if (!strcmp(p->anchors[i - 1].name, (const char *)ev->data.alias.anchor)) {
                n = p->anchors[i - 1].node;
                break;
            }
        if (n == NULL)
            return na_cfg_errat(p, &at, NA_ERR_FORMAT, "alias '*%s' names no complete anchor "
                                "before it", (const char *)ev->data.alias.anchor);
        break;
    case YAML_SCALAR_EVENT:
        n = na_cfg_yn_new(p, NA_YN_SCALAR, &ev->start_mark);
        if (n == NULL || (n->text = malloc(ev->data.scalar.length + 1)) == NULL)
            return na_err(NA_ERR_NOMEM, "%s: out of memory", p->file);
        memcpy(n->text, ev->data.scalar.value, ev->data.scalar.length);
        n->text[ev->data.scalar.length] = '\0';
        n->len = ev->data.scalar.length;
        /* An explicit string tag (`!!str 14602`, `! 14602`) quotes like quotes do. */
        tag = (const char *)ev->data.scalar.tag;
        n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                   (tag == NULL || (strcmp(tag, YAML_STR_TAG) != 0 && strcmp(tag, "!") != 0));
        if (memchr(n->text, '\0', n->len) != NULL)
            return na_cfg_errat(p, n, NA_ERR_FORMAT, "a value holds a NUL character");
        anchor = (const char *)ev->data.scalar.anchor;
        if (anchor != NULL && (st = na_cfg_anchor_add(p, anchor, n)) != NA_OK)
            return st;
        break;
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
        if (*depth >= NA_CFG_MAX_DEPTH)
            return na_cfg_errat(p, &at, NA_ERR_FORMAT, "nesting deeper than %d levels",
                                NA_CFG_MAX_DEPTH);
        n = na_cfg_yn_new(p, ev->type == YAML_SEQUENCE_START_EVENT ? NA_YN_SEQ : NA_YN_MAP,
                          &ev->start_mark);
        if (n == NULL)
            return na_err(NA_ERR_NOMEM, "%s: out of memory", p->file);
        anchor = ev->type == YAML_SEQUENCE_START_EVENT
                     ? (const char *)ev->data.sequence_start.anchor
                     : (const char *)ev->data.mapping_start.anchor;
        /* Registered when the container closes: an alias inside its own
         * anchor (a cycle) then names no anchor and is refused. */
        if (anchor != NULL && (n->anchor = strdup(anchor)) == NULL)
            return na_err(NA_ERR_NOMEM, "%s: out of memory", p->file);
        break;
    default:
        return NA_OK;
    }
    /* Attach n to its parent (or make it the root). */
    if (*depth == 0)
        p->root = n;
    else if ((st = na_cfg_yn_append(p, stack[*depth - 1], n)) != NA_OK)
        return st;
    if (ev->type == YAML_SEQUENCE_START_EVENT || ev->type == YAML_MAPPING_START_EVENT)
        stack[(*depth)++] = n;
    return NA_OK;
}

/* Parse buf into p->root (event API). Fails on syntax, encoding, depth, aliases, several
 * documents, an empty file. */
static na_status_t na_cfg_parse_yaml(na_cfg_parse_t *p, const unsigned char *buf, size_t len)
{
    yaml_parser_t y;
    yaml_event_t ev;
    na_yn_t *stack[NA_CFG_MAX_DEPTH];
    int depth = 0, docs = 0, done = 0;
    na_status_t st = NA_OK;

    if (!yaml_parser_initialize(&y))
        return na_err(NA_ERR_NOMEM, "%s: cannot initialize the YAML parser", p->file);
    yaml_parser_set_input_string(&y, buf, len);
    while (!done && st == NA_OK) {
        if (!yaml_parser_parse(&y, &ev)) {
            st = na_cfg_syntax_error(p, &y, buf, len);
            break;
        }
        st = na_cfg_on_event(p, &ev, stack, &depth, &docs, &done);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&y);
    if (st == NA_OK && (p->root == NULL || (p->root->kind == NA_YN_SCALAR && p->root->plain &&
                                            p->root->len == 0)))
        return na_err(NA_ERR_FORMAT, "%s:1:1: empty layout (expected a mapping with cluster, "
                      "compute and storage)", p->file);
    return st;
}

/* ---- ${VAR} expansion -------------------------------------------------- */

typedef struct {
    char  *s;
    size_t n, cap;
} na_cfg_sb_t;

/* Append n bytes to b (bounded by NA_CFG_MAX_STRING); -1 when too long or out of memory. */
static int na_cfg_sb_put(na_cfg_sb_t *b, const char *s, size_t n)
{
    if (b->n + n + 1 > NA_CFG_MAX_STRING)
        return -1;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        char *t;
        while (cap < b->n + n + 1)
            cap *= 2;
        t = realloc(b->s, cap);
        if (t == NULL)
            return -1;
        b->s = t;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
    return 0;
}

/* Expand s[0..len) into b; defaults may themselves hold references. */
static na_status_t na_cfg_expand_into(const na_cfg_parse_t *p, const na_yn_t *n, const char *s,
                                      size_t len, na_cfg_sb_t *b, int level)
{
    size_t i = 0;
    na_status_t st;

    if (level > 8)
        return na_cfg_errat(p, n, NA_ERR_FORMAT, "${...} nested deeper than 8 levels");
    while (i < len) {
        size_t j, name_end, close, nest = 0;
        char name[128];
        const char *val;

        if (!(s[i] == '$' && i + 1 < len && s[i + 1] == '{')) {
            if (na_cfg_sb_put(b, s + i, 1) != 0)
                goto err_long;
            i++;
            continue;
        }
        /* Find the matching close brace. */
        for (close = i + 2; close < len; close++) {
            if (s[close] == '{')
                nest++;
            else if (s[close] == '}' && nest-- == 0)
                break;
        }
        if (close >= len)
            return na_cfg_errat(p, n, NA_ERR_FORMAT, "unterminated '${' in '%s'", n->text);
        for (name_end = i + 2; name_end < close && (isalnum((unsigned char)s[name_end]) ||
                                                    s[name_end] == '_'); name_end++)
            ;
        j = name_end - (i + 2);
        if (j == 0 || j >= sizeof(name) || isdigit((unsigned char)s[i + 2]) ||
            (name_end != close && !(close - name_end >= 2 && s[name_end] == ':' &&
                                    s[name_end + 1] == '-')))
            return na_cfg_errat(p, n, NA_ERR_FORMAT, "malformed reference '%.*s' (use ${NAME} "
                                "or ${NAME:-default})", (int)(close - i + 1), s + i);
        memcpy(name, s + i + 2, j);
        name[j] = '\0';
        val = getenv(name);
        if (val != NULL && val[0] != '\0') {
            if (na_cfg_sb_put(b, val, strlen(val)) != 0)
                goto err_long;
        } else if (name_end != close) {
            st = na_cfg_expand_into(p, n, s + name_end + 2, close - name_end - 2, b, level + 1);
            if (st != NA_OK)
                return st;
        } else {
            return na_cfg_errat(p, n, NA_ERR_NOT_FOUND, "environment variable '%s' is not set "
                                "(write ${%s:-default} to give a default)", name, name);
        }
        i = close + 1;
    }
    return NA_OK;
err_long:
    return na_cfg_errat(p, n, NA_ERR_RANGE, "value longer than %d bytes after expansion",
                        NA_CFG_MAX_STRING - 1);
}

na_status_t na_cfg_expand(const na_cfg_parse_t *p, const na_yn_t *n, char **out_p)
{
    na_cfg_sb_t b = { 0 };
    na_status_t st;

    if (na_cfg_sb_put(&b, "", 0) != 0)
        return na_err(NA_ERR_NOMEM, "%s: out of memory", p->file);
    st = na_cfg_expand_into(p, n, n->text, n->len, &b, 0);
    if (st != NA_OK) {
        free(b.s);
        return st;
    }
    *out_p = b.s;
    return NA_OK;
}

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

/* The YAML mapping of a node (compute or storage list entry), for positions. */
const na_yn_t *na_cfg_node_yn(const na_cfg_parse_t *p, const na_cfg_node_t *node)
{
    const na_yn_t *list = na_cfg_yn_get(p->root, node->role == NA_CFG_ROLE_COMPUTE ? "compute"
                                                                                   : "storage");
    if (list == NULL || list->kind != NA_YN_SEQ || (size_t)node->index >= list->n)
        return p->root;
    return list->items[node->index];
}

/* Position of `key` in mapping m, else of m itself. */
const na_yn_t *na_cfg_key_at(const na_yn_t *m, const char *key)
{
    const na_yn_t *v = na_cfg_yn_get(m, key);
    return v != NULL ? v : m;
}

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
static na_status_t na_cfg_assemble(na_cfg_parse_t *p, na_cfg_doc_t *doc, na_cfg_t *cfg)
{
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
    /* The sections are plain structs: move them over. */
    cfg->cluster = doc->cluster;
    cfg->model = doc->model;
    cfg->transport = doc->transport;
    cfg->parallel = doc->parallel;
    cfg->kv = doc->kv;
    cfg->xcache = doc->xcache;
    memset(&doc->cluster, 0, sizeof(doc->cluster));
    memset(&doc->model, 0, sizeof(doc->model));
    memset(&doc->transport, 0, sizeof(doc->transport));
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
    na_cfg_doc_t doc;
    na_cfg_t *cfg;
    unsigned char *buf;
    size_t len;
    struct stat sb;
    na_status_t st;

    memset(&doc, 0, sizeof(doc));
    st = na_cfg_read_file(path, NA_CFG_MAX_FILE_BYTES, &buf, &len, &sb);
    if (st != NA_OK)
        return st;
    cfg = calloc(1, sizeof(*cfg));
    if (cfg == NULL || (cfg->file = strdup(path)) == NULL) {
        st = na_err(NA_ERR_NOMEM, "%s: out of memory", path);
        goto err_free_buf;
    }
    if ((st = na_cfg_set_dir(&p, cfg, path)) != NA_OK)
        goto err_free_buf;
    if ((st = na_cfg_parse_yaml(&p, buf, len)) != NA_OK)
        goto err_cleanup_parse;
    if ((st = na_cfg_bind_doc(&p, &doc)) != NA_OK)
        goto err_free_doc;
    if ((st = na_cfg_assemble(&p, &doc, cfg)) != NA_OK)
        goto err_free_doc;
    if ((st = na_cfg_check_settings(&p, cfg)) != NA_OK ||
        (st = na_cfg_check_nodes(&p, cfg)) != NA_OK ||
        (st = na_cfg_check_engines(&p, cfg)) != NA_OK ||
        (st = na_cfg_load_secret(&p, cfg)) != NA_OK ||
        (st = na_cfg_check_kv_dirs(&p, cfg)) != NA_OK)
        goto err_free_doc;
    na_cfg_parse_cleanup(&p);
    free(buf);
    *cfg_p = cfg;
    return NA_OK;

err_free_doc:
    na_cfg_doc_free(&doc);
err_cleanup_parse:
    na_cfg_parse_cleanup(&p);
err_free_buf:
    free(buf);
    na_cfg_destroy(cfg);
    return st;
}

void na_cfg_destroy(na_cfg_t *cfg)
{
    int i;

    if (cfg == NULL)
        return;
    for (i = 0; i < cfg->n_nodes; i++)
        na_cfg_node_cleanup(&cfg->nodes[i]);
    free(cfg->nodes);
    free(cfg->slots);
    free(cfg->cluster.name);
    free(cfg->cluster.secret_file);
    free(cfg->model.path);
    free(cfg->model.tokenizer);
    free(cfg->transport.tls);
    if (cfg->secret != NULL) {
        explicit_bzero(cfg->secret, cfg->secret_len);
        free(cfg->secret);
    }
    free(cfg->dir);
    free(cfg->file);
    free(cfg);
}
