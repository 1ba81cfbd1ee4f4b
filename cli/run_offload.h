/* cli/run_offload.h — the offload half of `nearattn run` (cli/run_offload.c). */
#ifndef NA_RUN_OFFLOAD_H
#define NA_RUN_OFFLOAD_H

#include "common/config.h"
#include "compute-node/offload.h"

typedef struct {
    const na_cfg_t  *cfg;          /* the layout (borrowed) */
    const char      *config_path;  /* as given, for the storage nodes started here */
    const char      *cluster;      /* "start" (fork/exec the storage nodes), "connect"
                                      (a running cluster), "inproc" (slots in this process) */
    int              kvfetch;      /* 1: the kv-fetch baseline (compute-node/attn_kvfetch.h)
                                      in place of the remote attention service */
    int              max_batch;    /* <= 0: the layout's parallel.max_batch */
    const int       *stop_ids;
    int              n_stop;
    na_gen_token_fn  on_token;
    na_gen_done_fn   on_done;
    na_off_error_fn  on_error;
    void            *user;
} na_run_offload_args_t;

/* Storage nodes of a layout started on this machine (fork/exec of
 * `nearattn node --config F --name S`, each waited for until READY; logs in
 * $TMPDIR/nearattn-run-CLUSTER-NAME.log). */
typedef struct na_run_cluster na_run_cluster_t;
na_status_t na_run_cluster_start(const na_cfg_t *cfg, const char *cfg_path,
                                 na_run_cluster_t **c_p);
/* SIGTERM, a bounded wait, SIGKILL; frees c. NULL is a no-op. */
void        na_run_cluster_stop(na_run_cluster_t *c);

/* Run reqs[0..n) offloaded as described in cli/run_offload.c and print the
 * summary to stderr. Returns the cluster's or the generator's error; the
 * storage nodes it started are stopped either way. */
na_status_t na_run_offload(const na_run_offload_args_t *a, na_engine_t *e, na_request_t **reqs,
                           int n, na_off_stats_t *stats);

#endif /* NA_RUN_OFFLOAD_H */
