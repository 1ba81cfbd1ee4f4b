/* common/config.h — the cluster layout: one YAML file (libyaml) describing the
 * compute nodes, the storage nodes with their device slots, the transport and
 * the parallel/KV/X-cache settings. docs/config.md documents every key.
 *
 * Loading is strict: an unknown key, a wrong type, a duplicate or an
 * impossible value fails with a one-line message "file:line:col: ..." (1-based)
 * recorded through na_err(). The schema is a table (common/config_schema.c)
 * that `nearattn check-config --keys` prints.
 *
 * Node order (= launcher rank): compute nodes first, in file order, then
 * storage nodes, in file order. Rank r is cfg->nodes[r].
 *
 * Slot order (for placement and head partition): the device slots of the
 * storage nodes in file order, each node's devices in file order; slot s is
 * cfg->slots[s]. */
#ifndef NA_CONFIG_H
#define NA_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "dtype.h"
#include "status.h"

#define NA_CFG_MAX_NODES      1024   /* compute + storage nodes in one layout */
#define NA_CFG_MAX_DEVICES    64     /* device slots per storage node */
#define NA_CFG_MAX_FILE_BYTES (1 << 20)
#define NA_CFG_SECRET_MIN     16     /* bytes, after trimming whitespace */
#define NA_CFG_SECRET_MAX     4096
/* A secret file whose bytes start with this marker is the public development
 * secret: accepted, shown as such in the plan, never for production. */
#define NA_CFG_DEV_SECRET_MARK "NEARATTN-DEVELOPMENT-SECRET"

typedef enum { NA_CFG_ROLE_COMPUTE = 0, NA_CFG_ROLE_STORAGE = 1 } na_cfg_role_t;
typedef enum { NA_CFG_DEV_CPU = 0, NA_CFG_DEV_CUDA = 1 } na_cfg_compute_dev_t;
typedef enum { NA_CFG_ENGINE_CPU = 0, NA_CFG_ENGINE_CUDA = 1, NA_CFG_ENGINE_CSD = 2 } na_cfg_engine_t;
typedef enum { NA_CFG_TLS_AUTO = 0, NA_CFG_TLS_SHM = 1, NA_CFG_TLS_TCP = 2, NA_CFG_TLS_RAW = 3 } na_cfg_tls_t;
typedef enum { NA_CFG_PARTITION_REQUEST = 0, NA_CFG_PARTITION_HEAD = 1 } na_cfg_partition_t;
typedef enum { NA_CFG_PIPE_FIXED = 0, NA_CFG_PIPE_ROTATIONAL = 1 } na_cfg_pipelining_t;
typedef enum { NA_CFG_TIER_AUTO = 0, NA_CFG_TIER_DRAM = 1, NA_CFG_TIER_SSD = 2 } na_cfg_tier_t;
/* Values of the kv_dtype key, same numbering as na_dtype_t (Q8_0 not allowed). */
typedef enum { NA_CFG_KV_F32 = NA_DTYPE_F32, NA_CFG_KV_F16 = NA_DTYPE_F16,
               NA_CFG_KV_BF16 = NA_DTYPE_BF16 } na_cfg_kv_dtype_t;

/* One device slot of a storage node: a KV directory and the attention engine
 * bound to it ("CSD slot"). */
typedef struct {
    char           *path;      /* absolute KV directory (owned); the node creates it */
    na_cfg_engine_t engine;    /* cpu | cuda | csd */
    long            dram_mb;   /* DRAM tier budget, MiB (>= 1) */
    long            ssd_mb;    /* SSD tier budget, MiB (>= 1) */
    long            threads;   /* engine worker threads (>= 1) */
    long            gpu;       /* GPU index for the cuda engine */
    /* engine csd (docs/csd.md) */
    char           *csd_device;     /* XRT device index or PCIe BDF (owned) */
    char           *xclbin;         /* xclbin of the CSD kernel (owned) */
    long            csd_mb;         /* device buffer for KV pages per launch, MiB */
    long            csd_timeout_ms; /* bound on one kernel run */
    long            hbm_mb;    /* cuda engine: GPU memory for KV, MiB (0: 80% of the GPU) */
} na_cfg_device_t;

