/* tests/cluster/cluster_util.h — what the cluster tests that run this
 * process as the compute node share (test_alloc_steady, test_offload_engine):
 * the storage nodes of a layout started as `$NA_BIN node` processes, and an
 * offload engine reporting to a test's callbacks. */
#ifndef NA_TEST_CLUSTER_UTIL_H
#define NA_TEST_CLUSTER_UTIL_H

#include "cluster/setup.h"
#include "common/config.h"
#include "compute-node/offload.h"

/* The storage nodes of cfg's layout started by the cluster library
 * (mode "start": free ports, a private KV directory) from the binary
 * $NA_BIN, for the engine e: the cluster, or NULL after a failed check. */
na_cluster_t *na_test_cluster_start(const na_cfg_t *cfg, na_engine_t *e);

/* The callbacks of an offload engine (na_off_opts_t's on_token, on_done,
 * on_error, user). */
typedef struct {
    na_gen_token_fn on_token;
    na_gen_done_fn  on_done;
    na_off_error_fn on_error;
    void           *user;
} na_test_off_cb_t;

/* An offload engine of e over svc, max_batch requests a batch and
 * batches_in_flight batches (adaptive: parallel.adaptive_batches on, that
 * number the most), reporting to cb: the engine, or NULL after a failed
 * check. */
na_off_t *na_test_off_create(na_engine_t *e, na_asvc_t *svc, int max_batch,
                             int batches_in_flight, int adaptive, const na_test_off_cb_t *cb);

#endif /* NA_TEST_CLUSTER_UTIL_H */
