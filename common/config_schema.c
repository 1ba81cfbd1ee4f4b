/* common/config_schema.c — the layout's key table (type, default, range,
 * meaning of every key) and the generic binder that walks a parsed YAML tree
 * against it. docs/config.md is the long form of this table;
 * `nearattn check-config --keys` prints it. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/engines.h"
#include "config_internal.h"

typedef enum {
    NA_CFG_F_STR,     /* char *, ${VAR} expanded */
    NA_CFG_F_PATH,    /* char *, expanded, relative to the layout's directory */
    NA_CFG_F_INT,     /* long, within [lo, hi] */
    NA_CFG_F_BOOL,    /* int 0/1 */
    NA_CFG_F_FLOAT,   /* double, within [lo, hi] */
    NA_CFG_F_ENUM,    /* int: index into names */
    NA_CFG_F_MAP,     /* embedded struct described by sub */
    NA_CFG_F_LIST,    /* pointer to an array of sub->elem_size; count (long) at count_off */
} na_cfg_ftype_t;

#define NA_CFG_REQ      0x1u  /* the key must be present */
#define NA_CFG_POW2     0x2u  /* integer must be a power of two */
#define NA_CFG_NONEMPTY 0x4u  /* list must have at least one element */

/* The characters a string value may hold: min..max characters of [A-Za-z0-9]
 * and `extra`, the first one alphanumeric when first_alnum; len_msg and
 * bad_msg are the two refusals (printf formats given `where` and the value). */
typedef struct {
    size_t      max;
    int         first_alnum;
    const char *extra;
    const char *len_msg, *bad_msg;
} na_cfg_charset_t;

typedef struct na_cfg_section na_cfg_section_t;

typedef struct {
    const char             *key;
    na_cfg_ftype_t          type;
    size_t                  off;        /* offset of the value in the section struct */
    size_t                  count_off;  /* NA_CFG_F_LIST: offset of the long count */
    unsigned                flags;
    const char             *dflt;       /* default as text; NULL: none (zero / NULL) */
    double                  lo, hi;     /* INT and FLOAT bounds */
    const char *const      *names;      /* ENUM values, NULL-terminated */
    const na_cfg_section_t *sub;        /* MAP and LIST */
    const na_cfg_charset_t *chars;      /* extra check of a string value */
    const char             *doc;
} na_cfg_field_t;

struct na_cfg_section {
    size_t                elem_size;    /* struct size (list element) */
    long                  max_items;    /* list bound */
    const na_cfg_field_t *fields;       /* terminated by key == NULL */
};

/* ---- value checks ------------------------------------------------------- */

static na_status_t na_cfg_check_chars(const na_cfg_parse_t *p, const na_yn_t *n, const char *where,
                                      const char *val, const na_cfg_charset_t *cs)
{
    size_t i, len = strlen(val);

    if (len < 1 || len > cs->max || (cs->first_alnum && !isalnum((unsigned char)val[0])))
        return na_cfg_errat(p, n, NA_ERR_FORMAT, cs->len_msg, where, val);
    for (i = 0; i < len; i++)
        if (!isalnum((unsigned char)val[i]) && !strchr(cs->extra, val[i]))
            return na_cfg_errat(p, n, NA_ERR_FORMAT, cs->bad_msg, where, val);
    return NA_OK;
}

/* A path (after ${VAR} expansion) holds no control character: a newline or
 * tab in a KV directory or model file name is a mistake (a pasted line, a
 * variable with a trailing newline), and would split the log lines and
 * messages that name it. */
static na_status_t na_cfg_check_path(const na_cfg_parse_t *p, const na_yn_t *n, const char *where,
                                     const char *val)
{
    for (size_t i = 0; val[i] != '\0'; i++)
        if ((unsigned char)val[i] < 0x20 || val[i] == 0x7f)
            return na_cfg_errat(p, n, NA_ERR_FORMAT,
                                "%s: path holds a control character (0x%02x at byte %zu): "
                                "newlines and tabs are not allowed in paths",
                                where, (unsigned)(unsigned char)val[i], i);
    return NA_OK;
}

/* Node and cluster names: used as log tags and file names. */
static const na_cfg_charset_t na_cfg_name_chars = {
    63, 1, "_.-", "%s: name '%s' must be 1..63 characters starting with a letter or digit",
    "%s: name '%s' may hold only letters, digits, '_', '.', '-'",
};

/* Host names and addresses: 1..253 characters of [A-Za-z0-9._:%-]. */
static const na_cfg_charset_t na_cfg_host_chars = {
    253, 0, "._:-%", "%s: host must be 1..253 characters", "%s: '%s' is not a host name or address",
};

/* auto | shm | tcp | a raw UCX_TLS list ("rc_x,sm,self", "^ud"). */
static const na_cfg_charset_t na_cfg_tls_chars = {
    256, 0, "_,:^-", "%s: must be auto, shm, tcp or a UCX_TLS list",
    "%s: '%s' is not auto, shm, tcp or a UCX_TLS list (letters, digits, '_', ',', ':', '^')",
};

