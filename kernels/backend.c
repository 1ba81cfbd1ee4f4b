/* kernels/backend.c — the registry of kernel backends: create one by name,
 * destroy it through its own table. New device kinds (cuda, csd) add one
 * line to the table below. A device backend may also take "NAME:N", device
 * N (create_dev); "NAME" alone is device 0. */
#include <stdlib.h>
#include <string.h>

#include "kernels/ref/ref.h"
#if NA_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

typedef struct {
    const char *name;
    na_status_t (*create)(int n_threads, na_kernels_t **k_p);  /* NULL: not built */
    na_status_t (*create_dev)(int dev, na_kernels_t **k_p);    /* "NAME:N"; NULL: none */
} na_kernels_entry_t;

static const na_kernels_entry_t na_kernels_table[] = {
    { "ref",    na_kernels_ref_create, NULL },
    { "refdev", na_kernels_refdev_create, na_kernels_refdev_create_mb },  /* refdev:N MiB */
    { "cpu",    na_kernels_cpu_create, NULL },
#if NA_HAVE_CUDA
    { "cuda",   na_kernels_cuda_create, na_kernels_cuda_create_on },
#else
    { "cuda",   NULL, NULL },
#endif
    { "csd",    NULL, NULL },
};

/* Construct the backend and the event na_kernels_finish records. */
static na_status_t na_kernels_open(const na_kernels_entry_t *en, int n_threads, int dev,
                                   na_kernels_t **k_p)
{
    na_kernels_t *k;
    na_status_t st = dev >= 0 ? en->create_dev(dev, &k) : en->create(n_threads, &k);
    if (st != NA_OK)
        return st;
    st = k->ops->event_create(k, &k->fin);
    if (st != NA_OK) {
        k->ops->destroy(k);
        return st;
    }
    *k_p = k;
    return NA_OK;
}

/* Look the name up and call its constructor. NA_ERR_NOT_FOUND for an unknown
 * name, NA_ERR_UNSUPPORTED for a known backend not built into this binary. */
na_status_t na_kernels_create(const char *name, int n_threads, na_kernels_t **k_p)
{
    const char *colon = strchr(name, ':');
    size_t len = colon != NULL ? (size_t)(colon - name) : strlen(name), i;
    int dev = -1;

    for (i = 0; i < sizeof(na_kernels_table) / sizeof(na_kernels_table[0]); i++) {
        const na_kernels_entry_t *en = &na_kernels_table[i];
        if (strncmp(en->name, name, len) != 0 || en->name[len] != '\0')
            continue;
        if (en->create == NULL)
            return na_err(NA_ERR_UNSUPPORTED,
                          "kernels: backend '%.*s' is not built into this binary", (int)len,
                          name);
        if (colon != NULL) {
            char *end = NULL;
            long v = strtol(colon + 1, &end, 10);
            if (en->create_dev == NULL)
                return na_err(NA_ERR_INVALID, "kernels: '%s': backend '%s' takes no device "
                              "index", name, en->name);
            if (colon[1] < '0' || colon[1] > '9' || *end != '\0' || v > 1023)
                return na_err(NA_ERR_INVALID, "kernels: '%s': the device index must be a "
                              "number 0..1023 (%s:0, %s:1, ...)", name, en->name, en->name);
            dev = (int)v;
        }
        return na_kernels_open(en, n_threads, dev, k_p);
    }
    return na_err(NA_ERR_NOT_FOUND,
                  "kernels: unknown backend '%s' (known: ref, refdev, cpu, cuda, csd)", name);
}

void na_kernels_destroy(na_kernels_t *k)
{
    if (k == NULL)
        return;
    k->ops->event_destroy(k, k->fin);
    k->ops->destroy(k);
}

void na_kernels_rest(na_kernels_t *k)
{
    if (k->ops->rest != NULL)
        k->ops->rest(k);
}

na_status_t na_kernels_finish(na_kernels_t *k)
{
    na_status_t st = k->ops->event_record(k, k->fin);
    return st != NA_OK ? st : k->ops->event_wait(k, k->fin);
}

na_status_t na_kernels_attn_decode_host(na_kernels_t *k, float *out, const float *q,
                                        const void *kcache, const void *vcache,
                                        na_dtype_t kv_dtype, int ctx, int n_heads,
                                        int n_kv_heads, int head_dim)
{
    size_t qb = (size_t)n_heads * (size_t)head_dim * sizeof(float);
    size_t kvb = na_dtype_bytes(kv_dtype, (size_t)ctx * (size_t)n_kv_heads * (size_t)head_dim);
    na_kbuf_t o = na_kbuf_host(out, qb), qq = na_kbuf_host((void *)q, qb);
    na_kbuf_t kc = na_kbuf_host((void *)kcache, kvb), vc = na_kbuf_host((void *)vcache, kvb);
    na_status_t st = k->ops->attn_decode(k, &o, &qq, &kc, &vc, kv_dtype, ctx, n_heads,
                                         n_kv_heads, head_dim);
    return st != NA_OK ? st : na_kernels_finish(k);
}
