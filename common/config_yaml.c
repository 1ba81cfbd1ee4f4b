/* common/config_yaml.c — the layout's YAML as a small positioned tree
 * (config_internal.h): libyaml's event API into na_yn_t nodes with their
 * line and column, anchors and aliases under budgets, lookups by key, the
 * position of a node's or a key's value for messages (na_cfg_errat), and
 * ${VAR} expansion of scalars. The floor of the config files: config.c (load
 * and cross-key checks), config_schema.c (the key table), config_plan.c and
 * config_paths.c call it; it calls none of them. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "common/grow.h"
#include "common/strbuf.h"
#include "config_internal.h"

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
    na_yn_t **items = na_grow(parent->items, &parent->cap, parent->n + 1, sizeof(*items), 8);

    if (items == NULL)
        return na_err(NA_ERR_NOMEM, "%s: out of memory", p->file);
    parent->items = items;
    parent->items[parent->n++] = child;
    return NA_OK;
}

/* Register anchor `name` for node (a later one with the same name wins); NA_ERR_NOMEM only. */
static na_status_t na_cfg_anchor_add(na_cfg_parse_t *p, const char *name, na_yn_t *node)
{
    na_cfg_anchor_t *a = na_grow(p->anchors, &p->cap_anchors, p->n_anchors + 1, sizeof(*a), 8);

    if (a == NULL)
        return na_err(NA_ERR_NOMEM, "%s: out of memory", p->file);
    p->anchors = a;
    p->anchors[p->n_anchors].name = strdup(name);
    if (p->anchors[p->n_anchors].name == NULL)
        return na_err(NA_ERR_NOMEM, "%s: out of memory", p->file);
    p->anchors[p->n_anchors++].node = node;
    return NA_OK;
}

void na_cfg_parse_cleanup(na_cfg_parse_t *p)
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

na_status_t na_cfg_parse_yaml(na_cfg_parse_t *p, const unsigned char *buf, size_t len)
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
    return na_strbuf_append(&b->s, &b->n, &b->cap, s, n);
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