typedef struct {
    char         *name;        /* unique across the layout (owned) */
    char         *host;        /* hostname or address (owned) */
    long          port;        /* storage: listen port; compute: 0 = not listening */
    na_cfg_role_t role;
    int           index;       /* position among nodes of this role */
    int           rank;        /* position in cfg->nodes (launcher rank) */
    int           is_local;    /* host names this machine (loopback, hostname, an interface) */
    /* compute nodes */
    na_cfg_compute_dev_t device;
    long          gpu;         /* GPU index when device is cuda */
    long          threads;     /* compute threads */
    /* storage nodes */
    na_cfg_device_t *devices;  /* [n_devices] (owned) */
    long          n_devices;
    int           first_slot;  /* global slot index of devices[0] */
} na_cfg_node_t;

/* A global device slot: devices[dev] of nodes[node]. */
typedef struct {
    int node;                  /* rank of the storage node */
    int dev;                   /* index in that node's devices */
} na_cfg_slot_t;

typedef struct {
    char *name;                /* cluster name */
    char *secret_file;         /* absolute path of the secret file */
} na_cfg_cluster_t;

typedef struct {
    char             *path;       /* model file, absolute; NULL if not given */
    char             *tokenizer;  /* tokenizer file, absolute; NULL if not given */
    na_cfg_kv_dtype_t kv_dtype;
} na_cfg_model_t;

typedef struct {
    char        *tls;             /* as written: auto | shm | tcp | raw UCX_TLS list */
    na_cfg_tls_t tls_kind;
    long         timeout_ms;      /* bound on every transport wait */
    long         heartbeat_ms;    /* heartbeat period */
    long         peer_timeout_ms; /* silence after which a peer is declared lost */
} na_cfg_transport_t;

typedef struct {
    na_cfg_partition_t  partition;
    long                batches_in_flight;
    int                 adaptive_batches; /* spread over them only where it pays
                                             (compute-node/batch_split.h) */
    na_cfg_pipelining_t pipelining;
    long                max_batch;    /* requests per batch */
    long                prefill_chunk; /* prompt tokens one batch step takes */
    int                 prefill_weighted; /* the step's budget weighs a prompt token by
                                             its position (compute-node/sched.c) */
} na_cfg_parallel_t;

typedef struct {
    long          block_tokens;       /* power of two */
    long          spill_interval;     /* decode steps between writebacks */
    long          prefetch_layers;    /* layers read ahead from SSD */
    na_cfg_tier_t tier;               /* auto | dram (never spill) | ssd (spill everything) */
    int           prefix_reuse;       /* compute nodes ask for prefix hits */
    long          prefix_cache_mb;    /* prefix cache per storage node (0 = none) */
} na_cfg_kv_t;

typedef struct {
    int    enabled;
    long   host_mb;                   /* X budget on each compute node, MiB */
    double share;                     /* fraction of requests that keep X, (0, 1] */
} na_cfg_xcache_t;

typedef struct na_cfg {
    char              *file;          /* the layout file as given (owned) */
    char              *dir;           /* absolute directory of the layout (owned) */
    na_cfg_cluster_t   cluster;
    na_cfg_model_t     model;
    na_cfg_transport_t transport;
    na_cfg_parallel_t  parallel;
    na_cfg_kv_t        kv;
    na_cfg_xcache_t    xcache;
    /* compute then storage, see the rank rule above */
    na_cfg_node_t     *nodes;         /* [n_nodes] (owned) */
    int                n_nodes;
    int                n_compute;     /* nodes[0 .. n_compute-1] */
    int                n_storage;     /* nodes[n_compute .. n_nodes-1] */
    na_cfg_slot_t     *slots;         /* [n_slots] (owned) */
    int                n_slots;
    unsigned char     *secret;        /* [secret_len] trimmed file bytes (owned, wiped at destroy) */
    size_t             secret_len;
    int                secret_is_dev; /* the public development secret (cluster-configs/dev.secret) */
} na_cfg_t;

