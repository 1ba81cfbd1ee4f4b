/* compute-node/attn_remote_internal.h — private state of the attention
 * service over storage nodes, one job per file: compute-node/attn_remote.c
 * (the service and its nodes: create, connect, lost nodes, stats),
 * attn_remote_req.c (a request's life: open/placement, prefill, release) and
 * attn_remote_decode.c (the decode round trip: submit, answers, poll). */
#ifndef NA_ATTN_REMOTE_INTERNAL_H
#define NA_ATTN_REMOTE_INTERNAL_H

#include <stdint.h>

#include "common/config.h"
#include "compute-node/attn_service.h"
#include "compute-node/prefix.h"
#include "compute-node/storage_dir.h"
#include "rdma/session.h"

#define RM_MAX_NODES   64
#define RM_MAX_BATCH   64
#define RM_SLICE_MS    50

typedef struct {
    na_peer_t *peer;               /* NULL: never connected */
    na_xp_ep_t *pending;           /* a connect in progress (its handshake) */
    char     name[NA_XP_NAME_MAX];
    char     host[256];            /* where it listens (layout, or a later layout) */
    long     port;
    int      alive;                /* takes requests */
    int      joining;              /* connected, its shape (STATS) not checked yet */
    int      announced;            /* it connected to us (not in any layout we read) */
    uint64_t join_until_ns;        /* announced: STATS asked again until then */
    int      h0, h1;               /* head partition: KV heads held (h1 == h0: none) */
    long     n_open;
    char     why[NA_ASVC_REASON_MAX]; /* why it is dead */
    uint64_t next_try_ns;          /* unreachable at create: next connect attempt */
    unsigned retry_ms;             /* its back-off, doubled per failed attempt */
    int      base_ok;              /* counters below read at connect */
    uint64_t base_dec_ns, base_comp_ns, base_ssd;
    uint64_t attn_calls;           /* batches it answered (rm_batch_node_done) */
    uint64_t attn_rt_ns;           /* their summed submit -> its last answer */
    uint64_t kv_dram, kv_ssd;      /* its slots' dram_used / ssd_used, last STATS */
    uint64_t pfx_hit, pfx_bytes, prefill_tok; /* node.prefix_hit_tokens, prefix_cache_bytes,
                                                 prefill_tokens of its last STATS */
} rm_node_t;

typedef struct {
    na_asvc_req_t link;             /* id, next (first) */
    int      n_own;
    int      own[RM_MAX_NODES];     /* node indexes */
    /* prefill shipping: PREFILL_KV with MORE is not waited for; its ACK or
     * ERROR arrives later and is counted here */
    int      pf_pend[RM_MAX_NODES]; /* answers owed by own[i] */
    int      pf_open;               /* MORE parts sent since the last closing part */
    na_status_t pf_st;              /* first failed part (NA_OK: none) */
    char     pf_why[NA_ASVC_REASON_MAX];
    int      pos0;                  /* prompt tokens its node attached (prefix reuse):
                                       its prefill ships positions pos0 .. */
} rm_req_t;

/* A batch in flight. */
typedef struct {
    int              active;
    int              layer;
    na_asvc_entry_t *e;
    int              n;
    int              pending;               /* nodes that still owe an ATTN_OUT */
    int              owes[RM_MAX_NODES];    /* 1 while node j owes one */
    int             *map[RM_MAX_NODES];     /* node j's message entry k -> index in e */
    int              cnt[RM_MAX_NODES];
    int              chunk[RM_MAX_NODES];   /* entries per message to node j */
    unsigned         want[RM_MAX_NODES];    /* bit c: ATTN_OUT of chunk c still owed */
    uint64_t         t0_ns;
} rm_batch_t;

/* A node's STATS counters this service uses. */
typedef struct {
    uint64_t ssd;                   /* sum of the slots' SSD bytes read */
    uint64_t dec_ns;                /* node.decode_ns */
    uint64_t comp_ns;               /* sum of s<i>.attn_compute_ns / node.attn_threads */
    uint64_t csd_noop, csd_launches, csd_p2p;   /* s<i>.csd_* summed (engine csd) */
    uint64_t dram_used, ssd_used;   /* s<i>.dram_used / ssd_used summed */
    uint64_t pfx_hit, pfx_bytes;    /* node.prefix_hit_tokens / prefix_cache_bytes */
    uint64_t prefill_tok;           /* node.prefill_tokens */
} rm_counters_t;

