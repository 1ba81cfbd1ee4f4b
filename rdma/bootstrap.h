/* rdma/bootstrap.h — who am I: a node learns its identity from --name, or
 * from the launcher's rank (Open MPI, PMIx, PMI, Slurm), which is then mapped
 * onto the layout's node order (compute nodes first, then storage nodes, as
 * the layout lists them). */
#ifndef NA_RDMA_BOOTSTRAP_H
#define NA_RDMA_BOOTSTRAP_H

#include "common/status.h"

#define NA_BOOT_NAME_MAX 64

typedef struct {
    int  rank;                    /* -1 when started by hand with --name */
    int  size;                    /* launcher's world size, -1 if unknown */
    const char *source;           /* "--name", "OMPI_COMM_WORLD_RANK", ... (static) */
    char name[NA_BOOT_NAME_MAX];  /* --name, or "" until mapped */
} na_boot_t;

/* Fill *b from name (the --name argument, may be NULL) or the environment, in
 * this order: --name, OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID.
 * NA_ERR_NOT_FOUND if none is set, NA_ERR_INVALID for a malformed rank. */
na_status_t na_boot_detect(const char *name, na_boot_t *b);

/* Map *b onto the layout's nodes (names[n] in layout order): by name if one
 * was given, else names[rank]. Writes the index and fills b->name.
 * NA_ERR_NOT_FOUND for an unknown name, NA_ERR_RANGE for rank >= n. */
na_status_t na_boot_map(na_boot_t *b, const char *const *names, int n, int *index_p);

#endif /* NA_RDMA_BOOTSTRAP_H */