/* ---- the key table ------------------------------------------------------ */

static const char *const na_cfg_kv_dtype_names[] = { "f32", "f16", "bf16", NULL };
static const char *const na_cfg_device_names[]   = { "cpu", "cuda", NULL };
#define na_cfg_engine_names na_engines_names   /* common/engines.h: the one list */
static const char *const na_cfg_partition_names[] = { "request", "head", NULL };
static const char *const na_cfg_pipe_names[]     = { "fixed", "rotational", NULL };
static const char *const na_cfg_tier_names[]     = { "auto", "dram", "ssd", NULL };

#define NA_MB_MAX 16777216.0   /* 16 TiB in MiB */

/* One row per key of the section struct T (defined before each table):
 * key, flags, default, then what its type needs, then the doc line. */
#define F_(k, ty, fl, d, l, h, nm, sb, ck, doc) \
    { #k, ty, offsetof(T, k), 0, fl, d, l, h, nm, sb, ck, doc }
#define STR_(k, fl, d, ck, doc)     F_(k, NA_CFG_F_STR, fl, d, 0, 0, NULL, NULL, ck, doc)
#define PATH_(k, fl, doc)           F_(k, NA_CFG_F_PATH, fl, NULL, 0, 0, NULL, NULL, NULL, doc)
#define INT_(k, fl, d, l, h, doc)   F_(k, NA_CFG_F_INT, fl, d, l, h, NULL, NULL, NULL, doc)
#define FLOAT_(k, d, l, h, doc)     F_(k, NA_CFG_F_FLOAT, 0, d, l, h, NULL, NULL, NULL, doc)
#define BOOL_(k, d, doc)            F_(k, NA_CFG_F_BOOL, 0, d, 0, 0, NULL, NULL, NULL, doc)
#define ENUM_(k, d, nm, doc)        F_(k, NA_CFG_F_ENUM, 0, d, 0, 0, nm, NULL, NULL, doc)
#define LIST_(k, sec, doc) \
    { #k, NA_CFG_F_LIST, offsetof(T, k), offsetof(T, n_##k), NA_CFG_REQ | NA_CFG_NONEMPTY, NULL, \
      0, 0, NULL, &sec, NULL, doc }
/* A section of the root (T is na_cfg_doc_t), bound straight into its na_cfg_t. */
#define SECTION_(k, fl, sec, doc) \
    { #k, NA_CFG_F_MAP, offsetof(T, cfg.k), 0, fl, NULL, 0, 0, NULL, &sec, NULL, doc }
/* The row that ends a table (key NULL; designated, so that no compiler
 * warns of the fields left out). */
#define NA_CFG_END_ { .key = NULL }
#define NODE_NAME_ \
    STR_(name, NA_CFG_REQ, NULL, &na_cfg_name_chars, "node name, unique in the layout (nearattn node --name)")

#define T na_cfg_cluster_t
static const na_cfg_field_t na_cfg_cluster_fields[] = {
    STR_(name, 0, "nearattn", &na_cfg_name_chars, "cluster name, shown in logs and plans"),
    PATH_(secret_file, NA_CFG_REQ,
          "file whose bytes (trimmed, >= 16) are the cluster secret; nodes prove they hold it at HELLO"),
    NA_CFG_END_
};
#undef T

#define T na_cfg_model_t
static const na_cfg_field_t na_cfg_model_fields[] = {
    PATH_(path, 0, "model file (llama2.c checkpoint or GGUF); --model overrides it"),
    PATH_(tokenizer, 0, "tokenizer file (llama2.c tokenizer.bin); GGUF models carry their own"),
    ENUM_(kv_dtype, "f16", na_cfg_kv_dtype_names, "element type of the KV cache on storage nodes"),
    NA_CFG_END_
};
#undef T

#define T na_cfg_transport_t
static const na_cfg_field_t na_cfg_transport_fields[] = {
    STR_(tls, 0, "auto", &na_cfg_tls_chars,
         "UCX transports: auto (UCX_TLS as in the environment), shm, tcp, or a raw UCX_TLS list"),
    INT_(timeout_ms, 0, "10000", 1, 3600000, "bound on every transport wait (connect, send, receive)"),
    INT_(heartbeat_ms, 0, "500", 10, 600000, "period of heartbeats between connected nodes"),
    INT_(peer_timeout_ms, 0, "5000", 20, 3600000,
         "silence after which a peer is declared lost; at least 2 x heartbeat_ms"),
    NA_CFG_END_
};
#undef T

#define T na_cfg_device_t
static const na_cfg_field_t na_cfg_device_fields[] = {
    PATH_(path, NA_CFG_REQ, "KV directory of the slot (created if missing on nodes of this machine)"),
    ENUM_(engine, "cpu", na_cfg_engine_names, "attention engine bound to the slot"),
    INT_(dram_mb, NA_CFG_REQ, NULL, 1, NA_MB_MAX,
         "DRAM tier budget of the slot, MiB (writeback buffer + DRAM-resident blocks)"),
    INT_(ssd_mb, NA_CFG_REQ, NULL, 1, NA_MB_MAX, "SSD tier budget of the slot, MiB (files under path)"),
    INT_(threads, 0, "1", 1, 1024, "worker threads of the engine"),
    INT_(gpu, 0, "0", 0, 1023, "GPU index for engine cuda"),
    STR_(csd_device, 0, "0", &na_cfg_host_chars,
         "engine csd: XRT device index (0, 1, ...) or PCIe BDF (0000:3b:00.1) of the FPGA"),
    PATH_(xclbin, 0, "engine csd: xclbin of the CSD kernel (required for csd; docs/csd.md)"),
    INT_(csd_mb, 0, "64", 1, 65536, "engine csd: device buffer for KV pages per launch, MiB"),
    INT_(csd_timeout_ms, 0, "10000", 1, 3600000, "engine csd: bound on one kernel run"),
    INT_(hbm_mb, 0, "0", 0, NA_MB_MAX, "engine cuda: GPU memory for KV copies, MiB (0: 80% "
         "of the GPU); the rest stays on the DRAM/SSD tiers"),
    NA_CFG_END_
};
#undef T

static const na_cfg_section_t na_cfg_device_section = {
    sizeof(na_cfg_device_t), NA_CFG_MAX_DEVICES, na_cfg_device_fields
};

#define T na_cfg_node_t
static const na_cfg_field_t na_cfg_compute_fields[] = {
    NODE_NAME_,
    STR_(host, NA_CFG_REQ, NULL, &na_cfg_host_chars, "host name or address the node runs on"),
    INT_(port, 0, NULL, 1, 65535, "listen port (optional; absent = the node only connects out)"),
    ENUM_(device, "cpu", na_cfg_device_names, "compute backend"),
    INT_(gpu, 0, "0", 0, 1023, "GPU index for device cuda"),
    INT_(threads, 0, "1", 1, 1024, "compute threads"),
    NA_CFG_END_
};

static const na_cfg_field_t na_cfg_storage_fields[] = {
    NODE_NAME_,
    STR_(host, NA_CFG_REQ, NULL, &na_cfg_host_chars, "host name or address the node listens on"),
    INT_(port, NA_CFG_REQ, NULL, 1, 65535, "listen port; host:port is unique in the layout"),
    LIST_(devices, na_cfg_device_section, "device slots: a KV directory and an attention engine each"),
    NA_CFG_END_
};
#undef T

static const na_cfg_section_t na_cfg_compute_section = {
    sizeof(na_cfg_node_t), NA_CFG_MAX_NODES, na_cfg_compute_fields
};
static const na_cfg_section_t na_cfg_storage_section = {
    sizeof(na_cfg_node_t), NA_CFG_MAX_NODES, na_cfg_storage_fields
};

#define T na_cfg_parallel_t
static const na_cfg_field_t na_cfg_parallel_fields[] = {
    ENUM_(partition, "request", na_cfg_partition_names,
          "request: a request's KV on one slot; head: KV heads split across all slots"),
    INT_(batches_in_flight, 0, "2", 1, 64, "batches kept in flight (staggered pipelining); 1 = no overlap"),
    BOOL_(adaptive_batches, "true", "batches_in_flight is the most: requests are spread over "
          "them only where that was measured faster per token (tried where a step's attention "
          "could hide its weight reads); false: always over all of them"),
    ENUM_(pipelining, "fixed", na_cfg_pipe_names,
          "fixed: one compute node; rotational: slices rotate over >= 2 compute nodes"),
    INT_(max_batch, 0, "64", 1, 4096, "most requests in one batch"),
    INT_(prefill_chunk, 0, "256", 1, 65536, "prompt tokens one batch step takes beside its "
         "decode rows (chunked prefill on the storage nodes); with prefill_weighted the most"),
    BOOL_(prefill_weighted, "true", "a step's prompt budget weighs a token by its position: "
          "1 + position / P_eq position-0 tokens, P_eq the context where its attention costs "
          "its projections and MLP; prefill_chunk of them a step"),
    NA_CFG_END_
};
#undef T

#define T na_cfg_kv_t
static const na_cfg_field_t na_cfg_kv_fields[] = {
    INT_(block_tokens, NA_CFG_POW2, "64", 1, 8192, "tokens per KV block, a power of two"),
    INT_(spill_interval, 0, "2", 1, 4096, "decode steps between writebacks of new K/V rows to the SSD tier"),
    INT_(prefetch_layers, 0, "1", 0, 64, "layers whose SSD blocks are read ahead (0 = no prefetch)"),
    ENUM_(tier, "auto", na_cfg_tier_names,
          "auto: DRAM first, SSD when full; dram: never spill; ssd: spill every block"),
    BOOL_(prefix_reuse, "true", "requests whose prompt starts with blocks a storage node holds reuse their KV"),
    INT_(prefix_cache_mb, 0, "256", 0, NA_MB_MAX,
         "KV of finished prompts each storage node keeps for prefix reuse, MiB (0 = none)"),
    NA_CFG_END_
};
#undef T

#define T na_cfg_xcache_t
static const na_cfg_field_t na_cfg_xcache_fields[] = {
    BOOL_(enabled, "false", "keep X (layer input) instead of K,V for a share of requests (MHA models only)"),
    INT_(host_mb, 0, "0", 0, NA_MB_MAX, "X budget in compute-node host memory, MiB (>= 1 when enabled)"),
    FLOAT_(share, "0.5", 0, 1, "fraction of requests that keep X, (0, 1] when enabled"),
    NA_CFG_END_
};
#undef T

#define S_(T, f) { sizeof(T), 0, f }
static const na_cfg_section_t na_cfg_cluster_section   = S_(na_cfg_cluster_t, na_cfg_cluster_fields);
static const na_cfg_section_t na_cfg_model_section     = S_(na_cfg_model_t, na_cfg_model_fields);
static const na_cfg_section_t na_cfg_transport_section = S_(na_cfg_transport_t, na_cfg_transport_fields);
static const na_cfg_section_t na_cfg_parallel_section  = S_(na_cfg_parallel_t, na_cfg_parallel_fields);
static const na_cfg_section_t na_cfg_kv_section        = S_(na_cfg_kv_t, na_cfg_kv_fields);
static const na_cfg_section_t na_cfg_xcache_section    = S_(na_cfg_xcache_t, na_cfg_xcache_fields);

#define T na_cfg_doc_t
static const na_cfg_field_t na_cfg_root_fields[] = {
    SECTION_(cluster, NA_CFG_REQ, na_cfg_cluster_section, "cluster identity and secret"),
    SECTION_(model, 0, na_cfg_model_section, "the model served"),
    SECTION_(transport, 0, na_cfg_transport_section, "UCX transport settings and timeouts"),
    LIST_(compute, na_cfg_compute_section, "compute nodes (dense layers, scheduling, sampling)"),
    LIST_(storage, na_cfg_storage_section, "storage nodes (KV cache and attention)"),
    SECTION_(parallel, 0, na_cfg_parallel_section, "partition and pipelining"),
    SECTION_(kv, 0, na_cfg_kv_section, "KV cache layout and writeback"),
    SECTION_(xcache, 0, na_cfg_xcache_section, "cooperative X-cache (INF2)"),
    NA_CFG_END_
};
#undef T

static const na_cfg_section_t na_cfg_root_section = S_(na_cfg_doc_t, na_cfg_root_fields);

/* ---- binder ------------------------------------------------------------- */

/* 1 when n is a plain YAML null (empty, ~, null). */
static int na_cfg_is_null(const na_yn_t *n)
{
    return n->kind == NA_YN_SCALAR && n->plain &&
           (n->len == 0 || !strcmp(n->text, "~") || !strcmp(n->text, "null") ||
            !strcmp(n->text, "Null") || !strcmp(n->text, "NULL"));
}

/* What a node is, for "got ..." in messages. */
static const char *na_cfg_kind_name(const na_yn_t *n)
{
    if (n->kind == NA_YN_MAP)
        return "a mapping";
    if (n->kind == NA_YN_SEQ)
        return "a list";
    return na_cfg_is_null(n) ? "null" : "a scalar";
}

/* The type of a field, for "expected ..." in messages. */
static const char *na_cfg_type_name(const na_cfg_field_t *f)
{
    switch (f->type) {
    case NA_CFG_F_STR:   return "string";
    case NA_CFG_F_PATH:  return "path";
    case NA_CFG_F_INT:   return "integer";
    case NA_CFG_F_BOOL:  return "boolean";
    case NA_CFG_F_FLOAT: return "number";
    case NA_CFG_F_ENUM:  return "enum";
    case NA_CFG_F_MAP:   return "mapping";
    case NA_CFG_F_LIST:  return "list";
    }
    return "?";
}

/* Levenshtein distance of two short keys (capped at 64 characters). */
static int na_cfg_edit_distance(const char *a, const char *b)
{
    int la = (int)strnlen(a, 64), lb = (int)strnlen(b, 64);
    int prev[65], cur[65], i, j;

    for (j = 0; j <= lb; j++)
        prev[j] = j;
    for (i = 1; i <= la; i++) {
        cur[0] = i;
        for (j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (tolower((unsigned char)a[i - 1]) !=
                                     tolower((unsigned char)b[j - 1]));
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof(int) * (size_t)(lb + 1));
    }
    return prev[lb];
}

/* The closest candidate within a small edit distance, or NULL. */
static const char *na_cfg_closest(const char *word, const char *const *cands, size_t stride,
                                  size_t n)
{
    const char *best = NULL;
    int best_d = 3, i;

    if (strlen(word) <= 3)
        best_d = 2;
    for (i = 0; i < (int)n; i++) {
        const char *c = *(const char *const *)((const char *)cands + (size_t)i * stride);
        int d = na_cfg_edit_distance(word, c);
        if (d < best_d) {
            best_d = d;
            best = c;
        }
    }
    return best;
}

/* A whole decimal integer (no leading space, nothing after); NA_ERR_FORMAT otherwise. */
static na_status_t na_cfg_parse_long(const char *s, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || isspace((unsigned char)s[0]))
        return NA_ERR_FORMAT;
    *out = v;
    return NA_OK;
}

/* 1 with *out set for true/yes/on or false/no/off (any case); 0 otherwise. */
static int na_cfg_parse_bool(const char *s, int *out)
{
    static const char *const t[] = { "true", "yes", "on" }, *const f[] = { "false", "no", "off" };
    int i;

    for (i = 0; i < 3; i++) {
        if (!strcasecmp(s, t[i])) { *out = 1; return 1; }
        if (!strcasecmp(s, f[i])) { *out = 0; return 1; }
    }
    return 0;
}

/* Make path absolute against the layout's directory; takes ownership of *s.
 * Leading "./" and "../" segments are applied to the directory, which is a
 * realpath (no symlinks), so "../x" names the same file, only shorter. */
static na_status_t na_cfg_resolve_path(const na_cfg_parse_t *p, char **s)
{
    const char *rel = *s;
    size_t dlen = strlen(p->dir), n;
    char *abs;

    if (rel[0] == '/')
        return NA_OK;
    for (;;) {
        if (!strncmp(rel, "./", 2)) {
            rel += 2;
        } else if (!strncmp(rel, "../", 3) || !strcmp(rel, "..")) {
            while (dlen > 1 && p->dir[dlen - 1] != '/')
                dlen--;
            if (dlen > 1)
                dlen--;                     /* drop the slash too, but keep "/" */
            rel += rel[2] == '/' ? 3 : 2;
        } else {
            break;
        }
    }
    n = dlen + strlen(rel) + 2;
    abs = malloc(n);
    if (abs == NULL)
        return na_err(NA_ERR_NOMEM, "%s: out of memory", p->file);
    snprintf(abs, n, "%.*s%s%s", (int)dlen, p->dir,
             (dlen == 1 && p->dir[0] == '/') || rel[0] == '\0' ? "" : "/", rel);
    free(*s);
    *s = abs;
    return NA_OK;
}

/* Set one scalar field at `dst` from node n (or from the table default when
 * n is NULL). `where` names the key for messages. */
static na_status_t na_cfg_set_scalar(na_cfg_parse_t *p, const na_cfg_field_t *f,
                                     const na_yn_t *n, const char *where, void *dst)
{
    char *val = NULL;
    na_status_t st = NA_OK;
    int typed = f->type == NA_CFG_F_INT || f->type == NA_CFG_F_FLOAT || f->type == NA_CFG_F_BOOL;

    if (n != NULL) {
        if (n->kind != NA_YN_SCALAR || na_cfg_is_null(n))
            return na_cfg_errat(p, n, NA_ERR_FORMAT, "%s: expected %s, got %s", where,
                                na_cfg_type_name(f), na_cfg_kind_name(n));
        /* A quoted number is a string in YAML, unless it is a ${VAR} reference. */
        if (typed && !n->plain && strstr(n->text, "${") == NULL)
            return na_cfg_errat(p, n, NA_ERR_FORMAT, "%s: expected %s, got string '%s'", where,
                                na_cfg_type_name(f), n->text);
        st = na_cfg_expand(p, n, &val);
        if (st != NA_OK)
            return st;
    } else {
        val = strdup(f->dflt);
        if (val == NULL)
            return na_err(NA_ERR_NOMEM, "%s: out of memory", p->file);
    }

    switch (f->type) {
    case NA_CFG_F_STR:
    case NA_CFG_F_PATH:
        if (val[0] == '\0') {
            st = na_cfg_errat(p, n, NA_ERR_FORMAT, "%s: expected %s, got an empty string", where,
                              na_cfg_type_name(f));
            break;
        }
        if (f->chars != NULL && (st = na_cfg_check_chars(p, n, where, val, f->chars)) != NA_OK)
            break;
        if (f->type == NA_CFG_F_PATH && (st = na_cfg_check_path(p, n, where, val)) != NA_OK)
            break;
        if (f->type == NA_CFG_F_PATH && (st = na_cfg_resolve_path(p, &val)) != NA_OK)
            break;
        *(char **)dst = val;
        return NA_OK;
    case NA_CFG_F_INT: {
        long v;
        if (na_cfg_parse_long(val, &v) != NA_OK) {
            st = na_cfg_errat(p, n, NA_ERR_FORMAT, "%s: expected integer, got '%s'", where, val);
            break;
        }
        if (n != NULL && (v < (long)f->lo || v > (long)f->hi)) {
            st = na_cfg_errat(p, n, NA_ERR_RANGE, "%s: %ld out of range [%ld, %ld]%s", where, v,
                              (long)f->lo, (long)f->hi,
                              (v == 0 && f->lo >= 1) ? " (0 is not allowed)" : "");
            break;
        }
        if (n != NULL && (f->flags & NA_CFG_POW2) && (v & (v - 1)) != 0) {
            st = na_cfg_errat(p, n, NA_ERR_RANGE, "%s: %ld is not a power of two", where, v);
            break;
        }
        *(long *)dst = v;
        break;
    }
    case NA_CFG_F_FLOAT: {
        char *end;
        double v;
        errno = 0;
        v = strtod(val, &end);
        if (errno != 0 || end == val || *end != '\0' || !isfinite(v)) {
            st = na_cfg_errat(p, n, NA_ERR_FORMAT, "%s: expected number, got '%s'", where, val);
            break;
        }
        if (v < f->lo || v > f->hi) {
            st = na_cfg_errat(p, n, NA_ERR_RANGE, "%s: %g out of range [%g, %g]", where, v,
                              f->lo, f->hi);
            break;
        }
        *(double *)dst = v;
        break;
    }
    case NA_CFG_F_BOOL:
        if (!na_cfg_parse_bool(val, (int *)dst))
            st = na_cfg_errat(p, n, NA_ERR_FORMAT, "%s: expected boolean (true/false), got '%s'",
                              where, val);
        break;
    case NA_CFG_F_ENUM: {
        int i;
        char list[256] = "";
        for (i = 0; f->names[i] != NULL; i++)
            if (!strcmp(val, f->names[i])) {
                *(int *)dst = i;
                break;
            }
        if (f->names[i] != NULL)
            break;
        for (i = 0; f->names[i] != NULL; i++)
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? "|" : "",
                     f->names[i]);
        st = na_cfg_errat(p, n, NA_ERR_FORMAT, "%s: expected one of %s, got '%s'", where, list,
                          val);
        break;
    }
    default:
        st = na_err(NA_ERR_INTERNAL, "%s: %s: not a scalar field", p->file, where);
        break;
    }
    free(val);
    return st;
}

