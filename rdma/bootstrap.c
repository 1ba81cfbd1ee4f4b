/* rdma/bootstrap.c — rank/name discovery (see rdma/bootstrap.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma/bootstrap.h"

/* One launcher's variables: rank and (optional) world size. */
static const struct {
    const char *rank_var, *size_var;
} na_boot_vars[] = {
    { "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
    { "PMIX_RANK",            "PMIX_SIZE" },
    { "PMI_RANK",             "PMI_SIZE" },
    { "SLURM_PROCID",         "SLURM_NTASKS" },
};

/* Parse a whole non-negative int from an environment value. */
static na_status_t na_boot_int(const char *var, const char *val, int *out)
{
    char *end;
    long v;
    errno = 0;
    v = strtol(val, &end, 10);
    if (errno != 0 || end == val || *end != '\0' || v < 0 || v > 1000000)
        return na_err(NA_ERR_INVALID, "bootstrap: %s='%s' is not a rank", var, val);
    *out = (int)v;
    return NA_OK;
}

na_status_t na_boot_detect(const char *name, na_boot_t *b)
{
    size_t i;

    memset(b, 0, sizeof(*b));
    b->rank = -1;
    b->size = -1;
    if (name != NULL && name[0] != '\0') {
        if (strlen(name) >= sizeof(b->name))
            return na_err(NA_ERR_INVALID, "bootstrap: node name '%s' longer than %d chars",
                          name, NA_BOOT_NAME_MAX - 1);
        snprintf(b->name, sizeof(b->name), "%s", name);
        b->source = "--name";
        return NA_OK;
    }
    for (i = 0; i < sizeof(na_boot_vars) / sizeof(na_boot_vars[0]); i++) {
        const char *r = getenv(na_boot_vars[i].rank_var);
        const char *s = getenv(na_boot_vars[i].size_var);
        na_status_t st;
        if (r == NULL || r[0] == '\0')
            continue;
        st = na_boot_int(na_boot_vars[i].rank_var, r, &b->rank);
        if (st != NA_OK)
            return st;
        if (s != NULL && s[0] != '\0') {
            st = na_boot_int(na_boot_vars[i].size_var, s, &b->size);
            if (st != NA_OK)
                return st;
        }
        b->source = na_boot_vars[i].rank_var;
        return NA_OK;
    }
    return na_err(NA_ERR_NOT_FOUND, "bootstrap: no --name and no launcher rank "
                  "(OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID) in the environment");
}

na_status_t na_boot_map(na_boot_t *b, const char *const *names, int n, int *index_p)
{
    int i;

    if (b->rank < 0) {
        for (i = 0; i < n; i++) {
            if (strcmp(names[i], b->name) == 0) {
                *index_p = i;
                return NA_OK;
            }
        }
        return na_err(NA_ERR_NOT_FOUND, "bootstrap: node '%s' is not in the layout", b->name);
    }
    if (b->rank >= n)
        return na_err(NA_ERR_RANGE, "bootstrap: %s=%d but the layout has only %d nodes",
                      b->source, b->rank, n);
    if (b->size > 0 && b->size != n)
        return na_err(NA_ERR_RANGE, "bootstrap: the launcher started %d processes but the "
                      "layout has %d nodes", b->size, n);
    snprintf(b->name, sizeof(b->name), "%s", names[b->rank]);
    *index_p = b->rank;
    return NA_OK;
}
