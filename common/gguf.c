/* common/gguf.c — GGUF v3 reader (validating, zero-copy over an image). The
 * writer is in common/gguf_write.c. */
#define _GNU_SOURCE
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fnv.h"
#include "common/mapfile.h"

/* ---- ggml type table ---------------------------------------------------- */

typedef struct {
    const char *name;
    uint32_t    block;        /* elements per block */
    uint32_t    bytes;        /* bytes per block */
} na_ggml_type_info_t;

static const na_ggml_type_info_t na_ggml_types[] = {
    [0]  = { "f32",  1,   4   }, [1]  = { "f16",  1,   2   },
    [2]  = { "q4_0", 32,  18  }, [3]  = { "q4_1", 32,  20  },
    [6]  = { "q5_0", 32,  22  }, [7]  = { "q5_1", 32,  24  },
    [8]  = { "q8_0", 32,  34  }, [9]  = { "q8_1", 32,  36  },
    [10] = { "q2_k", 256, 84  }, [11] = { "q3_k", 256, 110 },
    [12] = { "q4_k", 256, 144 }, [13] = { "q5_k", 256, 176 },
    [14] = { "q6_k", 256, 210 }, [15] = { "q8_k", 256, 292 },
    [24] = { "i8",   1,   1   }, [25] = { "i16",  1,   2   },
    [26] = { "i32",  1,   4   }, [27] = { "i64",  1,   8   },
    [28] = { "f64",  1,   8   }, [30] = { "bf16", 1,   2   },
};
#define NA_GGML_NTYPES (sizeof(na_ggml_types) / sizeof(na_ggml_types[0]))

static const na_ggml_type_info_t *na_ggml_info(uint32_t type)
{
    if (type >= NA_GGML_NTYPES || na_ggml_types[type].name == NULL)
        return NULL;
    return &na_ggml_types[type];
}

uint64_t na_gguf_ggml_type_size(uint32_t type, uint64_t n)
{
    const na_ggml_type_info_t *ti = na_ggml_info(type);
    if (ti == NULL || n % ti->block != 0)
        return 0;
    return n / ti->block * ti->bytes;
}

const char *na_gguf_ggml_type_name(uint32_t type)
{
    const na_ggml_type_info_t *ti = na_ggml_info(type);
    return ti ? ti->name : "?";
}

size_t na_gguf_scalar_size(uint32_t type)
{
    switch (type) {
    case NA_GGUF_UINT8: case NA_GGUF_INT8: case NA_GGUF_BOOL:     return 1;
    case NA_GGUF_UINT16: case NA_GGUF_INT16:                      return 2;
    case NA_GGUF_UINT32: case NA_GGUF_INT32: case NA_GGUF_FLOAT32: return 4;
    case NA_GGUF_UINT64: case NA_GGUF_INT64: case NA_GGUF_FLOAT64: return 8;
    default:                                                      return 0;
    }
}

/* ---- cursor ------------------------------------------------------------- */

typedef struct {
    const char    *path;
    const uint8_t *base;
    size_t         size;        /* bytes of the image (a prefix of the file when head-only) */
    size_t         off;
    uint64_t       file_size;   /* bytes of the whole file */
    int            more;        /* head-only: ran past the prefix, not the file */
} na_gguf_cur_t;

/* n bytes at the cursor run past the image: note when a longer prefix of the
 * file could hold them (head-only parsing reads more and starts again). */
static void na_gguf_short(na_gguf_cur_t *c)
{
    if (c->size < c->file_size)
        c->more = 1;
}

static na_status_t na_gguf_need(na_gguf_cur_t *c, size_t n, const char *what, const char *field)
{
    if (n > c->size - c->off && (na_gguf_short(c), 1))
        return na_err(NA_ERR_FORMAT, "%s: %s '%s' runs past the end (needs %zu bytes at "
                      "offset %zu, file is %zu bytes)", c->path, what, field, n, c->off, c->size);
    return NA_OK;
}

static na_status_t na_gguf_rd(na_gguf_cur_t *c, void *dst, size_t n, const char *field)
{
    na_status_t st = na_gguf_need(c, n, "field", field);
    if (st != NA_OK)
        return st;
    memcpy(dst, c->base + c->off, n);
    c->off += n;
    return NA_OK;
}

