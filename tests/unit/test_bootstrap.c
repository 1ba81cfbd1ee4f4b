/* tests/unit/test_bootstrap.c — rank / name discovery (rdma/bootstrap.c). */
#include <stdlib.h>
#include <string.h>

#include "rdma/bootstrap.h"
#include "tests/testutil.h"

static void clear_env(void)
{
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMIX_RANK");
    unsetenv("PMIX_SIZE");
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
}

int main(void)
{
    const char *names[] = { "c0", "s0", "s1" };
    na_boot_t b;
    int idx = -1;

    clear_env();
    NA_CHECK(na_boot_detect(NULL, &b) == NA_ERR_NOT_FOUND);

    /* --name wins over the environment */
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    NA_CHECK_OK(na_boot_detect("s0", &b));
    NA_CHECK(b.rank == -1 && !strcmp(b.source, "--name"));
    NA_CHECK_OK(na_boot_map(&b, names, 3, &idx));
    NA_CHECK(idx == 1);
    NA_CHECK_OK(na_boot_detect("s9", &b));
    NA_CHECK(na_boot_map(&b, names, 3, &idx) == NA_ERR_NOT_FOUND);

    /* Open MPI rank + size */
    setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
    NA_CHECK_OK(na_boot_detect(NULL, &b));
    NA_CHECK(b.rank == 2 && b.size == 3 && !strcmp(b.source, "OMPI_COMM_WORLD_RANK"));
    NA_CHECK_OK(na_boot_map(&b, names, 3, &idx));
    NA_CHECK(idx == 2 && !strcmp(b.name, "s1"));
    /* world size must match the layout */
    NA_CHECK(na_boot_map(&b, names, 2, &idx) == NA_ERR_RANGE);

    /* the launchers in priority order */
    clear_env();
    setenv("SLURM_PROCID", "0", 1);
    setenv("PMI_RANK", "1", 1);
    NA_CHECK_OK(na_boot_detect(NULL, &b));
    NA_CHECK(b.rank == 1 && !strcmp(b.source, "PMI_RANK"));
    setenv("PMIX_RANK", "0", 1);
    NA_CHECK_OK(na_boot_detect(NULL, &b));
    NA_CHECK(b.rank == 0 && !strcmp(b.source, "PMIX_RANK"));
    clear_env();
    setenv("SLURM_PROCID", "0", 1);
    NA_CHECK_OK(na_boot_detect(NULL, &b));
    NA_CHECK(!strcmp(b.source, "SLURM_PROCID"));

    /* malformed ranks and out-of-range ranks */
    setenv("SLURM_PROCID", "x1", 1);
    NA_CHECK(na_boot_detect(NULL, &b) == NA_ERR_INVALID);
    setenv("SLURM_PROCID", "-1", 1);
    NA_CHECK(na_boot_detect(NULL, &b) == NA_ERR_INVALID);
    setenv("SLURM_PROCID", "7", 1);
    NA_CHECK_OK(na_boot_detect(NULL, &b));
    NA_CHECK(na_boot_map(&b, names, 3, &idx) == NA_ERR_RANGE);
    clear_env();
    return na_test_finish();
}
