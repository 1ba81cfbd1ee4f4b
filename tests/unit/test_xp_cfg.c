/* tests/unit/test_xp_cfg.c — transport options from a layout (rdma/xp_cfg.c):
 * a node that shares this machine with another node of the layout never
 * busy-polls (spin_us -1); a node alone on its host keeps the default. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma/xp_cfg.h"
#include "tests/testutil.h"

static na_cfg_t *load(const char *src, const char *file)
{
    char path[4096];
    na_cfg_t *cfg = NULL;
    snprintf(path, sizeof(path), "%s/cluster-configs/%s", src, file);
    NA_CHECK_OK(na_cfg_load(path, &cfg));
    return cfg;
}

int main(void)
{
    const char *src = getenv("NA_SOURCE_DIR");
    na_xp_opts_t xo;
    na_cfg_t *cfg;

    if (src == NULL) {
        fprintf(stderr, "test_xp_cfg: NA_SOURCE_DIR is not set\n");
        return 1;
    }
    /* local.yaml: the compute node and two storage nodes on 127.0.0.1 */
    if ((cfg = load(src, "local.yaml")) != NULL) {
        NA_CHECK(na_xp_cfg_shares_cores(cfg, "c0"));
        NA_CHECK(na_xp_cfg_shares_cores(cfg, "s0"));
        NA_CHECK(na_xp_cfg_shares_cores(cfg, "s9"));      /* a node not in it: beside them */
        na_xp_opts_from_cfg(cfg, "s0", 0, 0, &xo);
        NA_CHECK(xo.spin_us == -1);
        na_cfg_destroy(cfg);
    }
    /* rack-example.yaml: every node on another host, none local here */
    if ((cfg = load(src, "rack-example.yaml")) != NULL) {
        NA_CHECK(!na_xp_cfg_shares_cores(cfg, "gpu0"));
        na_xp_opts_from_cfg(cfg, "gpu0", 0, 0, &xo);
        NA_CHECK(xo.spin_us == 0);                          /* the transport's default */
        na_cfg_destroy(cfg);
    }
    /* the tls -> UCX_TLS table (it lives here, not in common/) */
    if ((cfg = load(src, "test-tcp.yaml")) != NULL) {
        const char *t = na_xp_cfg_ucx_tls(cfg);
        NA_CHECK(t != NULL && !strcmp(t, "tcp,self"));
        na_cfg_destroy(cfg);
    }
    if ((cfg = load(src, "test-shm.yaml")) != NULL) {
        const char *t = na_xp_cfg_ucx_tls(cfg);
        NA_CHECK(t != NULL && !strcmp(t, "sm,self,tcp"));
        na_cfg_destroy(cfg);
    }
    if ((cfg = load(src, "local.yaml")) != NULL) {
        NA_CHECK(cfg->transport.tls_kind != NA_CFG_TLS_AUTO || na_xp_cfg_ucx_tls(cfg) == NULL);
        na_cfg_destroy(cfg);
    }
    NA_CHECK(na_xp_tls_ucx(NA_XP_TLS_AUTO, NULL) == NULL);
    NA_CHECK(!strcmp(na_xp_tls_ucx(NA_XP_TLS_RAW, "rc_x,sm,self"), "rc_x,sm,self"));
    NA_CHECK(na_xp_tls_ucx((na_xp_tls_t)9, NULL) == NULL);
    return na_test_finish();
}