/* A string: u64 length (<= max) + bytes, left in place. */
static na_status_t na_gguf_rd_str(na_gguf_cur_t *c, const char *field, uint64_t max,
                                  na_gguf_str_t *s)
{
    na_status_t st = na_gguf_rd(c, &s->len, 8, field);
    if (st != NA_OK)
        return st;
    if (s->len > max)
        return na_err(NA_ERR_RANGE, "%s: field '%s': string length %llu exceeds %llu",
                      c->path, field, (unsigned long long)s->len, (unsigned long long)max);
    st = na_gguf_need(c, (size_t)s->len, "string of field", field);
    if (st != NA_OK)
        return st;
    s->data = (const char *)c->base + c->off;
    c->off += (size_t)s->len;
    return NA_OK;
}

static char *na_gguf_strdup(const na_gguf_str_t *s)
{
    char *p = malloc((size_t)s->len + 1);
    if (p) {
        memcpy(p, s->data, (size_t)s->len);
        p[s->len] = 0;
    }
    return p;
}

/* ---- parse -------------------------------------------------------------- */

/* Parse one metadata value of `type` for key (already in kv->key). */
static na_status_t na_gguf_parse_value(na_gguf_cur_t *c, na_gguf_kv_t *kv)
{
    const char *k = kv->key;
    size_t es;
    uint64_t i, n;
    uint32_t et;
    na_status_t st;

    switch (kv->type) {
    case NA_GGUF_UINT8:  { uint8_t v = 0;  st = na_gguf_rd(c, &v, 1, k); kv->v.u64 = v; return st; }
    case NA_GGUF_BOOL:   { uint8_t v = 0;  st = na_gguf_rd(c, &v, 1, k);
                           if (st == NA_OK && v > 1)
                               return na_err(NA_ERR_FORMAT, "%s: field '%s': bool value %u",
                                             c->path, k, v);
                           kv->v.u64 = v; return st; }
    case NA_GGUF_INT8:   { int8_t v = 0;   st = na_gguf_rd(c, &v, 1, k); kv->v.i64 = v; return st; }
    case NA_GGUF_UINT16: { uint16_t v = 0; st = na_gguf_rd(c, &v, 2, k); kv->v.u64 = v; return st; }
    case NA_GGUF_INT16:  { int16_t v = 0;  st = na_gguf_rd(c, &v, 2, k); kv->v.i64 = v; return st; }
    case NA_GGUF_UINT32: { uint32_t v = 0; st = na_gguf_rd(c, &v, 4, k); kv->v.u64 = v; return st; }
    case NA_GGUF_INT32:  { int32_t v = 0;  st = na_gguf_rd(c, &v, 4, k); kv->v.i64 = v; return st; }
    case NA_GGUF_FLOAT32:{ float v = 0;    st = na_gguf_rd(c, &v, 4, k); kv->v.f64 = v; return st; }
    case NA_GGUF_UINT64: return na_gguf_rd(c, &kv->v.u64, 8, k);
    case NA_GGUF_INT64:  return na_gguf_rd(c, &kv->v.i64, 8, k);
    case NA_GGUF_FLOAT64:return na_gguf_rd(c, &kv->v.f64, 8, k);
    case NA_GGUF_STRING: return na_gguf_rd_str(c, k, NA_GGUF_MAX_STR_LEN, &kv->v.str);
    case NA_GGUF_ARRAY:
        break;
    default:
        return na_err(NA_ERR_FORMAT, "%s: field '%s': unknown value type %u",
                      c->path, k, (unsigned)kv->type);
    }
    st = na_gguf_rd(c, &et, 4, k);
    if (st != NA_OK)
        return st;
    st = na_gguf_rd(c, &n, 8, k);
    if (st != NA_OK)
        return st;
    if (et == NA_GGUF_ARRAY || et >= NA_GGUF_TYPE_COUNT)
        return na_err(et == NA_GGUF_ARRAY ? NA_ERR_UNSUPPORTED : NA_ERR_FORMAT,
                      "%s: field '%s': array element type %u %s", c->path, k, et,
                      et == NA_GGUF_ARRAY ? "(nested arrays) not supported" : "unknown");
    kv->v.arr.type = (na_gguf_type_t)et;
    kv->v.arr.n = n;
    es = et == NA_GGUF_STRING ? 8 : na_gguf_scalar_size(et);
    /* every element takes at least es bytes: bounds the count before allocating */
    if (n > (c->size - c->off) / es && (na_gguf_short(c), 1))
        return na_err(NA_ERR_FORMAT, "%s: field '%s': array of %llu elements runs past the end "
                      "(offset %zu, file is %zu bytes)", c->path, k, (unsigned long long)n,
                      c->off, c->size);
    if (et != NA_GGUF_STRING) {
        kv->v.arr.data = c->base + c->off;
        c->off += (size_t)n * es;
        return NA_OK;
    }
    kv->v.arr.strs = calloc(n ? (size_t)n : 1, sizeof(na_gguf_str_t));
    if (kv->v.arr.strs == NULL)
        return na_err(NA_ERR_NOMEM, "%s: field '%s': no memory for %llu strings", c->path, k,
                      (unsigned long long)n);
    for (i = 0; i < n; i++) {
        st = na_gguf_rd_str(c, k, NA_GGUF_MAX_STR_LEN, &kv->v.arr.strs[i]);
        if (st != NA_OK)
            return na_err_prefix(st, "element %llu: ", (unsigned long long)i);
    }
    return NA_OK;
}

