/* compute-node/attn_service.h — "where attention happens" for the offload
 * generator: the KV of each request lives behind a service that stores the
 * prompt's K/V, appends each new token's k/v and computes decode attention.
 *
 *   open(req, max_tokens)             reserve the request's KV on its owners
 *   prefill(req, layer, k, v, n_tok)  bulk K/V of the prompt (rows of kv_dim)
 *   prefill_done(req)                 end of the prompt (owners flush)
 *   submit(batch, layer, entries)     decode attention of one batch, asynchronous
 *   poll(timeout) -> batch            a batch whose every entry completed
 *   release(req)                      free the request's KV everywhere
 *
 * At most one submit per batch id is outstanding (a batch waits for its
 * attention before its next slice); different batches may be in flight at
 * once. Every entry completes, with its o rows or with a status and a reason
 * (a lost storage node, a refused shape, an I/O error): a failing request
 * never blocks the others of its batch, and poll never waits longer than its
 * timeout.
 *
 * Two implementations:
 *   remote  (compute-node/attn_remote.c) storage nodes of the layout over the
 *           transport (rdma/transport.h, common/wire.h), request- or
 *           head-level partition over nodes (each node places the request on
 *           its own device slots);
 *   inproc  (cluster/inproc.c, na_inproc_create in cluster/inproc.h)
 *           the storage node's slot set in this process, driven directly: the same
 *           KV store and attention engines without a network, for fast
 *           deterministic tests of the scheduler and as a one-process mode. */
#ifndef NA_ATTN_SERVICE_H
#define NA_ATTN_SERVICE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/config.h"
#include "common/dtype.h"
#include "common/model.h"
#include "common/status.h"

#define NA_ASVC_REASON_MAX 200

/* One request's decode attention of one layer. q/k/v/o are rows of the
 * request's full shape; the service sends each owner its head range.
 * n_q > 1 makes it a prompt chunk (chunked prefill): n_q tokens at
 * positions pos .. pos+n_q-1, each of q/k/v/o n_q packed rows; the owners
 * append all n_q K/V rows and answer query t over the tokens 0..pos+t
 * (causal), as n_q decode steps one after another would. */
typedef struct {
    uint64_t     req;        /* request id (>= 1) */
    int          pos;        /* position of the (first) new token: the KV holds
                                pos tokens before, pos + n_q after */
    int          n_q;        /* tokens (queries) of the entry; 0 or 1 = one */
    const float *q;          /* (n_q, n_heads*head_dim), RoPE applied */
    const float *k;          /* (n_q, n_kv_heads*head_dim) new keys, RoPE applied */
    const float *v;          /* (n_q, n_kv_heads*head_dim) new values */
    float       *o;          /* (n_q, n_heads*head_dim) output, set on completion */
    /* results */
    na_status_t  status;     /* NA_OK, or why this request failed */
    char         reason[NA_ASVC_REASON_MAX];
} na_asvc_entry_t;

/* Counters, summed over the run. Times in seconds. */
typedef struct {
    uint64_t msgs_sent, msgs_recv;     /* transport messages (remote) */
    uint64_t bytes_sent, bytes_recv;   /* payload + header bytes (remote) */
    uint64_t prefill_bytes;            /* K/V bytes shipped by prefill */
    uint64_t decode_entries;           /* entries submitted */
    double   send_s;                   /* time in encode + send calls */
    double   prefill_s;                /* time shipping prefill K/V (incl. waits) */
    double   attn_s;                   /* attention time the owners reported / measured */
    double   disk_s;                   /* SSD time the owners reported (0 when unknown) */
    uint64_t ssd_bytes_read;           /* from the owners' counters, when known */
    /* engine csd slots of the owners (since they started; 0 when none) */
    uint64_t csd_noop_slots;           /* slots running "csd: XRT noop + C model" */
    uint64_t csd_launches;             /* kernel launches */
    uint64_t csd_p2p_bytes;            /* KV bytes SSD -> device buffers */
    double   link_rtt_s;               /* median HEARTBEAT round trip to the owners at the
                                          end (remote): the network + dispatch floor of
                                          one attention round trip; 0 when unknown */
    /* the storage nodes' own view of decode attention (remote, from their
     * STATS counters over this service's life; 0 when unknown): */
    uint64_t node_parts;               /* (batch, node) messages of decode attention sent:
                                          a batch's nodes work in parallel, so one round
                                          trip holds node_s / node_parts of node time */
    double   node_s;                   /* time the nodes spent serving decode attention */
    double   node_attn_s;              /* of which in attention kernels (worker time / workers) */
    double   node_disk_s;              /* the rest: waiting for SSD reads, staging, replies */
} na_asvc_stats_t;

