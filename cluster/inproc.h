/* cluster/inproc.h — the in-process attention service: every device slot of
 * every storage node of the layout, built in this process by the storage
 * node's slot set (storage-node/slotset.h) and driven directly, without a
 * network (the "inproc" implementation of compute-node/attn_service.h). */
#ifndef NA_CLUSTER_INPROC_H
#define NA_CLUSTER_INPROC_H

#include "common/config.h"
#include "common/model.h"
#include "compute-node/attn_service.h"

/* Slots from the layout (KV directory, DRAM/SSD budgets, kv.* settings
 * including kv.tier, engine, partition). Fails with the slot's error
 * (directory, budget, an engine not built). */
na_status_t na_inproc_create(const na_cfg_t *cfg, const na_model_config_t *mc,
                                  na_asvc_t **s_p);

#endif /* NA_CLUSTER_INPROC_H */