static na_status_t na_gguf_parse_tensor(na_gguf_cur_t *c, uint64_t idx, na_gguf_tensor_t *t)
{
    char field[64];
    na_gguf_str_t name;
    uint64_t nel = 1;
    uint32_t d;
    na_status_t st;

    snprintf(field, sizeof(field), "tensor_info[%llu].name", (unsigned long long)idx);
    st = na_gguf_rd_str(c, field, NA_GGUF_MAX_KEY_LEN, &name);
    if (st != NA_OK)
        return st;
    t->name = na_gguf_strdup(&name);
    if (t->name == NULL)
        return na_err(NA_ERR_NOMEM, "%s: no memory for tensor names", c->path);
    st = na_gguf_rd(c, &t->n_dims, 4, "n_dims");
    if (st != NA_OK)
        return na_err_prefix(st, "tensor '%s': ", t->name);
    if (t->n_dims < 1 || t->n_dims > NA_GGUF_MAX_DIMS)
        return na_err(NA_ERR_RANGE, "%s: tensor '%s': field 'n_dims' = %u out of range [1, %d]",
                      c->path, t->name, t->n_dims, NA_GGUF_MAX_DIMS);
    for (d = 0; d < NA_GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (d = 0; d < t->n_dims; d++) {
        st = na_gguf_rd(c, &t->ne[d], 8, "ne");
        if (st != NA_OK)
            return na_err_prefix(st, "tensor '%s': ", t->name);
        if (t->ne[d] == 0 || t->ne[d] > ((uint64_t)1 << 40) || nel > ((uint64_t)1 << 50) / t->ne[d])
            return na_err(NA_ERR_RANGE, "%s: tensor '%s': field 'ne[%u]' = %llu out of range "
                          "(or too many elements)", c->path, t->name, d,
                          (unsigned long long)t->ne[d]);
        nel *= t->ne[d];
    }
    st = na_gguf_rd(c, &t->type, 4, "type");
    if (st == NA_OK)
        st = na_gguf_rd(c, &t->offset, 8, "offset");
    if (st != NA_OK)
        return na_err_prefix(st, "tensor '%s': ", t->name);
    if (na_ggml_info(t->type) == NULL)
        return na_err(NA_ERR_FORMAT, "%s: tensor '%s': field 'type' = %u is not a known ggml type",
                      c->path, t->name, t->type);
    if (t->ne[0] % na_ggml_info(t->type)->block != 0)
        return na_err(NA_ERR_FORMAT, "%s: tensor '%s': field 'ne[0]' = %llu is not a multiple "
                      "of the %s block (%u)", c->path, t->name, (unsigned long long)t->ne[0],
                      na_ggml_info(t->type)->name, na_ggml_info(t->type)->block);
    t->size = na_gguf_ggml_type_size(t->type, nel);
    return NA_OK;
}

static uint64_t na_gguf_name_hash(const char *s)
{
    return na_fnv1a64(s, strlen(s));
}

/* Build the name index; NA_ERR_FORMAT on a duplicate name. */
static na_status_t na_gguf_index_tensors(na_gguf_t *g)
{
    uint64_t cap = 16, i;
    while (cap < 2 * g->n_tensors)
        cap <<= 1;
    g->tensor_index = calloc((size_t)cap, sizeof(uint32_t));
    if (g->tensor_index == NULL)
        return na_err(NA_ERR_NOMEM, "%s: no memory for the tensor index", g->path);
    g->tensor_index_mask = cap - 1;
    for (i = 0; i < g->n_tensors; i++) {
        uint64_t h = na_gguf_name_hash(g->tensors[i].name) & g->tensor_index_mask;
        while (g->tensor_index[h] != 0) {
            if (strcmp(g->tensors[g->tensor_index[h] - 1].name, g->tensors[i].name) == 0)
                return na_err(NA_ERR_FORMAT, "%s: tensor '%s' appears twice", g->path,
                              g->tensors[i].name);
            h = (h + 1) & g->tensor_index_mask;
        }
        g->tensor_index[h] = (uint32_t)i + 1;
    }
    return NA_OK;
}

/* NA_ERR_FORMAT naming the key when a metadata key appears twice (a reader
 * would otherwise see only the first of them). */
static na_status_t na_gguf_check_keys(const na_gguf_t *g)
{
    uint64_t cap = 16, mask, i;
    uint32_t *idx;
    na_status_t st = NA_OK;

    while (cap < 2 * g->n_kv)
        cap <<= 1;
    if ((idx = calloc((size_t)cap, sizeof(uint32_t))) == NULL)
        return na_err(NA_ERR_NOMEM, "%s: no memory for the key index", g->path);
    mask = cap - 1;
    for (i = 0; i < g->n_kv && st == NA_OK; i++) {
        uint64_t h = na_gguf_name_hash(g->kv[i].key) & mask;
        while (idx[h] != 0 && st == NA_OK) {
            if (strcmp(g->kv[idx[h] - 1].key, g->kv[i].key) == 0)
                st = na_err(NA_ERR_FORMAT, "%s: metadata key '%s' appears twice (kv[%u] and "
                            "kv[%llu])", g->path, g->kv[i].key, idx[h] - 1,
                            (unsigned long long)i);
            h = (h + 1) & mask;
        }
        idx[h] = (uint32_t)i + 1;
    }
    free(idx);
    return st;
}

/* After all infos: alignment, data section, every tensor inside the file. */
static na_status_t na_gguf_place_tensors(na_gguf_cur_t *c, na_gguf_t *g)
{
    const na_gguf_kv_t *al = na_gguf_find(g, "general.alignment");
    uint64_t i;

    g->alignment = NA_GGUF_DEFAULT_ALIGNMENT;
    if (al != NULL) {
        if (al->type != NA_GGUF_UINT32)
            return na_err(NA_ERR_FORMAT, "%s: field 'general.alignment' must be uint32 (type %d)",
                          g->path, (int)al->type);
        if (al->v.u64 == 0 || (al->v.u64 & (al->v.u64 - 1)) != 0 || al->v.u64 > (1u << 20))
            return na_err(NA_ERR_RANGE, "%s: field 'general.alignment' = %llu is not a power of "
                          "two in [1, 2^20]", g->path, (unsigned long long)al->v.u64);
        g->alignment = al->v.u64;
    }
    g->data_offset = (c->off + g->alignment - 1) / g->alignment * g->alignment;
    if (g->n_tensors > 0 && g->data_offset > c->file_size)
        return na_err(NA_ERR_FORMAT, "%s: data section (offset %llu) starts past the end "
                      "(file is %llu bytes)", g->path, (unsigned long long)g->data_offset,
                      (unsigned long long)c->file_size);
    for (i = 0; i < g->n_tensors; i++) {
        na_gguf_tensor_t *t = &g->tensors[i];
        uint64_t room = c->file_size - g->data_offset;
        if (t->offset % g->alignment != 0)
            return na_err(NA_ERR_FORMAT, "%s: tensor '%s': field 'offset' = %llu is not aligned "
                          "to %llu", g->path, t->name, (unsigned long long)t->offset,
                          (unsigned long long)g->alignment);
        if (t->offset > room || t->size > room - t->offset)
            return na_err(NA_ERR_FORMAT, "%s: tensor '%s': field 'offset' = %llu + size %llu "
                          "runs past the end of the data section (%llu bytes)", g->path, t->name,
                          (unsigned long long)t->offset, (unsigned long long)t->size,
                          (unsigned long long)room);
        /* head-only (the image is a prefix): infos without data */
        t->data = c->size < c->file_size ? NULL : c->base + g->data_offset + t->offset;
    }
    return na_gguf_index_tensors(g);
}

/* A count from the header: NA_ERR_RANGE over its limit, NA_ERR_FORMAT when
 * that many entries of at least min_bytes cannot fit the file; either way
 * the count is reset to 0 (so that destroy does not walk it). */
static na_status_t na_gguf_count_check(const char *path, const char *field, const char *what,
                                       uint64_t *count, int limit, size_t min_bytes,
                                       uint64_t size)
{
    na_status_t st;

    if (*count <= (uint64_t)limit && *count <= size / min_bytes)
        return NA_OK;
    st = na_err(*count > (uint64_t)limit ? NA_ERR_RANGE : NA_ERR_FORMAT,
                "%s: field '%s' = %llu: that many %s run past the end of a file of %llu bytes "
                "(limit %d)", path, field, (unsigned long long)*count, what,
                (unsigned long long)size, limit);
    *count = 0;
    return st;
}

/* Parse the first `size` bytes of a file of file_size bytes (size ==
 * file_size: the whole image). *more_p (may be NULL) is set when the parse
 * failed only because the prefix was too short. */
static na_status_t na_gguf_parse_prefix(const char *path, const void *image, size_t size,
                                        uint64_t file_size, int *more_p, na_gguf_t **g_p)
{
    na_gguf_cur_t c = { path, image, size, 0, file_size, 0 };
    na_gguf_t *g;
    uint32_t magic;
    uint64_t i;
    na_status_t st;

    if (more_p != NULL)
        *more_p = 0;
    g = calloc(1, sizeof(*g));
    if (g == NULL || (g->path = strdup(path)) == NULL) {
        free(g);
        return na_err(NA_ERR_NOMEM, "%s: no memory", path);
    }
    g->base = image;
    g->size = size;
    if ((st = na_gguf_rd(&c, &magic, 4, "magic")) != NA_OK)
        goto err_destroy;
    if (magic != NA_GGUF_MAGIC) {
        st = na_err(NA_ERR_FORMAT, "%s: field 'magic' = 0x%08x is not \"GGUF\"", path, magic);
        goto err_destroy;
    }
    if ((st = na_gguf_rd(&c, &g->version, 4, "version")) != NA_OK)
        goto err_destroy;
    if (g->version != NA_GGUF_VERSION) {
        st = na_err(NA_ERR_VERSION, "%s: field 'version' = %u, only GGUF v3 is supported",
                    path, g->version);
        goto err_destroy;
    }
    if ((st = na_gguf_rd(&c, &g->n_tensors, 8, "n_tensors")) != NA_OK ||
        (st = na_gguf_rd(&c, &g->n_kv, 8, "n_kv")) != NA_OK)
        goto err_destroy;
    /* absurd counts are RANGE; counts that cannot fit the file are FORMAT (truncated) */
    if ((st = na_gguf_count_check(path, "n_tensors", "tensor infos", &g->n_tensors,
                                  NA_GGUF_MAX_TENSORS, 32, file_size)) != NA_OK ||
        (st = na_gguf_count_check(path, "n_kv", "metadata pairs", &g->n_kv, NA_GGUF_MAX_KV, 13,
                                  file_size)) != NA_OK)
        goto err_destroy;
    g->kv = calloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof(*g->kv));
    g->tensors = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof(*g->tensors));
    if (g->kv == NULL || g->tensors == NULL) {
        st = na_err(NA_ERR_NOMEM, "%s: no memory for metadata", path);
        goto err_destroy;
    }
    for (i = 0; i < g->n_kv; i++) {
        na_gguf_kv_t *kv = &g->kv[i];
        na_gguf_str_t key;
        uint32_t type;
        char field[48];
        snprintf(field, sizeof(field), "kv[%llu].key", (unsigned long long)i);
        if ((st = na_gguf_rd_str(&c, field, NA_GGUF_MAX_KEY_LEN, &key)) != NA_OK)
            goto err_destroy;
        if ((kv->key = na_gguf_strdup(&key)) == NULL) {
            st = na_err(NA_ERR_NOMEM, "%s: no memory for keys", path);
            goto err_destroy;
        }
        if ((st = na_gguf_rd(&c, &type, 4, kv->key)) != NA_OK)
            goto err_destroy;
        kv->type = (na_gguf_type_t)type;
        if (type == NA_GGUF_ARRAY)
            kv->v.arr.strs = NULL;
        if ((st = na_gguf_parse_value(&c, kv)) != NA_OK)
            goto err_destroy;
    }
    if ((st = na_gguf_check_keys(g)) != NA_OK)
        goto err_destroy;
    for (i = 0; i < g->n_tensors; i++)
        if ((st = na_gguf_parse_tensor(&c, i, &g->tensors[i])) != NA_OK)
            goto err_destroy;
    if ((st = na_gguf_place_tensors(&c, g)) != NA_OK)
        goto err_destroy;
    *g_p = g;
    return NA_OK;

