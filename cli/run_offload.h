/* cli/run_offload.h — the offload half of `nearattn run` (cli/run_offload.c). */
#ifndef NA_RUN_OFFLOAD_H
#define NA_RUN_OFFLOAD_H

#include <signal.h>

#include "cluster/setup.h"
#include "common/config.h"
#include "compute-node/offload.h"

typedef struct {
    na_cluster_opts_t cluster;     /* the layout, start / connect / inproc, kv-fetch,
                                      --model, --kv-dtype, the stop flag: cluster/setup.h */
    int              max_batch;    /* <= 0: the layout's parallel.max_batch */
    int              prefill_chunk; /* <= 0: the layout's parallel.prefill_chunk */
    int              prefill_budget; /* 0: the layout's parallel.prefill_weighted;
                                        1: tokens; 2: weighted */
    const int       *stop_ids;
    int              n_stop;
    na_gen_token_fn  on_token;
    na_gen_done_fn   on_done;
    na_off_error_fn  on_error;
    void            *user;
    int              failed_before; /* requests refused before the run (a prompt too
                                       long...): counted with the failed ones */
    int              no_prefix_reuse; /* 1: kv.prefix_reuse off for this run */
    int              no_adaptive;   /* 1: parallel.adaptive_batches off for this run */
    int              no_xcache;     /* 1: the layout's X-cache is not used (perplexity:
                                       every request's KV on the storage nodes) */
} na_run_offload_args_t;

/* Run reqs[0..n) offloaded as described in cli/run_offload.c and print the
 * summary to stderr. Returns the cluster's or the engine's error, or
 * NA_ERR_CANCELED when *stop was set; the storage nodes it started are
 * stopped (and their private directory removed) either way. */
na_status_t na_run_offload(const na_run_offload_args_t *a, na_engine_t *e, na_request_t **reqs,
                           int n, na_off_stats_t *stats);

#endif /* NA_RUN_OFFLOAD_H */
