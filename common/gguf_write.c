/* common/gguf_write.c — streaming GGUF v3 writer (see gguf.h). Metadata and
 * tensor infos are serialised into memory; tensor data goes straight to the
 * file in declaration order, padded to the alignment (32). */
#include "gguf.h"
#include "grow.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    uint64_t size;            /* bytes of data */
    uint64_t offset;          /* in the data section */
} na_gguf_wtensor_t;

struct na_gguf_writer {
    char              *path;
    FILE              *f;
    uint8_t           *meta;      /* serialised kv pairs */
    size_t             meta_len, meta_cap;
    uint8_t           *infos;     /* serialised tensor infos */
    size_t             infos_len, infos_cap;
    uint64_t           n_kv;
    na_gguf_wtensor_t *tensors;
    uint64_t           n_tensors;
    size_t             cap_tensors;
    uint64_t           data_end;  /* next free offset in the data section */
    int                started;   /* header written */
    uint64_t           cur;       /* tensor being written */
    uint64_t           cur_done;  /* bytes of it written */
    uint64_t           pos;       /* bytes written to the data section */
    na_status_t        failed;    /* sticky error */
};

/* Append n bytes to a growable buffer. */
static na_status_t na_gw_put(na_gguf_writer_t *w, uint8_t **buf, size_t *len, size_t *cap,
                             const void *p, size_t n)
{
    uint8_t *nb = na_grow(*buf, cap, *len + n, 1, 4096);

    if (nb == NULL)
        return w->failed = na_err(NA_ERR_NOMEM, "%s: no memory for metadata", w->path);
    *buf = nb;
    memcpy(*buf + *len, p, n);
    *len += n;
    return NA_OK;
}

#define NA_GW_META(w, p, n) na_gw_put((w), &(w)->meta, &(w)->meta_len, &(w)->meta_cap, (p), (n))

static na_status_t na_gw_meta_str(na_gguf_writer_t *w, const char *s)
{
    uint64_t len = strlen(s);
    na_status_t st = NA_GW_META(w, &len, 8);
    return st != NA_OK ? st : NA_GW_META(w, s, (size_t)len);
}

/* Key + type; the value follows. */
static na_status_t na_gw_key(na_gguf_writer_t *w, const char *key, uint32_t type)
{
    na_status_t st;
    if (w->failed != NA_OK)
        return w->failed;
    if (w->started)
        return w->failed = na_err(NA_ERR_INTERNAL, "%s: metadata '%s' added after data", w->path,
                                  key);
    st = na_gw_meta_str(w, key);
    if (st == NA_OK)
        st = NA_GW_META(w, &type, 4);
    if (st == NA_OK)
        w->n_kv++;
    return st;
}

/* Free w and what it holds (the file is closed, or was never opened). */
static void na_gw_free(na_gguf_writer_t *w)
{
    free(w->meta);
    free(w->infos);
    free(w->tensors);
    free(w->path);
    free(w);
}