err_destroy:
    if (more_p != NULL)
        *more_p = c.more;
    na_gguf_destroy(g);
    return st;
}

na_status_t na_gguf_parse(const char *path, const void *image, size_t size, na_gguf_t **g_p)
{
    return na_gguf_parse_prefix(path, image, size, size, NULL, g_p);
}

/* A GGUF file holds at least its 24-byte header. */
static na_status_t na_gguf_check_size(const char *path, const struct stat *sb)
{
    if (sb->st_size < 24)
        return na_err(NA_ERR_FORMAT, "%s: file of %lld bytes is too short for a GGUF header",
                      path, (long long)sb->st_size);
    return NA_OK;
}

na_status_t na_gguf_open(const char *path, na_gguf_t **g_p)
{
    void *map = NULL;
    size_t size = 0;
    na_status_t st = na_mapfile(path, "GGUF file", na_gguf_check_size, &map, &size);

    if (st != NA_OK)
        return st;
    st = na_gguf_parse(path, map, size, g_p);
    if (st != NA_OK) {
        munmap(map, size);
        return st;
    }
    (*g_p)->own_map = map;
    return NA_OK;
}

/* Read bytes [have, want) of fd into buf. */
static na_status_t na_gguf_pread(const char *path, int fd, uint8_t *buf, size_t have,
                                 size_t want)
{
    while (have < want) {
        ssize_t n = pread(fd, buf + have, want - have, (off_t)have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return na_err(NA_ERR_IO, "%s: pread at offset %zu: %s", path, have,
                          n < 0 ? strerror(errno) : "file shrank while reading");
        have += (size_t)n;
    }
    return NA_OK;
}

na_status_t na_gguf_open_head(const char *path, na_gguf_t **g_p)
{
    struct stat sb;
    uint8_t *buf = NULL, *nb;
    size_t have = 0, want;
    int fd, more = 1;
    na_status_t st;

    st = na_open_regular(path, "GGUF file", NA_ERR_FORMAT, &fd, &sb);
    if (st != NA_OK)
        return st;
    /* a prefix of 1 MiB holds most headers; a larger vocabulary doubles it */
    want = (uint64_t)sb.st_size < NA_GGUF_HEAD_FIRST ? (size_t)sb.st_size : NA_GGUF_HEAD_FIRST;
    while (more) {
        if ((nb = realloc(buf, want > 0 ? want : 1)) == NULL) {
            st = na_err(NA_ERR_NOMEM, "%s: no memory for a %zu-byte header", path, want);
            break;
        }
        buf = nb;
        if ((st = na_gguf_pread(path, fd, buf, have, want)) != NA_OK)
            break;
        have = want;
        st = na_gguf_parse_prefix(path, buf, have, (uint64_t)sb.st_size, &more, g_p);
        if (st == NA_OK) {
            uint64_t i;
            for (i = 0; i < (*g_p)->n_tensors; i++)
                (*g_p)->tensors[i].data = NULL;   /* also when the whole file was read */
            (*g_p)->own_buf = buf;
            buf = NULL;
        } else if (more) {
            na_err_clear();
            want = (uint64_t)sb.st_size / 2 < have ? (size_t)sb.st_size : have * 2;
        }
    }
    free(buf);
    close(fd);
    return st;
}

void na_gguf_destroy(na_gguf_t *g)
{
    uint64_t i;

    if (g == NULL)
        return;
    for (i = 0; g->kv && i < g->n_kv; i++) {
        free(g->kv[i].key);
        if (g->kv[i].type == NA_GGUF_ARRAY)
            free(g->kv[i].v.arr.strs);
    }
    for (i = 0; g->tensors && i < g->n_tensors; i++)
        free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->tensor_index);
    if (g->own_map)
        munmap(g->own_map, g->size);
    free(g->own_buf);
    free(g->path);
    free(g);
}

