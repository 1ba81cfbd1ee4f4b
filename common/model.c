/* common/model.c — open a model file: map it, detect the format, dispatch to
 * the loader (the config checks both formats share are in model_check.c).
 *
 * Weights keep the file's dtype (F32, F16, BF16 or a GGML block format:
 * common/dtype.h) and point into the
 * read-only mmap; the matmul kernels dequantize per row / tile (see
 * kernels/kernels.h). Only norm weights stored as non-F32 in a GGUF file are
 * converted to F32 at load, into model->owned. */
#define _GNU_SOURCE
#include "model.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mapfile.h"
#include "gguf.h"
#include "model_internal.h"

/* A model is a non-empty file (na_mapfile refused non-regular ones). */
static na_status_t na_model_check_file(const char *path, const struct stat *sb)
{
    if (sb->st_size == 0)
        return na_err(NA_ERR_FORMAT, "%s: empty file: header field 'magic/dim' runs past the end",
                      path);
    return NA_OK;
}

/* A llama2.c export of version 1/2 (magic "ak42"). */
static na_status_t na_model_ak42(const char *path)
{
    return na_err(NA_ERR_UNSUPPORTED, "%s: field 'magic' = \"ak42\": llama2.c export "
                    "versions 1/2 are not supported (export with --version 0)", path);
}

na_status_t na_model_open(const char *path, na_model_t **model_p)
{
    na_model_t *m;
    na_status_t st;

    m = calloc(1, sizeof(*m));
    if (m == NULL || (m->path = strdup(path)) == NULL) {
        free(m);
        return na_err(NA_ERR_NOMEM, "%s: no memory", path);
    }
    st = na_mapfile(path, "model", na_model_check_file, &m->map, &m->map_size);
    if (st != NA_OK)
        goto err_destroy;
    if (m->map_size >= 4 && memcmp(m->map, "GGUF", 4) == 0) {
        m->format = NA_MODEL_FORMAT_GGUF;
        st = na_model_gguf_load(m);
    } else if (m->map_size >= 4 && memcmp(m->map, "ak42", 4) == 0) {
        st = na_model_ak42(path);
    } else {
        m->format = NA_MODEL_FORMAT_LLAMA2C;
        st = na_llama2c_load(m);
    }
    if (st != NA_OK)
        goto err_destroy;
    *model_p = m;
    return NA_OK;

err_destroy:
    na_model_destroy(m);
    return st;
}

/* The llama2.c header's bytes (fewer when the file is shorter). */
#define NA_MODEL_L2C_HEAD 28

na_status_t na_model_read_config(const char *path, na_model_config_t *cfg)
{
    uint8_t head[NA_MODEL_L2C_HEAD];
    na_model_t m;
    struct stat sb;
    ssize_t n = 0;
    int fd;
    na_status_t st;

    memset(&m, 0, sizeof(m));
    m.path = (char *)path;
    st = na_open_regular(path, "model", NA_ERR_FORMAT, &fd, &sb);
    if (st != NA_OK)
        return st;
    if ((st = na_model_check_file(path, &sb)) == NA_OK) {
        do
            n = pread(fd, head, sizeof(head), 0);
        while (n < 0 && errno == EINTR);
        if (n < 0)
            st = na_err(NA_ERR_IO, "%s: pread: %s", path, strerror(errno));
    }
    close(fd);
    if (st != NA_OK)
        return st;
    if (n >= 4 && memcmp(head, "GGUF", 4) == 0) {
        m.format = NA_MODEL_FORMAT_GGUF;
        if ((st = na_gguf_open_head(path, &m.gguf)) == NA_OK)
            st = na_model_gguf_config(&m);
        na_gguf_destroy(m.gguf);
    } else if (n >= 4 && memcmp(head, "ak42", 4) == 0) {
        st = na_model_ak42(path);
    } else {
        m.format = NA_MODEL_FORMAT_LLAMA2C;
        m.map = head;                       /* the header; sizes against the whole file */
        m.map_size = (size_t)sb.st_size;
        if ((size_t)n < sizeof(head) && m.map_size >= sizeof(head))
            st = na_err(NA_ERR_IO, "%s: short read of the header", path);
        else
            st = na_llama2c_config(&m);
    }
    if (st == NA_OK)
        *cfg = m.cfg;
    return st;
}

void na_model_destroy(na_model_t *m)
{
    if (m == NULL)
        return;
    na_gguf_destroy(m->gguf);
    if (m->map != NULL)
        munmap(m->map, m->map_size);
    free(m->owned);
    free(m->layers);
    free(m->path);
    free(m);
}

