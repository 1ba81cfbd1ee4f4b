/* compute-node/kv_local.h — the KV cache of one request held in the compute
 * node's own memory (monolithic mode, and prefill in offload mode).
 *
 * Per layer, K and V are arrays [token][kv_head][head_dim] in f16 or f32, the
 * layout the kernels' attention ops read. Memory follows use: a cache starts
 * empty and grows (doubling, capped at the model's seq_len) as tokens are
 * reserved, so a short request never pays for the whole context. The
 * arrays are buffers of the engine's backend (memory type chosen at create);
 * writes and attention are ops on its queue. */
#ifndef NA_KV_LOCAL_H
#define NA_KV_LOCAL_H

#include <stddef.h>

#include "common/dtype.h"
#include "common/model.h"
#include "common/status.h"
#include "kernels/kernels.h"

typedef struct na_lkv {
    na_dtype_t dtype;       /* NA_DTYPE_F32 or NA_DTYPE_F16 */
    int        n_layers;
    int        kv_dim;      /* n_kv_heads * head_dim */
    int        max_tokens;  /* the model's seq_len */
    int        cap;         /* tokens allocated per layer */
    int        n_tok;       /* tokens whose K/V are stored (all layers) */
    na_kernels_t *kern;     /* borrowed: the backend owning the buffers */
    na_kmem_t  mem;         /* memory type of kb/vb */
    na_kbuf_t **kb;         /* [n_layers] -> (cap, kv_dim) of dtype */
    na_kbuf_t **vb;         /* [n_layers] -> (cap, kv_dim) of dtype */
    void     **k;           /* [n_layers] host views of kb (valid after
                               na_lkv_to_host) */
    void     **v;           /* [n_layers] host views of vb */
    na_kbuf_t **km, **vm;   /* [n_layers] pinned mirrors of device kb/vb */
} na_lkv_t;

/* An empty cache for a model's shape, in memory type mem of backend kern
 * (which outlives it); nothing is allocated for tokens yet. dtype must be
 * F32 or F16 (NA_ERR_INVALID otherwise); NA_ERR_NOMEM. */
na_status_t na_lkv_create(const na_model_config_t *cfg, na_dtype_t dtype,
                               na_kernels_t *kern, na_kmem_t mem, na_lkv_t **kv_p);
/* Free the cache; NULL is a no-op. */
void na_lkv_destroy(na_lkv_t *kv);

/* Make room for n_tok tokens in total (positions 0..n_tok-1) in every layer,
 * keeping what is stored (waits for the backend when it grows). NA_ERR_RANGE
 * past seq_len, NA_ERR_NOMEM, or the backend's status. */
na_status_t na_lkv_reserve(na_lkv_t *kv, int n_tok);

/* Enqueue the store of rows k_rows/v_rows (n, kv_dim) f32 at positions
 * pos0..pos0+n-1 of `layer`, converting to the cache dtype (ops->store). The
 * positions must be reserved. Fails with the op's status. */
na_status_t na_lkv_write(na_lkv_t *kv, int layer, int pos0, int n,
                              const na_kbuf_t *k_rows, const na_kbuf_t *v_rows);

/* Mark positions 0..n_tok-1 as stored (after all layers of a step wrote). */
void na_lkv_commit(na_lkv_t *kv, int n_tok);

/* Enqueue the attention of n queries q (n, n_heads*head_dim) at positions
 * pos0.. over the cache of `layer` (which must already hold positions
 * 0..pos0+n-1), via the backend's decode (n == 1) or causal prefill op. out
 * as q. Fails with the op's status. */
na_status_t na_lkv_attend(const na_lkv_t *kv, int layer, const na_kbuf_t *out,
                               const na_kbuf_t *q, int n, int pos0,
                               const na_model_config_t *cfg);

/* Decode attention of n caches of one backend at once: row i (q[i], one
 * row) against the first ctx[i] positions of kv[i]'s `layer`, into out[i].
 * On a cuda backend one batched launch per NA_LKV_BATCH rows (the same bits
 * as n single launches: kernels/cuda/cuda_attn.cu plans each row from its
 * own context), elsewhere n na_lkv_attend calls. Fails as they do. */
#define NA_LKV_BATCH 64
na_status_t na_lkv_attend_decode(na_lkv_t *const *kv, int n, int layer, const na_kbuf_t *out,
                                 const na_kbuf_t *q, const int *ctx,
                                 const na_model_config_t *cfg);

/* The one way host code reads the cache: make k[l]/v[l] hold the stored
 * n_tok tokens of every layer on the host (device memory is downloaded into
 * pinned mirrors) and wait for it. NA_ERR_NOMEM or the backend's status. */
na_status_t na_lkv_to_host(na_lkv_t *kv);

/* Bytes currently allocated for K and V. */
size_t na_lkv_bytes(const na_lkv_t *kv);

#endif /* NA_KV_LOCAL_H */
