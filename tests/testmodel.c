/* tests/testmodel.c — the helpers of tests/testutil.h that need na_common:
 * generated models and cluster layout files. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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

int na_test_layout_write(const char *path, const char *cluster, int n, int port0,
                         const char *kvdir, int dram_mb, const char *fmt, ...)
{
    FILE *f = na_test_layout_begin(path, cluster);
    va_list ap;

    if (f == NULL)
        return NA_ERR_IO;
    na_test_layout_nodes(f, n, port0, kvdir, dram_mb, 64);
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    if (fclose(f) != 0)
        return na_err(NA_ERR_IO, "cannot write %s", path);
    return NA_OK;
}