static na_status_t na_cfg_bind_map(na_cfg_parse_t *p, const na_cfg_section_t *sec,
                                   const na_yn_t *m, const na_yn_t *at, const char *where,
                                   void *base);

/* Count one bound node; NA_ERR_RANGE past NA_CFG_MAX_VISITS (alias bombs). */
static na_status_t na_cfg_count_visit(na_cfg_parse_t *p, const na_yn_t *n)
{
    if (++p->visits > NA_CFG_MAX_VISITS)
        return na_cfg_errat(p, n, NA_ERR_RANGE, "document too large after alias expansion "
                            "(more than %d nodes)", NA_CFG_MAX_VISITS);
    return NA_OK;
}

/* Bind sequence s as a list of sub-section structs; the array is owned by base even on failure. */
static na_status_t na_cfg_bind_list(na_cfg_parse_t *p, const na_cfg_field_t *f,
                                    const na_yn_t *s, const char *where, void *base)
{
    const na_cfg_section_t *sec = f->sub;
    char elem_where[256];
    unsigned char *arr;
    size_t i;
    na_status_t st;

    if (s->kind != NA_YN_SEQ)
        return na_cfg_errat(p, s, NA_ERR_FORMAT, "%s: expected a list, got %s", where,
                            na_cfg_kind_name(s));
    if ((f->flags & NA_CFG_NONEMPTY) && s->n == 0)
        return na_cfg_errat(p, s, NA_ERR_INVALID, "%s: the list is empty (at least one entry "
                            "is needed)", where);
    if ((long)s->n > sec->max_items)
        return na_cfg_errat(p, s, NA_ERR_RANGE, "%s: %zu entries, at most %ld", where, s->n,
                            sec->max_items);
    if (s->n == 0)
        return NA_OK;
    arr = calloc(s->n, sec->elem_size);
    if (arr == NULL)
        return na_err(NA_ERR_NOMEM, "%s: out of memory", p->file);
    /* Own the array before binding so a failure frees what was bound. */
    *(void **)((char *)base + f->off) = arr;
    *(long *)((char *)base + f->count_off) = (long)s->n;
    for (i = 0; i < s->n; i++) {
        snprintf(elem_where, sizeof(elem_where), "%.200s[%zu]", where, i);
        st = na_cfg_bind_map(p, sec, s->items[i], s->items[i], elem_where,
                             arr + i * sec->elem_size);
        if (st != NA_OK)
            return st;
    }
    return NA_OK;
}