/* ---- lookups ------------------------------------------------------------ */

const na_gguf_kv_t *na_gguf_find(const na_gguf_t *g, const char *key)
{
    uint64_t i;
    for (i = 0; i < g->n_kv; i++)
        if (g->kv[i].key && strcmp(g->kv[i].key, key) == 0)
            return &g->kv[i];
    return NULL;
}

const na_gguf_tensor_t *na_gguf_find_tensor(const na_gguf_t *g, const char *name)
{
    uint64_t h;
    if (g->tensor_index == NULL)
        return NULL;
    h = na_gguf_name_hash(name) & g->tensor_index_mask;
    while (g->tensor_index[h] != 0) {
        const na_gguf_tensor_t *t = &g->tensors[g->tensor_index[h] - 1];
        if (strcmp(t->name, name) == 0)
            return t;
        h = (h + 1) & g->tensor_index_mask;
    }
    return NULL;
}

static na_status_t na_gguf_need_kv(const na_gguf_t *g, const char *key, const na_gguf_kv_t **kv_p)
{
    *kv_p = na_gguf_find(g, key);
    if (*kv_p == NULL)
        return na_err(NA_ERR_NOT_FOUND, "%s: field '%s' is missing", g->path, key);
    return NA_OK;
}

/* The pair `key`, which must be of type t1 or t2 (what: "a float", ...). */
static na_status_t na_gguf_need_type(const na_gguf_t *g, const char *key, na_gguf_type_t t1,
                                     na_gguf_type_t t2, const char *what, const na_gguf_kv_t **kv_p)
{
    na_status_t st = na_gguf_need_kv(g, key, kv_p);
    if (st == NA_OK && (*kv_p)->type != t1 && (*kv_p)->type != t2)
        return na_err(NA_ERR_FORMAT, "%s: field '%s' is not %s (type %d)", g->path, key, what,
                      (int)(*kv_p)->type);
    return st;
}

