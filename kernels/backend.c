/* kernels/backend.c — the registry of kernel backends: create one by name,
 * destroy it through its own table. New device kinds (cuda, csd) add one
 * line to the table below. */
#include <string.h>

#include "kernels/ref/ref.h"

typedef struct {
    const char *name;
    na_status_t (*create)(int n_threads, na_kernels_t **k_p);  /* NULL: not built */
} na_kernels_entry_t;

static const na_kernels_entry_t na_kernels_table[] = {
    { "ref",  na_kernels_ref_create },
    { "cpu",  na_kernels_cpu_create },
    { "cuda", NULL },
    { "csd",  NULL },
};

/* Look the name up and call its constructor. NA_ERR_NOT_FOUND for an unknown
 * name, NA_ERR_UNSUPPORTED for a known backend not built into this binary. */
na_status_t na_kernels_create(const char *name, int n_threads, na_kernels_t **k_p)
{
    size_t i;
    for (i = 0; i < sizeof(na_kernels_table) / sizeof(na_kernels_table[0]); i++) {
        if (strcmp(na_kernels_table[i].name, name) != 0)
            continue;
        if (na_kernels_table[i].create == NULL)
            return na_err(NA_ERR_UNSUPPORTED,
                          "kernels: backend '%s' is not built into this binary", name);
        return na_kernels_table[i].create(n_threads, k_p);
    }
    return na_err(NA_ERR_NOT_FOUND, "kernels: unknown backend '%s' (known: ref, cpu, cuda, csd)",
                  name);
}

void na_kernels_destroy(na_kernels_t *k)
{
    if (k != NULL)
        k->ops->destroy(k);
}