/* Bind mapping m (NULL: absent, defaults only) onto base following sec; `at`
 * is the position reported for a missing required key. */
static na_status_t na_cfg_bind_map(na_cfg_parse_t *p, const na_cfg_section_t *sec,
                                   const na_yn_t *m, const na_yn_t *at, const char *where,
                                   void *base)
{
    const na_cfg_field_t *f;
    char key_where[320];
    size_t i, j, nf = 0;
    na_status_t st;

    if (m != NULL) {
        if ((st = na_cfg_count_visit(p, m)) != NA_OK)
            return st;
        if (m->kind != NA_YN_MAP)
            return na_cfg_errat(p, m, NA_ERR_FORMAT, "%s: expected a mapping, got %s",
                                where[0] ? where : "document", na_cfg_kind_name(m));
    }
    for (f = sec->fields; f->key != NULL; f++)
        nf++;
    /* Unknown and duplicate keys first, in file order. */
    for (i = 0; m != NULL && i < m->n; i += 2) {
        const na_yn_t *k = m->items[i];
        const char *close;
        if (k->kind != NA_YN_SCALAR)
            return na_cfg_errat(p, k, NA_ERR_FORMAT, "%s: a key must be a plain name, got %s",
                                where[0] ? where : "document", na_cfg_kind_name(k));
        for (f = sec->fields; f->key != NULL; f++)
            if (!strcmp(f->key, k->text))
                break;
        if (f->key == NULL) {
            char known[512] = "";
            const na_cfg_field_t *g;
            if (!strcmp(k->text, "<<"))
                return na_cfg_errat(p, k, NA_ERR_FORMAT, "%s: merge keys ('<<') are not "
                                    "supported; use an alias as the whole value",
                                    where[0] ? where : "document");
            close = na_cfg_closest(k->text, &sec->fields[0].key, sizeof(na_cfg_field_t), nf);
            if (close != NULL)
                return na_cfg_errat(p, k, NA_ERR_FORMAT, "unknown key '%s'%s%s (did you mean "
                                    "'%s'?)", k->text, where[0] ? " in " : "", where, close);
            for (g = sec->fields; g->key != NULL; g++)
                snprintf(known + strlen(known), sizeof(known) - strlen(known), "%s%s",
                         g == sec->fields ? "" : ", ", g->key);
            return na_cfg_errat(p, k, NA_ERR_FORMAT, "unknown key '%s'%s%s (known keys: %s)",
                                k->text, where[0] ? " in " : "", where, known);
        }
        for (j = 0; j < i; j += 2)
            if (!strcmp(m->items[j]->text, k->text))
                return na_cfg_errat(p, k, NA_ERR_FORMAT, "duplicate key '%s'%s%s (first at "
                                    "line %d)", k->text, where[0] ? " in " : "", where,
                                    m->items[j]->line);
    }
    for (f = sec->fields; f->key != NULL; f++) {
        const na_yn_t *v = na_cfg_yn_get(m, f->key);
        void *dst = (char *)base + f->off;

        snprintf(key_where, sizeof(key_where), "%.200s%s%.64s", where, where[0] ? "." : "", f->key);
        if (v == NULL && (f->flags & NA_CFG_REQ))
            return na_cfg_errat(p, at, NA_ERR_FORMAT, "%s: missing required key '%s'",
                                where[0] ? where : "document", f->key);
        if (v != NULL && (st = na_cfg_count_visit(p, v)) != NA_OK)
            return st;
        switch (f->type) {
        case NA_CFG_F_MAP:
            /* An explicit null section is the same as an absent one. */
            st = na_cfg_bind_map(p, f->sub, (v != NULL && na_cfg_is_null(v)) ? NULL : v,
                                 v != NULL ? v : at, key_where, dst);
            break;
        case NA_CFG_F_LIST:
            st = v != NULL ? na_cfg_bind_list(p, f, v, key_where, base) : NA_OK;
            break;
        default:
            st = (v != NULL || f->dflt != NULL) ? na_cfg_set_scalar(p, f, v, key_where, dst)
                                                : NA_OK;
            break;
        }
        if (st != NA_OK)
            return st;
    }
    return NA_OK;
}