static int na_gguf_is_unsigned(na_gguf_type_t t)
{
    return t == NA_GGUF_UINT8 || t == NA_GGUF_UINT16 || t == NA_GGUF_UINT32 ||
           t == NA_GGUF_UINT64 || t == NA_GGUF_BOOL;
}

static int na_gguf_is_signed(na_gguf_type_t t)
{
    return t == NA_GGUF_INT8 || t == NA_GGUF_INT16 || t == NA_GGUF_INT32 || t == NA_GGUF_INT64;
}

na_status_t na_gguf_get_i64(const na_gguf_t *g, const char *key, int64_t *out)
{
    const na_gguf_kv_t *kv;
    na_status_t st = na_gguf_need_kv(g, key, &kv);
    if (st != NA_OK)
        return st;
    if (na_gguf_is_signed(kv->type)) {
        *out = kv->v.i64;
    } else if (na_gguf_is_unsigned(kv->type)) {
        if (kv->v.u64 > (uint64_t)INT64_MAX)
            return na_err(NA_ERR_RANGE, "%s: field '%s' = %llu out of range", g->path, key,
                          (unsigned long long)kv->v.u64);
        *out = (int64_t)kv->v.u64;
    } else {
        return na_err(NA_ERR_FORMAT, "%s: field '%s' is not an integer (type %d)", g->path, key,
                      (int)kv->type);
    }
    return NA_OK;
}