/* One storage node as a remote service sees it (na_asvc_node_stats). */
typedef struct {
    char     name[64];
    int      alive;                    /* takes requests now */
    uint64_t attn_calls;               /* decode attention answers it gave (batch, layer) */
    double   attn_rt_s;                /* their summed submit -> last answer time */
    uint64_t bytes_sent, bytes_recv;   /* transport bytes to / from it */
    uint64_t kv_dram_bytes;            /* its slots' KV in DRAM and on SSD (STATS: */
    uint64_t kv_ssd_bytes;             /*  dram_used / ssd_used), as last read */
    uint64_t prefix_hit_tokens;        /* prompt tokens it attached from its prefix cache */
    uint64_t prefill_tokens;           /* prompt tokens shipped to it (computed here) */
    uint64_t prefix_cache_bytes;       /* KV its prefix cache holds (as last read) */
} na_asvc_node_stats_t;

typedef struct na_asvc na_asvc_t;

/* A new request's prompt for prefix reuse (docs/prefix-reuse.md), and
 * where its chunked prefill ends. */
typedef struct {
    const uint8_t *fp;       /* NA_WIRE_FP_SIZE bytes: the model's fingerprint */
    const int     *tokens;   /* the prompt's token ids (NULL, n_tok 0: no prefix
                                reuse, only n_prompt said) */
    int            n_tok;
    int            n_prompt; /* > 0: the tokens fed as the prompt through chunked
                                prefill (a remote owner flushes their KV and
                                publishes the prompt's blocks there: REQ_OPEN
                                n_prompt, wire 2.2); 0: not said */
} na_asvc_prompt_t;

typedef struct {
    void        (*destroy)(na_asvc_t *s);
    na_status_t (*open)(na_asvc_t *s, uint64_t req, int max_tokens);
    na_status_t (*prefill)(na_asvc_t *s, uint64_t req, int layer, const void *k,
                           const void *v, na_dtype_t dtype, int n_tok);
    na_status_t (*prefill_done)(na_asvc_t *s, uint64_t req);
    na_status_t (*submit)(na_asvc_t *s, int batch, int layer, na_asvc_entry_t *e, int n);
    na_status_t (*poll)(na_asvc_t *s, int timeout_ms, int *batch_p);
    void        (*release)(na_asvc_t *s, uint64_t req, int status);
    void        (*stats)(na_asvc_t *s, na_asvc_stats_t *out);
    void        (*progress)(na_asvc_t *s);
    /* optional (NULL: no storage nodes, e.g. in-process): see na_asvc_node_stats */
    int         (*node_stats)(na_asvc_t *s, na_asvc_node_stats_t *out, int cap);
    /* optional (NULL: no prefix reuse): see na_asvc_open_prefix, na_asvc_fetch */
    na_status_t (*open_prefix)(na_asvc_t *s, uint64_t req, int max_tokens,
                               const na_asvc_prompt_t *p, int *hit_p);
    na_status_t (*fetch)(na_asvc_t *s, uint64_t req, int layer, int pos0, int n_tok,
                         void *k, void *v, na_dtype_t dtype);
} na_asvc_ops_t;

/* The common head of every implementation. */
struct na_asvc {
    const na_asvc_ops_t *ops;
    const char          *kind;        /* "remote" | "inproc" */
    na_model_config_t    mc;          /* shape of the model served */
    int                  q_dim, kv_dim;
    uint64_t             next_req_id;  /* request ids handed out by na_asvc_new_id */
    double               prefill_s;    /* time in prefill / prefill_done (the wrappers) */
    uint64_t             prefill_bytes;/* K/V bytes of the prefill calls that succeeded */
    int                  shares_cores; /* 1: the attention runs on this machine's cores
                                          (in-process slots, or storage nodes of the
                                          layout on this host): a compute node that
                                          waits for it lets its threads sleep at once
                                          (na_kernels_rest) instead of spinning */
    int                  prefix_block_tokens; /* > 0: open_prefix attaches a prompt's
                                          leading blocks of this many tokens that an
                                          owner keeps, and owners keep a prompt's whole
                                          blocks once it is in; 0: no prefix reuse */
};

