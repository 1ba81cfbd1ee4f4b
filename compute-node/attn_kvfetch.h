/* compute-node/attn_kvfetch.h — the kv-fetch attention service (FlexGen-style
 * baseline, compute-node/attn_kvfetch.c): the KV of every request lives on the
 * storage nodes of the layout, but each decode step fetches the request's
 * whole KV of the layer to the compute node (KV_FETCH -> KV_DATA), appends
 * the new token's k/v on the storage node too (PREFILL_KV of one row, so the
 * store stays authoritative) and computes attention here with the same
 * kernels as monolithic generation. Implements na_asvc_t
 * (compute-node/attn_service.h); request partition only. */
#ifndef NA_ATTN_KVFETCH_H
#define NA_ATTN_KVFETCH_H

#include "compute-node/attn_service.h"
#include "kernels/kernels.h"

/* Connect to every storage node of cfg as compute node `name` (a node that
 * cannot be reached is left out with a warning; none reachable is
 * NA_ERR_PEER). kern (borrowed, outlives the service) runs the local
 * attention. cfg is borrowed too. NA_ERR_UNSUPPORTED for head partition or a
 * kv_dtype other than f16/f32. */
na_status_t na_asvc_kvfetch_create(const na_cfg_t *cfg, const na_model_config_t *mc,
                                   const char *name, na_kernels_t *kern, na_asvc_t **s_p);

#endif /* NA_ATTN_KVFETCH_H */