na_status_t na_gguf_get_u32(const na_gguf_t *g, const char *key, uint32_t *out)
{
    int64_t v;
    na_status_t st = na_gguf_get_i64(g, key, &v);
    if (st != NA_OK)
        return st;
    if (v < 0 || v > (int64_t)UINT32_MAX)
        return na_err(NA_ERR_RANGE, "%s: field '%s' = %lld out of range [0, 2^32)", g->path, key,
                      (long long)v);
    *out = (uint32_t)v;
    return NA_OK;
}

na_status_t na_gguf_get_f32(const na_gguf_t *g, const char *key, float *out)
{
    const na_gguf_kv_t *kv;
    na_status_t st = na_gguf_need_type(g, key, NA_GGUF_FLOAT32, NA_GGUF_FLOAT64, "a float", &kv);
    if (st != NA_OK)
        return st;
    *out = (float)kv->v.f64;
    return NA_OK;
}

na_status_t na_gguf_get_str(const na_gguf_t *g, const char *key, na_gguf_str_t *out)
{
    const na_gguf_kv_t *kv;
    na_status_t st = na_gguf_need_type(g, key, NA_GGUF_STRING, NA_GGUF_STRING, "a string", &kv);
    if (st != NA_OK)
        return st;
    *out = kv->v.str;
    return NA_OK;
}

