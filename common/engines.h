/* common/engines.h — the registry of attention engine names: which engines
 * a layout may name (devices[].engine) and which are built into this
 * nearattn. The one list read by the layout schema (common/config_schema.c),
 * config validation and `check-config --plan` (common/config_plan.c) and
 * the storage node's engine table (storage-node/attn_engine.c, whose
 * implementation table is indexed by na_engines_id_t and must agree with
 * na_engines_has: tests/unit/test_attn_engine.c checks it). */
#ifndef NA_ENGINES_H
#define NA_ENGINES_H

#include "common/status.h"

/* Same order and values as na_cfg_engine_t (common/config.h). */
typedef enum {
    NA_ENGINE_CPU  = 0,
    NA_ENGINE_CUDA = 1,
    NA_ENGINE_CSD  = 2,
    NA_ENGINE_COUNT
} na_engines_id_t;

/* Names by id, NULL-terminated ("cpu", "cuda", "csd"). */
extern const char *const na_engines_names[NA_ENGINE_COUNT + 1];

/* Id of a known engine name (exact match), or -1. */
int         na_engines_find(const char *name);
/* 1 if engine id is built into this binary, else 0 (also for a bad id). */
int         na_engines_has(int id);
/* Static list of the built engines for messages: "cpu". */
const char *na_engines_list(void);
/* NA_OK if name is a built engine; NA_ERR_NOT_FOUND for an unknown name,
 * NA_ERR_UNSUPPORTED for a known engine not built in, each with a message
 * naming the engine and the ones that are available. */
na_status_t na_engines_check(const char *name);

#endif /* NA_ENGINES_H */