/* ---- calls (thin wrappers over ops; see the top comment) ---------------- */

/* Reserve KV for req (prompt + generated <= max_tokens). NA_ERR_NOSPACE when
 * no owner has room (the caller may retry later), NA_ERR_PEER when an owner
 * is gone, NA_ERR_INVALID / NA_ERR_RANGE for a refused shape. */
na_status_t na_asvc_open(na_asvc_t *s, uint64_t req, int max_tokens);
/* Open req like na_asvc_open, offering its prompt: an owner that holds the
 * KV of the prompt's first tokens (whole blocks, never the last token)
 * attaches it, and *hit_p says how many tokens that is (0: none, also for a
 * service without prefix reuse). The request's prefill then ships positions
 * hit .. : na_asvc_prefill's rows are those after the hit. */
na_status_t na_asvc_open_prefix(na_asvc_t *s, uint64_t req, int max_tokens,
                                const na_asvc_prompt_t *p, int *hit_p);
/* Read back positions pos0 .. pos0+n_tok-1 of layer of an open request into
 * k, v ((n_tok, kv_dim) rows of dtype, F32 or the KV dtype). NA_ERR_UNSUPPORTED
 * for a service without it. */
na_status_t na_asvc_fetch(na_asvc_t *s, uint64_t req, int layer, int pos0, int n_tok,
                          void *k, void *v, na_dtype_t dtype);
/* Ship positions 0..n_tok-1 of `layer`: k, v are (n_tok, kv_dim) rows of
 * dtype (F32 or F16, the compute node's local KV; copied before the call
 * returns). The call for the model's last layer returns once the owners
 * accepted (and made durable) every layer of the request; earlier layers may
 * return before their answers (remote), a failure of one of them is
 * returned by a later prefill or prefill_done of the same request. Errors
 * as open. */
na_status_t na_asvc_prefill(na_asvc_t *s, uint64_t req, int layer, const void *k,
                            const void *v, na_dtype_t dtype, int n_tok);
/* The prompt is complete (owners write it through); returns the request's
 * first prefill failure not yet returned. */
na_status_t na_asvc_prefill_done(na_asvc_t *s, uint64_t req);
/* Start decode attention of batch `batch` (0 <= batch < 64) for layer over
 * e[0..n): each entry appends k/v at pos and attends over pos + 1 tokens.
 * The entries must stay valid until poll returned this batch. Fails only
 * for a batch already in flight or no memory; per-request failures arrive
 * in the entries' status. */
static inline na_status_t na_asvc_submit(na_asvc_t *s, int batch, int layer,
                                         na_asvc_entry_t *e, int n)
{
    return s->ops->submit(s, batch, layer, e, n);     /* the decode path: no extra hop */
}
/* Wait up to timeout_ms (0 = do not wait) for a submitted batch whose every
 * entry completed; *batch_p is its id. NA_ERR_TIMEOUT when none did.
 * Also answers the owners' heartbeats (remote): call it when idle. */
static inline na_status_t na_asvc_poll(na_asvc_t *s, int timeout_ms, int *batch_p)
{
    return s->ops->poll(s, timeout_ms, batch_p);
}
/* Free req's KV on its owners (status 0 = normal end). Never fails: an owner
 * that cannot be told frees it when the connection goes. */
void        na_asvc_release(na_asvc_t *s, uint64_t req, int status);
/* Serve the owners without returning anything (heartbeats, completions are
 * kept for poll): call it during long local work (prefill). Never fails. */
void        na_asvc_progress(na_asvc_t *s);
void        na_asvc_stats(na_asvc_t *s, na_asvc_stats_t *out);
/* Per storage node counters into out[0..cap): returns the nodes written
 * (0 for a service without storage nodes: in-process, kv-fetch). The KV
 * bytes are asked of each live node (STATS, a round trip each) only while no
 * attention is in flight; otherwise the last values read are given. */
int         na_asvc_node_stats(na_asvc_t *s, na_asvc_node_stats_t *out, int cap);
/* A fresh request id for this service (1, 2, ...). */
uint64_t    na_asvc_new_id(na_asvc_t *s);
/* Free the service (releases whatever is still open); NULL is a no-op. */
void        na_asvc_destroy(na_asvc_t *s);