na_status_t na_gguf_writer_create(const char *path, na_gguf_writer_t **w_p)
{
    na_gguf_writer_t *w = calloc(1, sizeof(*w));
    if (w == NULL || (w->path = strdup(path)) == NULL) {
        free(w);
        return na_err(NA_ERR_NOMEM, "%s: no memory", path);
    }
    w->f = fopen(path, "wb");
    if (w->f == NULL) {
        na_status_t st = na_err(NA_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        na_gw_free(w);
        return st;
    }
    setvbuf(w->f, NULL, _IOFBF, 1 << 20);
    *w_p = w;
    return NA_OK;
}

na_status_t na_gguf_writer_kv_u32(na_gguf_writer_t *w, const char *key, uint32_t v)
{
    na_status_t st = na_gw_key(w, key, NA_GGUF_UINT32);
    return st != NA_OK ? st : NA_GW_META(w, &v, 4);
}

na_status_t na_gguf_writer_kv_i32(na_gguf_writer_t *w, const char *key, int32_t v)
{
    na_status_t st = na_gw_key(w, key, NA_GGUF_INT32);
    return st != NA_OK ? st : NA_GW_META(w, &v, 4);
}

na_status_t na_gguf_writer_kv_f32(na_gguf_writer_t *w, const char *key, float v)
{
    na_status_t st = na_gw_key(w, key, NA_GGUF_FLOAT32);
    return st != NA_OK ? st : NA_GW_META(w, &v, 4);
}

na_status_t na_gguf_writer_kv_str(na_gguf_writer_t *w, const char *key, const char *v)
{
    na_status_t st = na_gw_key(w, key, NA_GGUF_STRING);
    return st != NA_OK ? st : na_gw_meta_str(w, v);
}

/* Array header: element type + count. */
static na_status_t na_gw_arr(na_gguf_writer_t *w, const char *key, uint32_t et, uint64_t n)
{
    na_status_t st = na_gw_key(w, key, NA_GGUF_ARRAY);
    if (st == NA_OK)
        st = NA_GW_META(w, &et, 4);
    if (st == NA_OK)
        st = NA_GW_META(w, &n, 8);
    return st;
}

na_status_t na_gguf_writer_kv_arr_str(na_gguf_writer_t *w, const char *key,
                                      const char *const *v, uint64_t n)
{
    na_status_t st = na_gw_arr(w, key, NA_GGUF_STRING, n);
    uint64_t i;
    for (i = 0; st == NA_OK && i < n; i++)
        st = na_gw_meta_str(w, v[i]);
    return st;
}

na_status_t na_gguf_writer_kv_arr_f32(na_gguf_writer_t *w, const char *key,
                                      const float *v, uint64_t n)
{
    na_status_t st = na_gw_arr(w, key, NA_GGUF_FLOAT32, n);
    return st != NA_OK ? st : NA_GW_META(w, v, (size_t)n * 4);
}

na_status_t na_gguf_writer_kv_arr_i32(na_gguf_writer_t *w, const char *key,
                                      const int32_t *v, uint64_t n)
{
    na_status_t st = na_gw_arr(w, key, NA_GGUF_INT32, n);
    return st != NA_OK ? st : NA_GW_META(w, v, (size_t)n * 4);
}

/* A string of the reader's image (not NUL-terminated). */
static na_status_t na_gw_meta_gstr(na_gguf_writer_t *w, const na_gguf_str_t *s)
{
    na_status_t st = NA_GW_META(w, &s->len, 8);
    return st != NA_OK ? st : NA_GW_META(w, s->data, (size_t)s->len);
}

na_status_t na_gguf_writer_kv_copy(na_gguf_writer_t *w, const na_gguf_kv_t *kv)
{
    size_t sz = na_gguf_scalar_size(kv->type);
    na_status_t st;
    uint64_t i;

    if (kv->type == NA_GGUF_ARRAY) {
        sz = na_gguf_scalar_size(kv->v.arr.type);
        if (kv->v.arr.type != NA_GGUF_STRING && sz == 0)
            return w->failed = na_err(NA_ERR_INVALID, "%s: metadata '%s': array of type %d",
                                      w->path, kv->key, (int)kv->v.arr.type);
        if ((st = na_gw_arr(w, kv->key, kv->v.arr.type, kv->v.arr.n)) != NA_OK)
            return st;
        if (kv->v.arr.type != NA_GGUF_STRING)
            return NA_GW_META(w, kv->v.arr.data, (size_t)(kv->v.arr.n * sz));
        for (i = 0, st = NA_OK; st == NA_OK && i < kv->v.arr.n; i++)
            st = na_gw_meta_gstr(w, &kv->v.arr.strs[i]);
        return st;
    }
    if (kv->type == NA_GGUF_STRING) {
        st = na_gw_key(w, kv->key, NA_GGUF_STRING);
        return st != NA_OK ? st : na_gw_meta_gstr(w, &kv->v.str);
    }
    if (sz == 0)
        return w->failed = na_err(NA_ERR_INVALID, "%s: metadata '%s': type %d", w->path,
                                  kv->key, (int)kv->type);
    if ((st = na_gw_key(w, kv->key, kv->type)) != NA_OK)
        return st;
    if (kv->type == NA_GGUF_FLOAT32) {
        float f = (float)kv->v.f64;
        return NA_GW_META(w, &f, 4);
    }
    if (kv->type == NA_GGUF_FLOAT64)
        return NA_GW_META(w, &kv->v.f64, 8);
    /* integers: the low sz bytes of the 64-bit value (little-endian, as read) */
    return NA_GW_META(w, kv->type == NA_GGUF_INT8 || kv->type == NA_GGUF_INT16 ||
                         kv->type == NA_GGUF_INT32 || kv->type == NA_GGUF_INT64
                         ? (const void *)&kv->v.i64 : (const void *)&kv->v.u64, sz);
}

na_status_t na_gguf_writer_tensor(na_gguf_writer_t *w, const char *name, uint32_t type,
                                  uint32_t n_dims, const uint64_t *ne)
{
    uint64_t nel = 1, size, len = strlen(name);
    uint32_t d;
    na_gguf_wtensor_t *nt;
    na_status_t st;

    if (w->failed != NA_OK)
        return w->failed;
    if (w->started || n_dims < 1 || n_dims > NA_GGUF_MAX_DIMS)
        return w->failed = na_err(NA_ERR_INTERNAL, "%s: bad tensor declaration '%s'", w->path,
                                  name);
    for (d = 0; d < n_dims; d++)
        nel *= ne[d];
    size = na_gguf_ggml_type_size(type, nel);
    if (size == 0)
        return w->failed = na_err(NA_ERR_INVALID, "%s: tensor '%s': %llu elements of type %u",
                                  w->path, name, (unsigned long long)nel, type);
    nt = na_grow(w->tensors, &w->cap_tensors, (size_t)w->n_tensors + 1, sizeof(*nt), 64);
    if (nt == NULL)
        return w->failed = na_err(NA_ERR_NOMEM, "%s: no memory", w->path);
    w->tensors = nt;
    w->tensors[w->n_tensors].size = size;
    w->tensors[w->n_tensors].offset = w->data_end;
    st = na_gw_put(w, &w->infos, &w->infos_len, &w->infos_cap, &len, 8);
    if (st == NA_OK)
        st = na_gw_put(w, &w->infos, &w->infos_len, &w->infos_cap, name, (size_t)len);
    if (st == NA_OK)
        st = na_gw_put(w, &w->infos, &w->infos_len, &w->infos_cap, &n_dims, 4);
    if (st == NA_OK)
        st = na_gw_put(w, &w->infos, &w->infos_len, &w->infos_cap, ne, (size_t)n_dims * 8);
    if (st == NA_OK)
        st = na_gw_put(w, &w->infos, &w->infos_len, &w->infos_cap, &type, 4);
    if (st == NA_OK)
        st = na_gw_put(w, &w->infos, &w->infos_len, &w->infos_cap,
                       &w->tensors[w->n_tensors].offset, 8);
    if (st != NA_OK)
        return st;
    w->data_end = (w->data_end + size + NA_GGUF_DEFAULT_ALIGNMENT - 1) /
                  NA_GGUF_DEFAULT_ALIGNMENT * NA_GGUF_DEFAULT_ALIGNMENT;
    w->n_tensors++;
    return NA_OK;
}

static na_status_t na_gw_write(na_gguf_writer_t *w, const void *p, size_t n)
{
    if (n > 0 && fwrite(p, 1, n, w->f) != n)
        return w->failed = na_err(NA_ERR_IO, "%s: write: %s", w->path, strerror(errno));
    return NA_OK;
}

static na_status_t na_gw_pad(na_gguf_writer_t *w, uint64_t pos)
{
    static const uint8_t zeros[NA_GGUF_DEFAULT_ALIGNMENT];
    uint64_t pad = (NA_GGUF_DEFAULT_ALIGNMENT - pos % NA_GGUF_DEFAULT_ALIGNMENT) %
                   NA_GGUF_DEFAULT_ALIGNMENT;
    return na_gw_write(w, zeros, (size_t)pad);
}

/* Header, metadata, infos and padding: once, before the first data. */
static na_status_t na_gw_start(na_gguf_writer_t *w)
{
    uint32_t magic = NA_GGUF_MAGIC, version = NA_GGUF_VERSION;
    na_status_t st;

    w->started = 1;
    if ((st = na_gw_write(w, &magic, 4)) != NA_OK ||
        (st = na_gw_write(w, &version, 4)) != NA_OK ||
        (st = na_gw_write(w, &w->n_tensors, 8)) != NA_OK ||
        (st = na_gw_write(w, &w->n_kv, 8)) != NA_OK ||
        (st = na_gw_write(w, w->meta, w->meta_len)) != NA_OK ||
        (st = na_gw_write(w, w->infos, w->infos_len)) != NA_OK)
        return st;
    return na_gw_pad(w, 24 + w->meta_len + w->infos_len);
}

na_status_t na_gguf_writer_data(na_gguf_writer_t *w, const void *data, size_t bytes)
{
    const uint8_t *p = data;
    na_status_t st;

    if (w->failed != NA_OK)
        return w->failed;
    if (!w->started && (st = na_gw_start(w)) != NA_OK)
        return st;
    while (bytes > 0) {
        uint64_t left, n;
        if (w->cur >= w->n_tensors)
            return w->failed = na_err(NA_ERR_INTERNAL, "%s: more data than declared tensors",
                                      w->path);
        left = w->tensors[w->cur].size - w->cur_done;
        n = bytes < left ? bytes : left;
        if ((st = na_gw_write(w, p, (size_t)n)) != NA_OK)
            return st;
        p += n;
        bytes -= (size_t)n;
        w->cur_done += n;
        w->pos += n;
        if (w->cur_done == w->tensors[w->cur].size) {
            if ((st = na_gw_pad(w, w->pos)) != NA_OK)
                return st;
            w->pos = (w->pos + NA_GGUF_DEFAULT_ALIGNMENT - 1) / NA_GGUF_DEFAULT_ALIGNMENT *
                     NA_GGUF_DEFAULT_ALIGNMENT;
            w->cur++;
            w->cur_done = 0;
        }
    }
    return NA_OK;
}

/* Close the file and free w: the one ending of finish and abort. The file
 * stays only when st is NA_OK and the close succeeds; returns st, or the
 * close's error. */
static na_status_t na_gw_close(na_gguf_writer_t *w, na_status_t st)
{
    if (fclose(w->f) != 0 && st == NA_OK)
        st = na_err(NA_ERR_IO, "%s: close: %s", w->path, strerror(errno));
    if (st != NA_OK)
        unlink(w->path);
    na_gw_free(w);
    return st;
}

na_status_t na_gguf_writer_finish(na_gguf_writer_t *w)
{
    na_status_t st = w->failed;

    if (st == NA_OK && !w->started)
        st = na_gw_start(w);
    if (st == NA_OK && w->cur != w->n_tensors)
        st = na_err(NA_ERR_INTERNAL, "%s: only %llu of %llu tensors written", w->path,
                    (unsigned long long)w->cur, (unsigned long long)w->n_tensors);
    if (st == NA_OK && fflush(w->f) != 0)
        st = na_err(NA_ERR_IO, "%s: write: %s", w->path, strerror(errno));
    return na_gw_close(w, st);
}

void na_gguf_writer_abort(na_gguf_writer_t *w)
{
    if (w != NULL)
        na_gw_close(w, NA_ERR_CANCELED);
}