na_status_t na_cfg_bind_doc(na_cfg_parse_t *p, na_cfg_doc_t *doc)
{
    return na_cfg_bind_map(p, &na_cfg_root_section, p->root, p->root, "", doc);
}

/* Free the strings and lists of one struct bound from sec. */
static void na_cfg_section_free(const na_cfg_section_t *sec, void *base)
{
    const na_cfg_field_t *f;

    for (f = sec->fields; f->key != NULL; f++) {
        void *at = (char *)base + f->off;
        if (f->type == NA_CFG_F_STR || f->type == NA_CFG_F_PATH) {
            free(*(char **)at);
            *(char **)at = NULL;
        } else if (f->type == NA_CFG_F_MAP) {
            na_cfg_section_free(f->sub, at);
        } else if (f->type == NA_CFG_F_LIST) {
            unsigned char *arr = *(unsigned char **)at;
            long i, cnt = *(long *)((char *)base + f->count_off);
            for (i = 0; arr != NULL && i < cnt; i++)
                na_cfg_section_free(f->sub, arr + (size_t)i * f->sub->elem_size);
            free(arr);
            *(void **)at = NULL;
            *(long *)((char *)base + f->count_off) = 0;
        }
    }
}

void na_cfg_doc_free(na_cfg_doc_t *doc)
{
    na_cfg_section_free(&na_cfg_root_section, doc);
}