na_status_t na_gguf_get_arr(const na_gguf_t *g, const char *key, na_gguf_type_t type,
                            const na_gguf_kv_t **kv_p)
{
    const na_gguf_kv_t *kv;
    na_status_t st = na_gguf_need_type(g, key, NA_GGUF_ARRAY, NA_GGUF_ARRAY, "an array", &kv);
    if (st != NA_OK)
        return st;
    if (kv->v.arr.type != type)
        return na_err(NA_ERR_FORMAT, "%s: field '%s' is an array of type %d, expected %d",
                      g->path, key, (int)kv->v.arr.type, (int)type);
    *kv_p = kv;
    return NA_OK;
}

double na_gguf_arr_f64(const na_gguf_kv_t *kv, uint64_t i)
{
    const uint8_t *p = (const uint8_t *)kv->v.arr.data + i * na_gguf_scalar_size(kv->v.arr.type);
    switch (kv->v.arr.type) {
    case NA_GGUF_FLOAT32: { float v;  memcpy(&v, p, 4); return v; }
    case NA_GGUF_FLOAT64: { double v; memcpy(&v, p, 8); return v; }
    default:              return (double)na_gguf_arr_i64(kv, i);
    }
}

int64_t na_gguf_arr_i64(const na_gguf_kv_t *kv, uint64_t i)
{
    const uint8_t *p = (const uint8_t *)kv->v.arr.data + i * na_gguf_scalar_size(kv->v.arr.type);
    switch (kv->v.arr.type) {
    case NA_GGUF_UINT8: case NA_GGUF_BOOL: return *p;
    case NA_GGUF_INT8:   return (int8_t)*p;
    case NA_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case NA_GGUF_INT16:  { int16_t v;  memcpy(&v, p, 2); return v; }
    case NA_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case NA_GGUF_INT32:  { int32_t v;  memcpy(&v, p, 4); return v; }
    case NA_GGUF_UINT64: { uint64_t v; memcpy(&v, p, 8); return (int64_t)v; }
    case NA_GGUF_INT64:  { int64_t v;  memcpy(&v, p, 8); return v; }
    case NA_GGUF_FLOAT32: { float v;  memcpy(&v, p, 4); return (int64_t)v; }
    case NA_GGUF_FLOAT64: { double v; memcpy(&v, p, 8); return (int64_t)v; }
    default:             return 0;
    }
}