/* For implementations: set the common part of a new service (ops, kind, the
 * model's shape and its q/kv row widths). Cannot fail. */
void na_asvc_base_init(na_asvc_t *s, const na_asvc_ops_t *ops, const char *kind,
                       const na_model_config_t *mc);

/* For wrappers (a service in front of another that counts some calls): a
 * wrapper's struct starts with an na_asvc_fwd_t, whose ops pass every call
 * through to `in` (destroy: destroys in, then frees the wrapper; no prefix
 * reuse or KV fetch through a wrapper, so that every open is an open). The
 * wrapper overrides in f->ops only the calls it counts, forwarding them with
 * the na_asvc_* calls on f->in. */
typedef struct {
    na_asvc_t     base;   /* a copy of in's head (shape, counters), ops = &ops */
    na_asvc_t    *in;     /* the service wrapped (owned) */
    na_asvc_ops_t ops;
} na_asvc_fwd_t;

/* A zeroed wrapper of size bytes (>= sizeof(na_asvc_fwd_t)) in front of
 * in, named kind. NULL when out of memory (in is left to the caller). */
na_asvc_fwd_t *na_asvc_fwd_new(na_asvc_t *in, size_t size, const char *kind);

/* For implementations over the layout's storage nodes: 1..max_nodes of them
 * and a KV dtype of f16 or f32 (*kv_dtype_p). NA_ERR_RANGE or
 * NA_ERR_UNSUPPORTED, the message starting with kind. */
na_status_t na_asvc_layout_check(const na_cfg_t *cfg, const char *kind, int max_nodes,
                                 na_dtype_t *kv_dtype_p);

/* For implementations: the FIFO of finished batches poll hands out. Take the
 * oldest of done[0..*n_done) into *batch_p; NA_ERR_TIMEOUT when it is empty. */
static inline na_status_t na_asvc_done_pop(int *done, int *n_done, int *batch_p)
{
    if (*n_done == 0)
        return NA_ERR_TIMEOUT;
    *batch_p = done[0];
    memmove(done, done + 1, (size_t)(*n_done - 1) * sizeof(int));
    (*n_done)--;
    return NA_OK;
}

/* For implementations: the open requests, a list by id. Each request record
 * starts with an na_asvc_req_t (cast between the two). */
typedef struct na_asvc_req {
    uint64_t            id;
    struct na_asvc_req *next;
} na_asvc_req_t;

static inline void na_asvc_req_push(na_asvc_req_t **head, na_asvc_req_t *r)
{
    r->next = *head;
    *head = r;
}

/* Request id in the list, or NULL. */
static inline na_asvc_req_t *na_asvc_req_find(na_asvc_req_t *head, uint64_t id)
{
    for (; head != NULL; head = head->next)
        if (head->id == id)
            return head;
    return NULL;
}

/* Request id of service s for call `call` (a word for the message): the
 * record, or NULL with NA_ERR_NOT_FOUND set ("KIND: CALL of unknown request
 * ID"); the caller returns NA_ERR_NOT_FOUND. */
void *na_asvc_req_get(const na_asvc_t *s, na_asvc_req_t *head, uint64_t id, const char *call);

/* Take request id out of the list (not freed); NULL when it is not there. */
static inline na_asvc_req_t *na_asvc_req_unlink(na_asvc_req_t **head, uint64_t id)
{
    na_asvc_req_t *r;

    for (; *head != NULL && (*head)->id != id; head = &(*head)->next)
        ;
    r = *head;
    if (r != NULL)
        *head = r->next;
    return r;
}

/* ---- implementations ------------------------------------------------------ */

/* Storage nodes of the layout over the transport. `name` is this compute
 * node's name (HELLO). Connects to every storage node (a node that cannot be
 * reached is left out with a warning and, with request partition, tried
 * again when requests are opened, so a node started later takes new
 * requests; none reachable is NA_ERR_PEER).
 * Request partition: each request on one node (least loaded by open
 * requests); head partition: the KV heads split over the layout's global
 * slots (na_cfg_head_split), each node receiving its slots' heads. */
na_status_t na_asvc_remote_create(const na_cfg_t *cfg, const na_model_config_t *mc,
                                  const char *name, na_asvc_t **s_p);

#endif /* NA_ATTN_SERVICE_H */