void na_cfg_node_cleanup(na_cfg_node_t *node)
{
    /* The storage table is a superset of the compute table's owned fields. */
    na_cfg_section_free(&na_cfg_storage_section, node);
}

/* ---- printing ----------------------------------------------------------- */

/* The type column of --keys: "integer [1, 64]", "cpu|cuda", ... */
static void na_cfg_field_type_text(const na_cfg_field_t *f, char *buf, size_t len)
{
    int i;
    size_t n;

    switch (f->type) {
    case NA_CFG_F_INT:
        snprintf(buf, len, "integer [%ld, %ld]%s", (long)f->lo, (long)f->hi,
                 (f->flags & NA_CFG_POW2) ? ", power of two" : "");
        break;
    case NA_CFG_F_FLOAT:
        snprintf(buf, len, "number [%g, %g]", f->lo, f->hi);
        break;
    case NA_CFG_F_ENUM:
        buf[0] = '\0';
        for (i = 0; f->names[i] != NULL; i++) {
            n = strlen(buf);
            snprintf(buf + n, len - n, "%s%s", i ? "|" : "", f->names[i]);
        }
        break;
    case NA_CFG_F_LIST:
        snprintf(buf, len, "list of mappings (1..%ld)", f->sub->max_items);
        break;
    default:
        snprintf(buf, len, "%s", na_cfg_type_name(f));
        break;
    }
}