/* Parse and validate the layout at `path`. Creates the KV directories of the
 * storage nodes that run on this machine (mkdir -p). On success *cfg_p owns
 * a new layout (free with na_cfg_destroy). On failure returns NA_ERR_FORMAT
 * (syntax, type, unknown key), NA_ERR_RANGE (impossible value), NA_ERR_IO
 * (file, directory), NA_ERR_NOT_FOUND (missing file or variable) or
 * NA_ERR_INVALID (inconsistent layout), with "file:line:col: message". */
na_status_t na_cfg_load(const char *path, na_cfg_t **cfg_p);

/* Free a layout (NULL is ignored); wipes the secret. Cannot fail. */
void na_cfg_destroy(na_cfg_t *cfg);

/* The node called `name`, or NULL. Its role, index and rank are in the node. */
const na_cfg_node_t *na_cfg_find_node(const na_cfg_t *cfg, const char *name);

/* The node at launcher rank `rank`, or NULL when out of range. */
const na_cfg_node_t *na_cfg_node_at(const na_cfg_t *cfg, int rank);


/* Head partition: the KV heads [*first_p, *first_p + *count_p) that global
 * slot `slot` of `n_slots` holds when `n_kv_heads` heads are split into
 * contiguous, balanced ranges (the first n_kv_heads % n_slots slots hold one
 * more). *count_p is 0 when there are more slots than heads. */
void na_cfg_head_split(int n_kv_heads, int n_slots, int slot, int *first_p, int *count_p);

/* Static names of enum values ("cpu", "request", ...). */
const char *na_cfg_engine_name(na_cfg_engine_t e);
const char *na_cfg_compute_dev_name(na_cfg_compute_dev_t d);
const char *na_cfg_partition_name(na_cfg_partition_t p);
const char *na_cfg_pipelining_name(na_cfg_pipelining_t p);
const char *na_cfg_tier_name(na_cfg_tier_t t);
const char *na_cfg_role_name(na_cfg_role_t r);

/* Whether this nearattn has the attention engine / compute device built in
 * (kernels/backend.c: only "cpu" here; "cuda" and "csd" are not built).
 * Cannot fail; returns 1 or 0. na_cfg_built_engines() is the static list
 * for messages ("cpu"). A layout naming an engine or device that is not built
 * fails to load for a node on this machine and gets a WARNING line in the
 * plan for a node on another host. */
int na_cfg_engine_built(na_cfg_engine_t e);
int na_cfg_compute_dev_built(na_cfg_compute_dev_t d);
const char *na_cfg_built_engines(void);
/* The kernels backend of the layout's first compute node on this machine:
 * "cuda:N" (written into buf) for device cuda with gpu N, NULL for cpu or
 * when no compute node is local. Cannot fail. */
const char *na_cfg_local_compute_backend(const na_cfg_t *cfg, char *buf, size_t cap);

/* Print the resolved plan: nodes, addresses, roles, device slots with
 * budgets, partition (and heads per slot when the model file is a readable
 * llama2.c checkpoint), pipelining, KV and X-cache settings. Cannot fail. */
void na_cfg_print_plan(const na_cfg_t *cfg, FILE *f);

/* Print the schema: every key with its type, default and meaning. */
void na_cfg_print_schema(FILE *f);

/* Call fn(key, ctx) for every dotted key of the schema ("storage[].devices[].path").
 * Used by the tests to check docs/config.md covers the schema. */
void na_cfg_schema_foreach(void (*fn)(const char *key, void *ctx), void *ctx);

#endif /* NA_CONFIG_H */
