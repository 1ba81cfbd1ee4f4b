/* common/config_internal.h — shared between the files of the layout loader,
 * top-down: config.c (load, cross-key checks) → config_schema.c (the key
 * table and binder), config_plan.c (engines, the plan printer),
 * config_paths.c (KV directories) → config_yaml.c (the YAML tree, positions,
 * ${VAR} expansion). Not part of the public API. */
#ifndef NA_CONFIG_INTERNAL_H
#define NA_CONFIG_INTERNAL_H

#include <stddef.h>

#include "config.h"
#include "status.h"

/* A node of the parsed YAML document with its 1-based position. Nodes live in
 * an arena chain owned by the parse context; an alias is a second pointer to
 * its anchored node, so the tree is a DAG and nothing is copied. */
typedef enum { NA_YN_SCALAR = 0, NA_YN_MAP = 1, NA_YN_SEQ = 2 } na_yn_kind_t;

typedef struct na_yn {
    na_yn_kind_t   kind;
    int            line, col;     /* 1-based start of the node */
    char          *text;          /* scalar value, NUL-terminated (owned) */
    size_t         len;           /* strlen-like length of text (may hold NULs: rejected) */
    int            plain;         /* scalar written without quotes or block style */
    struct na_yn **items;         /* map: key0, value0, key1, ...; seq: elements */
    size_t         n, cap;        /* used / allocated entries of items */
    char          *anchor;        /* container anchor, registered when it closes (owned) */
    struct na_yn  *next_alloc;    /* arena chain */
} na_yn_t;

typedef struct {
    char    *name;                /* owned */
    na_yn_t *node;
} na_cfg_anchor_t;

/* Parse context: the file, its tree and the budgets that stop hostile input. */
typedef struct {
    const char      *file;        /* layout path as given, for messages */
    const char      *dir;         /* absolute directory of the layout */
    na_yn_t         *root;
    na_yn_t         *all;         /* arena chain of every node */
    na_cfg_anchor_t *anchors;     /* [n_anchors] */
    size_t           n_anchors, cap_anchors;
    long             visits;      /* nodes bound so far, aliases counted each time */
} na_cfg_parse_t;

#define NA_CFG_MAX_VISITS 200000  /* bound on alias expansion while binding */
#define NA_CFG_MAX_DEPTH  32      /* YAML nesting */
#define NA_CFG_MAX_STRING 4096    /* a scalar after ${VAR} expansion */

/* ---- the YAML tree (config_yaml.c, the floor of the config files) ---- */

/* Parse buf (len bytes) into p->root with libyaml's event API. Fails on
 * syntax, encoding, depth, aliases, several documents, an empty file. */
na_status_t na_cfg_parse_yaml(na_cfg_parse_t *p, const unsigned char *buf, size_t len);

/* Free every tree node and anchor of the parse context. Cannot fail. */
void na_cfg_parse_cleanup(na_cfg_parse_t *p);

/* Record "file:line:col: <message>" for node n (or the file start when n is
 * NULL) and return st. */
na_status_t na_cfg_errat(const na_cfg_parse_t *p, const na_yn_t *n, na_status_t st,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The value node of `key` in mapping m, or NULL (m may be NULL). */
na_yn_t *na_cfg_yn_get(const na_yn_t *m, const char *key);

/* The YAML mapping of a node (its compute/storage list entry; the document
 * root when absent), and the position of `key` in mapping m (else m). */
const na_yn_t *na_cfg_node_yn(const na_cfg_parse_t *p, const na_cfg_node_t *node);
const na_yn_t *na_cfg_key_at(const na_yn_t *m, const char *key);

/* Engines and compute devices of nodes on this machine are built into this
 * nearattn (common/config_plan.c); NA_ERR_UNSUPPORTED at the first that is not. */
na_status_t na_cfg_check_engines(na_cfg_parse_t *p, const na_cfg_t *cfg);

/* KV directories (common/config_paths.c): on this machine usable or
 * creatable (nothing is created), each path normalised in place, unique per
 * host. NA_ERR_IO / NA_ERR_INVALID at the offending path key. */
na_status_t na_cfg_check_kv_dirs(na_cfg_parse_t *p, na_cfg_t *cfg);

/* Expand ${VAR} and ${VAR:-default} in scalar n into a new string (*out_p,
 * owned by the caller). Fails with NA_ERR_NOT_FOUND for an unset variable
 * without default, NA_ERR_FORMAT for a malformed reference. */
na_status_t na_cfg_expand(const na_cfg_parse_t *p, const na_yn_t *n, char **out_p);

/* The document as bound from the key table: the sections straight into the
 * layout na_cfg_load returns (its first member, so that the layout is the
 * allocation and na_cfg_destroy finds the doc), the compute and storage
 * lists until they are merged into cfg.nodes in rank order. */
typedef struct {
    na_cfg_t       cfg;
    na_cfg_node_t *compute;   /* [n_compute] */
    long           n_compute;
    na_cfg_node_t *storage;   /* [n_storage] */
    long           n_storage;
} na_cfg_doc_t;

/* Bind the root mapping onto doc (zeroed by the caller) following the key
 * table: types, ranges, enums, defaults, unknown and duplicate keys. On
 * failure doc may hold partial allocations: free them with na_cfg_doc_free. */
na_status_t na_cfg_bind_doc(na_cfg_parse_t *p, na_cfg_doc_t *doc);

/* Free every string and list the binder allocated in doc (the sections of
 * doc->cfg included; nothing else of it). */
void na_cfg_doc_free(na_cfg_doc_t *doc);

/* Free the strings and device list of one node (not the node itself). */
void na_cfg_node_cleanup(na_cfg_node_t *node);

#endif /* NA_CONFIG_INTERNAL_H */