typedef void (*na_cfg_visit_fn)(const char *key, const na_cfg_field_t *f, void *ctx);

/* Call fn for every field below sec with its dotted key ("storage[].devices[].path"). */
static void na_cfg_walk(const na_cfg_section_t *sec, const char *prefix, na_cfg_visit_fn fn,
                        void *ctx)
{
    const na_cfg_field_t *f;
    char key[256];

    for (f = sec->fields; f->key != NULL; f++) {
        snprintf(key, sizeof(key), "%.160s%s%.64s%s", prefix, prefix[0] ? "." : "", f->key,
                 f->type == NA_CFG_F_LIST ? "[]" : "");
        fn(key, f, ctx);
        if (f->type == NA_CFG_F_MAP || f->type == NA_CFG_F_LIST)
            na_cfg_walk(f->sub, key, fn, ctx);
    }
}

/* One entry of --keys: key, type, default, then the meaning. */
static void na_cfg_print_field(const char *key, const na_cfg_field_t *f, void *ctx)
{
    FILE *out = ctx;
    char type[160];

    na_cfg_field_type_text(f, type, sizeof(type));
    fprintf(out, "%-34s %-34s %s\n", key, type,
            (f->flags & NA_CFG_REQ) ? "required" : f->dflt ? f->dflt
            : (f->type == NA_CFG_F_MAP || f->type == NA_CFG_F_LIST) ? "optional" : "(unset)");
    fprintf(out, "    %s\n", f->doc);
}

