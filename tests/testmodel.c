/* tests/testmodel.c — the helpers of tests/testutil.h that need na_common:
 * generated models and cluster layout files. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/config.h"
#include "common/genmodel.h"
#include "common/model.h"
#include "common/status.h"
#include "testutil.h"

int na_test_genmodel(const char *dir, const char *name, const na_genmodel_opts_t *o,
                     const char *ext, char *path, size_t cap)
{
    char prefix[700];
    int failed = na_test_failures;

    snprintf(prefix, sizeof(prefix), "%s/%s", dir, name);
    snprintf(path, cap, "%s.%s", prefix, ext);
    NA_CHECK_OK(na_genmodel_write(prefix, o));
    return na_test_failures == failed ? 0 : -1;
}

na_model_t *na_test_genmodel_open(const char *dir, const char *name,
                                  const na_genmodel_opts_t *o, const char *ext)
{
    char path[720];
    na_model_t *m = NULL;

    if (na_test_genmodel(dir, name, o, ext, path, sizeof(path)) == 0)
        NA_CHECK_OK(na_model_open(path, &m));
    return m;
}

FILE *na_test_layout_begin(const char *path, const char *cluster)
{
    const char *src = getenv("NA_SOURCE_DIR");
    FILE *f = fopen(path, "w");

    if (f == NULL) {
        na_err(NA_ERR_IO, "cannot write %s", path);
        return NULL;
    }
    fprintf(f, "cluster: { name: %s, secret_file: \"%s/cluster-configs/dev.secret\" }\n",
            cluster, src ? src : ".");
    return f;
}

void na_test_layout_nodes(FILE *f, int n, int port0, const char *kvdir, int dram_mb, int ssd_mb)
{
    int s;

    fprintf(f, "compute:\n  - { name: c0, host: 127.0.0.1 }\nstorage:\n");
    for (s = 0; s < n; s++)
        fprintf(f, "  - name: s%d\n    host: 127.0.0.1\n    port: %d\n    devices:\n"
                   "      - { path: \"%s/s%d\", dram_mb: %d, ssd_mb: %d }\n",
                s, port0 + s, kvdir, s, dram_mb, ssd_mb);
}

/* The layout file at path: nodes, then (model not NULL) the model and
 * transport sections, then fmt. NA_OK, or NA_ERR_IO (said). */
static int layout_vwrite(const char *path, const char *cluster, int n, int port0,
                         const char *kvdir, int dram_mb, const char *model, const char *tls,
                         int heartbeat_ms, int peer_timeout_ms, const char *fmt, va_list ap)
    __attribute__((format(printf, 11, 0)));
static int layout_vwrite(const char *path, const char *cluster, int n, int port0,
                         const char *kvdir, int dram_mb, const char *model, const char *tls,
                         int heartbeat_ms, int peer_timeout_ms, const char *fmt, va_list ap)
{
    FILE *f = na_test_layout_begin(path, cluster);

    if (f == NULL)
        return NA_ERR_IO;
    na_test_layout_nodes(f, n, port0, kvdir, dram_mb, 64);
    if (model != NULL)
        fprintf(f, "model: { path: \"%s\" }\n"
                   "transport: { tls: %s, timeout_ms: 5000, heartbeat_ms: %d, "
                   "peer_timeout_ms: %d }\n", model, tls, heartbeat_ms, peer_timeout_ms);
    vfprintf(f, fmt, ap);
    if (fclose(f) != 0)
        return na_err(NA_ERR_IO, "cannot write %s", path);
    return NA_OK;
}

int na_test_layout_write(const char *path, const char *cluster, int n, int port0,
                         const char *kvdir, int dram_mb, const char *fmt, ...)
{
    va_list ap;
    int st;

    va_start(ap, fmt);
    st = layout_vwrite(path, cluster, n, port0, kvdir, dram_mb, NULL, NULL, 0, 0, fmt, ap);
    va_end(ap);
    return st;
}

int na_test_stories_or_gen(const char *dir, const char *name, const na_genmodel_opts_t *o,
                           char *path, size_t cap)
{
    const char *stories = na_test_shared_model("stories260K.bin");

    if (stories == NULL)
        return na_test_genmodel(dir, name, o, "bin", path, cap);
    snprintf(path, cap, "%s", stories);
    return 0;
}

int na_test_layout_cluster(const char *dir, const char *cluster, int n, int port0,
                           const char *model, const char *tls, int heartbeat_ms,
                           int peer_timeout_ms, na_cfg_t **cfg_p, const char *fmt, ...)
{
    char path[700], kvdir[600];
    va_list ap;
    int st;

    snprintf(path, sizeof(path), "%s/layout.yaml", dir);
    snprintf(kvdir, sizeof(kvdir), "%s/kv", dir);
    va_start(ap, fmt);
    st = layout_vwrite(path, cluster, n, port0, kvdir, 16, model, tls, heartbeat_ms,
                       peer_timeout_ms, fmt, ap);
    va_end(ap);
    return st == NA_OK ? na_cfg_load(path, cfg_p) : st;
}
