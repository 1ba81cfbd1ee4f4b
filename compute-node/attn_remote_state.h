/* compute-node/attn_remote_state.h — the private state of the attention
 * service over storage nodes (its nodes, open requests and batches in
 * flight) and the lookups every layer uses, under the service's three
 * one-way layers, each calling only the ones below it (and the storage
 * client, compute-node/storage_client.h, under all three):
 *   compute-node/attn_remote.c        the service and its nodes' connections:
 *                                     create, connect, join, the session's
 *                                     end handler, stats, the ops table;
 *   compute-node/attn_remote_req.c    a request's life: open/placement,
 *                                     prefill, fetch, release;
 *   compute-node/attn_remote_decode.c the decode round trip (submit, answers,
 *                                     poll) and what a node that goes down
 *                                     fails (rm_node_end).
 * A node's end reaches attn_remote.c through the end handler it registered
 * with the session, never by a call up. */
#ifndef NA_ATTN_REMOTE_STATE_H
#define NA_ATTN_REMOTE_STATE_H

#include <stdint.h>
#include <string.h>

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
    na_wire_attn_entry_t *we[RM_MAX_NODES]; /* node j's entries as sent (the check of
                                               its ATTN_OUT reads them) */
    int              cap[RM_MAX_NODES];     /* room of map[j] and we[j]: grown, never
                                               shrunk (no allocation per batch) */
    int              cnt[RM_MAX_NODES];
    int              chunk[RM_MAX_NODES];   /* entries per message to node j */
    int              n_chunks[RM_MAX_NODES];
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

/* Copy the string src into dst[cap], cut to fit. */
static inline void rm_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memmove(dst, src, n);
    dst[n] = '\0';
}

static inline rm_req_t *rm_find(rm_t *p, uint64_t id)
{
    return (rm_req_t *)na_asvc_req_find(p->reqs, id);
}

/* The node of a session peer, -1 if none. */
static inline int rm_node_of(rm_t *p, na_peer_t *peer)
{
    rm_node_t *nd = na_peer_user(peer);
    return nd != NULL ? (int)(nd - p->nodes) : -1;
}

/* ---- attn_remote_req.c: a request's life on its nodes (the service's
 * calls; placement over the nodes connected so far: the service retries
 * late nodes before it opens) */
na_status_t rm_open(na_asvc_t *s, uint64_t req, int max_tokens);
na_status_t rm_open_prefix(na_asvc_t *s, uint64_t req, int max_tokens,
                           const na_asvc_prompt_t *pr, int *hit_p);
na_status_t rm_fetch(na_asvc_t *s, uint64_t req, int layer, int pos0, int n_tok, void *k,
                     void *v, na_dtype_t dtype);
na_status_t rm_prefill(na_asvc_t *s, uint64_t req, int layer, const void *k,
                       const void *v, na_dtype_t dtype, int n_tok);
na_status_t rm_prefill_done(na_asvc_t *s, uint64_t req);
void        rm_release(na_asvc_t *s, uint64_t req, int status);
/* A blocking call to node j: rm_call_peer gives its peer, NULL when it is
 * dead (na_errmsg() says why); rm_call_end takes the call's status: a call
 * that failed because its peer ended (a send whose endpoint failed) takes
 * the node down now, so that the caller places the request elsewhere
 * instead of picking this node again; NA_ERR_PEER with the node's reason
 * when it is down. */
na_peer_t  *rm_call_peer(rm_t *p, int j);
na_status_t rm_call_end(rm_t *p, int j, na_status_t st);

/* ---- attn_remote_decode.c: the decode round trip (the service's calls) */
na_status_t rm_submit(na_asvc_t *s, int batch, int layer, na_asvc_entry_t *e, int n);
na_status_t rm_poll(na_asvc_t *s, int timeout_ms, int *batch_p);
/* Node j went down (left: it said BYE): it takes no requests, and the
 * entries it owes fail with the reason. No-op on a node already down. */
void        rm_node_end(rm_t *p, int j, const char *why, int left);
void        rm_node_lost(rm_t *p, int j, const char *why);
/* Forget every batch in flight and free their entry tables (destroy). */
void        rm_batches_forget(rm_t *p);

#endif /* NA_ATTN_REMOTE_STATE_H */