void na_cfg_print_schema(FILE *f)
{
    fprintf(f, "%-34s %-34s %s\n", "key", "type", "default");
    na_cfg_walk(&na_cfg_root_section, "", na_cfg_print_field, f);
}

typedef struct {
    void (*fn)(const char *key, void *ctx);
    void *ctx;
} na_cfg_foreach_t;

/* Adapter from na_cfg_walk to na_cfg_schema_foreach callbacks. */
static void na_cfg_foreach_field(const char *key, const na_cfg_field_t *f, void *ctx)
{
    na_cfg_foreach_t *fe = ctx;
    (void)f;
    fe->fn(key, fe->ctx);
}

void na_cfg_schema_foreach(void (*fn)(const char *key, void *ctx), void *ctx)
{
    na_cfg_foreach_t fe = { fn, ctx };
    na_cfg_walk(&na_cfg_root_section, "", na_cfg_foreach_field, &fe);
}

const char *na_cfg_engine_name(na_cfg_engine_t e)
{
    return (unsigned)e < NA_ENGINE_COUNT ? na_engines_names[e] : "?";
}

const char *na_cfg_compute_dev_name(na_cfg_compute_dev_t d)
{
    return (unsigned)d < 2 ? na_cfg_device_names[d] : "?";
}

const char *na_cfg_partition_name(na_cfg_partition_t p)
{
    return (unsigned)p < 2 ? na_cfg_partition_names[p] : "?";
}

const char *na_cfg_pipelining_name(na_cfg_pipelining_t p)
{
    return (unsigned)p < 2 ? na_cfg_pipe_names[p] : "?";
}

const char *na_cfg_tier_name(na_cfg_tier_t t)
{
    return (unsigned)t < 3 ? na_cfg_tier_names[t] : "?";
}

const char *na_cfg_role_name(na_cfg_role_t r)
{
    return r == NA_CFG_ROLE_COMPUTE ? "compute" : r == NA_CFG_ROLE_STORAGE ? "storage" : "?";
}