size_t na_model_param_count(const na_model_t *m)
{
    const na_model_config_t *c = &m->cfg;
    size_t d = (size_t)c->dim, q = (size_t)c->n_heads * (size_t)c->head_dim;
    size_t kv = (size_t)c->n_kv_heads * (size_t)c->head_dim, h = (size_t)c->hidden_dim;
    size_t per_layer = 2 * d + d * q + 2 * d * kv + q * d + 3 * d * h;
    size_t n = (size_t)c->vocab_size * d + (size_t)c->n_layers * per_layer + d;
    int l;

    for (l = 0; l < c->n_layers; l++) {
        const na_layer_weights_t *w = &m->layers[l];
        const na_tensor_t *opt[6] = { &w->bq, &w->bk, &w->bv, &w->bo, &w->q_norm, &w->k_norm };
        int k;
        for (k = 0; k < 6; k++)
            if (na_tensor_present(opt[k]))
                n += (size_t)opt[k]->cols;
    }

    if (!c->shared_classifier)
        n += (size_t)c->vocab_size * d;
    return n;
}

/* Index of the first non-finite element of t (NaN or infinity; for the
 * block formats the first element of a block with a non-finite scale), or -1. */
static long na_model_first_bad(const na_tensor_t *t)
{
    size_t n = (size_t)t->rows * (size_t)t->cols, i;
    switch (t->dtype) {
    case NA_DTYPE_F32: {
        const float *f = t->data;
        for (i = 0; i < n; i++)
            if (!isfinite(f[i]))
                return (long)i;
        return -1;
    }
    case NA_DTYPE_F16:
    case NA_DTYPE_BF16: {
        const uint16_t *h = t->data;
        uint16_t e = t->dtype == NA_DTYPE_F16 ? 0x7C00u : 0x7F80u;   /* exponent all ones */
        for (i = 0; i < n; i++)
            if ((h[i] & e) == e)
                return (long)i;
        return -1;
    }
    default: {
        /* block formats: their f16 scales (d; and m / dmin where the type has
         * one; Q6_K keeps d at the end of its block) */
        const uint8_t *b = t->data;
        size_t bb = na_dtype_block_bytes(t->dtype), blk = (size_t)na_dtype_block(t->dtype), f;
        size_t off[2] = { 0, 2 }, n_off = 1;
        if (t->dtype == NA_DTYPE_Q4_1 || t->dtype == NA_DTYPE_Q5_1 ||
            t->dtype == NA_DTYPE_Q4_K || t->dtype == NA_DTYPE_Q5_K)
            n_off = 2;
        else if (t->dtype == NA_DTYPE_Q6_K)
            off[0] = bb - 2;
        if (!na_dtype_is_quant(t->dtype))
            return -1;
        for (i = 0; i < n / blk; i++)
            for (f = 0; f < n_off; f++) {
                uint16_t d;
                memcpy(&d, b + i * bb + off[f], 2);
                if ((d & 0x7C00u) == 0x7C00u)
                    return (long)(i * blk);
            }
        return -1;
    }
    }
}

na_status_t na_model_check_finite(const na_model_t *m)
{
    static const char *const names[] = { "attn_norm", "wq", "wk", "wv", "wo", "ffn_norm",
                                         "w1", "w2", "w3", "bq", "bk", "bv", "bo", "q_norm",
                                         "k_norm" };
    long at;
    int l, k;

    if ((at = na_model_first_bad(&m->tok_embd)) >= 0)
        return na_err(NA_ERR_FORMAT, "%s: weight token_embd element %ld is not finite "
                      "(NaN/Inf)", m->path, at);
    for (l = 0; l < m->cfg.n_layers; l++) {
        const na_layer_weights_t *w = &m->layers[l];
        const na_tensor_t *t[15] = { &w->attn_norm, &w->wq, &w->wk, &w->wv, &w->wo,
                                     &w->ffn_norm, &w->w1, &w->w2, &w->w3, &w->bq, &w->bk,
                                     &w->bv, &w->bo, &w->q_norm, &w->k_norm };
        for (k = 0; k < 15; k++)
            if (na_tensor_present(t[k]) && (at = na_model_first_bad(t[k])) >= 0)
                return na_err(NA_ERR_FORMAT, "%s: weight %s of layer %d element %ld is not "
                              "finite (NaN/Inf)", m->path, names[k], l, at);
    }
    if ((at = na_model_first_bad(&m->out_norm)) >= 0)
        return na_err(NA_ERR_FORMAT, "%s: weight output_norm element %ld is not finite "
                      "(NaN/Inf)", m->path, at);
    if (na_tensor_present(&m->rope_freqs) && (at = na_model_first_bad(&m->rope_freqs)) >= 0)
        return na_err(NA_ERR_FORMAT, "%s: weight rope_freqs element %ld is not finite "
                      "(NaN/Inf)", m->path, at);
    if (!m->cfg.shared_classifier && (at = na_model_first_bad(&m->output)) >= 0)
        return na_err(NA_ERR_FORMAT, "%s: weight output element %ld is not finite (NaN/Inf)",
                      m->path, at);
    return NA_OK;
}
