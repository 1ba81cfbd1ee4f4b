/* compute-node/xcache.h — cooperative X-cache (INF2 §4.3; compute-node/
 * xcache.c): the layer inputs of a request kept on the compute node, its
 * K and V regenerated from them every step (used by the offload engine,
 * compute-node/offload.h: xcache, xcache_share, xcache_host_mb). */
#ifndef NA_XCACHE_H
#define NA_XCACHE_H

#include <stddef.h>

#include "common/status.h"
#include "compute-node/engine.h"

/* X of one request: per layer the normed layer input rows xb (f16), from
 * which K = RoPE(X·Wk) and V = X·Wv are regenerated every step. */
typedef struct na_xcache na_xcache_t;

/* NA_OK when the model can use the X-cache (MHA: X per token and layer is
 * dim values, K+V is 2·kv_dim); NA_ERR_UNSUPPORTED with the sizes when X
 * would not be smaller than K+V. */
na_status_t na_xcache_check(const na_model_config_t *mc);
/* Bytes of X for max_tokens tokens. */
size_t      na_xcache_bytes(const na_model_config_t *mc, int max_tokens);
na_status_t na_xcache_create(const na_model_config_t *mc, int max_tokens, na_xcache_t **x_p);
void        na_xcache_destroy(na_xcache_t *x);
/* Store rows xb (n, dim) at positions pos0.. of layer. */
void        na_xcache_put(na_xcache_t *x, int layer, int pos0, int n, const float *xb);
/* Attention of one query row q at position pos over layer's X[0..pos]
 * (regenerated K,V; the row at pos must be stored): out (q_dim). Uses the
 * engine's kernels; scratch is grown as needed. NA_ERR_NOMEM. */
na_status_t na_xcache_attend(na_xcache_t *x, na_engine_t *e, int layer, int pos,
                             const float *q, float *out);

#endif /* NA_XCACHE_H */