typedef struct {
    na_asvc_t   base;
    const na_cfg_t *cfg;
    na_ses_t   *ses;                /* the storage nodes' connections */
    rm_node_t   nodes[RM_MAX_NODES];
    int         n_nodes;
    int         head_part;
    na_dtype_t  kv_dtype;
    na_asvc_req_t *reqs;         /* open requests (rm_req_t) */
    rm_batch_t  b[RM_MAX_BATCH];
    int         done[RM_MAX_BATCH];
    int         n_done;
    int         rr;
    na_sc_dir_t *dir;               /* request partition: cfg->file re-read (NULL: no) */
    int         dir_seen;           /* its entries looked at */
    uint64_t    next_layout_ns;     /* next look at it */
    na_asvc_stats_t st;
    na_pfx_map_t *pmap;             /* prefix blocks sent to each node (placement guess) */
} rm_t;

/* attn_remote.c: the service and its nodes */
void        rm_copy(char *dst, size_t cap, const char *src);
rm_req_t   *rm_find(rm_t *p, uint64_t id);
/* Request partition: retry the nodes unreachable at create and add the
 * storage nodes that join the layout file (see there). */
void        rm_retry_late(rm_t *p);
/* Node j is gone: fail what it owes. */
void        rm_node_lost(rm_t *p, int j, const char *why);
void        rm_on_end(void *ctx, na_peer_t *peer, na_ses_end_t how, const char *why);
/* Connect node j (index into cfg's storage nodes) as a session peer and ask
 * for its base counters. */
/* Send m to node j and wait for its answer of type reply (ACK ...). */
na_status_t rm_call(rm_t *p, int j, na_wire_msg_t *m, na_wire_type_t reply, unsigned flags,
                    int timeout_ms, na_ses_reply_fn fn, uintptr_t arg);
/* The service's stats call (counters, STATS of the nodes, pings). */
void        rm_stats(na_asvc_t *s, na_asvc_stats_t *out);
/* The per-node counters (na_asvc_node_stats). */
int         rm_node_stats(na_asvc_t *s, na_asvc_node_stats_t *out, int cap);
/* The node of a session peer, -1 if none. */
int         rm_node_of(rm_t *p, na_peer_t *peer);

/* attn_remote_req.c: a request's life on its nodes (the service's calls) */
na_status_t rm_open(na_asvc_t *s, uint64_t req, int max_tokens);
na_status_t rm_open_prefix(na_asvc_t *s, uint64_t req, int max_tokens,
                           const na_asvc_prompt_t *pr, int *hit_p);
na_status_t rm_fetch(na_asvc_t *s, uint64_t req, int layer, int pos0, int n_tok, void *k,
                     void *v, na_dtype_t dtype);
na_status_t rm_prefill(na_asvc_t *s, uint64_t req, int layer, const void *k,
                       const void *v, na_dtype_t dtype, int n_tok);
na_status_t rm_prefill_done(na_asvc_t *s, uint64_t req);
void        rm_release(na_asvc_t *s, uint64_t req, int status);
void        rm_prefill_reply(void *ctx, na_peer_t *peer, uintptr_t req, na_status_t st,
                             const na_ses_in_t *in);

/* attn_remote_decode.c: the decode round trip (the service's calls) */
na_status_t rm_submit(na_asvc_t *s, int batch, int layer, na_asvc_entry_t *e, int n);
na_status_t rm_poll(na_asvc_t *s, int timeout_ms, int *batch_p);
void        rm_entry_fail(na_asvc_entry_t *x, na_status_t st, const char *text);
void        rm_batch_node_done(rm_t *p, int bi, int j);
void        rm_attn_reply(void *ctx, na_peer_t *peer, uintptr_t batch, na_status_t st,
                          const na_ses_in_t *in);

#endif /* NA_ATTN_REMOTE_INTERNAL_H */
