/* tests/cluster/cluster_util.c — see cluster_util.h. */
#include <stdlib.h>
#include <string.h>

#include "tests/cluster/cluster_util.h"
#include "tests/testutil.h"

na_cluster_t *na_test_cluster_start(const na_cfg_t *cfg, na_engine_t *e)
{
    na_cluster_opts_t co;
    na_cluster_t *cl = NULL;

    na_cluster_opts_default(&co);
    co.config_path = cfg->file;
    co.mode = "start";
    co.exe = getenv("NA_BIN");
    NA_CHECK_OK(na_cluster_create(&co, e, &cl));
    return cl;
}

na_off_t *na_test_off_create(na_engine_t *e, na_asvc_t *svc, int max_batch,
                             int batches_in_flight, int adaptive, const na_test_off_cb_t *cb)
{
    na_off_opts_t oo;
    na_off_t *g = NULL;

    memset(&oo, 0, sizeof(oo));
    oo.max_batch = max_batch;
    oo.batches_in_flight = batches_in_flight;
    oo.adaptive_batches = adaptive;
    oo.on_token = cb->on_token;
    oo.on_done = cb->on_done;
    oo.on_error = cb->on_error;
    oo.user = cb->user;
    NA_CHECK_OK(na_off_create(e, svc, &oo, &g));
    return g;
}
