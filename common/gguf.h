/* common/gguf.h — GGUF v3 files: a validating reader and a streaming writer.
 *
 * File layout (little-endian):
 *   "GGUF" u32 version(3) u64 n_tensors u64 n_kv
 *   n_kv x { string key, u32 type, value }
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
 *   padding to general.alignment (default 32)
 *   tensor data; each tensor at data_start + offset (offset aligned)
 * A string is u64 length + bytes (no NUL). An array value is u32 elem_type,
 * u64 count, count values. ne[0] is the contiguous dimension.
 *
 * The reader parses a memory image (usually a read-only mmap), checks every
 * count, length, type, dimension and offset+size against the image size and
 * sane bounds, and keeps pointers into the image for strings, arrays and
 * tensor data (nothing large is copied). */
#ifndef NA_GGUF_H
#define NA_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define NA_GGUF_MAGIC              0x46554747u   /* "GGUF" little-endian */
#define NA_GGUF_VERSION            3
#define NA_GGUF_DEFAULT_ALIGNMENT  32
#define NA_GGUF_MAX_DIMS           4
/* Bounds the reader applies before allocating anything. */
#define NA_GGUF_MAX_KV             65536
#define NA_GGUF_MAX_TENSORS        1048576
#define NA_GGUF_MAX_KEY_LEN        65535
#define NA_GGUF_MAX_STR_LEN        (1u << 24)

/* Metadata value types (GGUF spec). */
typedef enum {
    NA_GGUF_UINT8   = 0,
    NA_GGUF_INT8    = 1,
    NA_GGUF_UINT16  = 2,
    NA_GGUF_INT16   = 3,
    NA_GGUF_UINT32  = 4,
    NA_GGUF_INT32   = 5,
    NA_GGUF_FLOAT32 = 6,
    NA_GGUF_BOOL    = 7,
    NA_GGUF_STRING  = 8,
    NA_GGUF_ARRAY   = 9,
    NA_GGUF_UINT64  = 10,
    NA_GGUF_INT64   = 11,
    NA_GGUF_FLOAT64 = 12,
    NA_GGUF_TYPE_COUNT
} na_gguf_type_t;

/* Tensor element types we name (ggml_type values). Others are recognised for
 * size checking (see na_gguf_ggml_type_size) but not loadable as weights. */
enum {
    NA_GGML_TYPE_F32  = 0,
    NA_GGML_TYPE_F16  = 1,
    NA_GGML_TYPE_Q4_0 = 2,
    NA_GGML_TYPE_Q4_1 = 3,
    NA_GGML_TYPE_Q5_0 = 6,
    NA_GGML_TYPE_Q5_1 = 7,
    NA_GGML_TYPE_Q8_0 = 8,
    NA_GGML_TYPE_Q4_K = 12,
    NA_GGML_TYPE_Q5_K = 13,
    NA_GGML_TYPE_Q6_K = 14,
    NA_GGML_TYPE_BF16 = 30,
};

/* A string inside the image: not NUL-terminated. */
typedef struct {
    uint64_t    len;
    const char *data;
} na_gguf_str_t;

typedef struct {
    char          *key;        /* NUL-terminated copy (owned) */
    na_gguf_type_t type;
    union {
        uint64_t      u64;     /* UINT8/16/32/64, BOOL (0/1) */
        int64_t       i64;     /* INT8/16/32/64 */
        double        f64;     /* FLOAT32/64 */
        na_gguf_str_t str;     /* STRING */
        struct {
            na_gguf_type_t type;   /* element type (never ARRAY) */
            uint64_t       n;      /* element count */
            const void    *data;   /* fixed-size elements: packed LE values in the image */
            na_gguf_str_t *strs;   /* STRING elements: [n] (owned), else NULL */
        } arr;
    } v;
} na_gguf_kv_t;

typedef struct {
    char       *name;          /* NUL-terminated copy (owned) */
    uint32_t    n_dims;        /* 1..NA_GGUF_MAX_DIMS */
    uint64_t    ne[NA_GGUF_MAX_DIMS]; /* ne[0] contiguous; unused dims = 1 */
    uint32_t    type;          /* ggml_type */
    uint64_t    offset;        /* relative to the data section */
    uint64_t    size;          /* bytes */
    const void *data;          /* start of the data in the image */
} na_gguf_tensor_t;

typedef struct na_gguf {
    char             *path;        /* for messages (owned) */
    const uint8_t    *base;        /* the image */
    size_t            size;
    void             *own_map;     /* non-NULL when na_gguf_open mapped it */
    void             *own_buf;     /* the header bytes na_gguf_open_head read (owned) */
    uint32_t          version;
    uint64_t          n_kv;
    na_gguf_kv_t     *kv;          /* [n_kv] */
    uint64_t          n_tensors;
    na_gguf_tensor_t *tensors;     /* [n_tensors] */
    uint64_t          alignment;
    uint64_t          data_offset; /* start of the data section in the image */
    uint32_t         *tensor_index;/* [tensor_index_mask+1] open-addressing: tensor idx + 1 (owned) */
    uint64_t          tensor_index_mask;
} na_gguf_t;

/* Parse an image of `size` bytes (not copied; must outlive the result). path is
 * used in messages. Fails with NA_ERR_FORMAT (bad magic, truncation, bad type,
 * misaligned/out-of-file tensor), NA_ERR_VERSION, NA_ERR_RANGE (absurd counts
 * or dims), NA_ERR_NOMEM; the message names the file and the field. */
na_status_t na_gguf_parse(const char *path, const void *image, size_t size, na_gguf_t **g_p);

/* mmap `path` read-only and parse it; the result owns the map. */
na_status_t na_gguf_open(const char *path, na_gguf_t **g_p);

/* Read only the header of `path` (magic, metadata, tensor infos; not the
 * tensor data) into memory it owns and parse it with the same checks as
 * na_gguf_parse, tensor extents against the file's size. Every tensor's
 * `data` is NULL. For readers that need a model's shape, not its weights. */
#define NA_GGUF_HEAD_FIRST ((size_t)1 << 20)   /* bytes read first; doubled as needed */
na_status_t na_gguf_open_head(const char *path, na_gguf_t **g_p);

/* Free the metadata (and the map if owned). NULL is a no-op. */
void na_gguf_destroy(na_gguf_t *g);

/* Lookups: NULL if absent. */
const na_gguf_kv_t     *na_gguf_find(const na_gguf_t *g, const char *key);
const na_gguf_tensor_t *na_gguf_find_tensor(const na_gguf_t *g, const char *name);

/* Typed getters. Any integer type converts (range-checked) to u32/i64; any
 * float type to f32. Absent key: NA_ERR_NOT_FOUND (message names the key);
 * wrong type or out of range: NA_ERR_FORMAT / NA_ERR_RANGE. */
na_status_t na_gguf_get_u32(const na_gguf_t *g, const char *key, uint32_t *out);
na_status_t na_gguf_get_i64(const na_gguf_t *g, const char *key, int64_t *out);
na_status_t na_gguf_get_f32(const na_gguf_t *g, const char *key, float *out);
/* A STRING value (pointer into the image, not NUL-terminated). */
na_status_t na_gguf_get_str(const na_gguf_t *g, const char *key, na_gguf_str_t *out);
/* An ARRAY value of element type `type`; *kv_p points at the entry. */
na_status_t na_gguf_get_arr(const na_gguf_t *g, const char *key, na_gguf_type_t type,
                            const na_gguf_kv_t **kv_p);
/* Element i of a fixed-size numeric array as double / int64 (no bounds check). */
double  na_gguf_arr_f64(const na_gguf_kv_t *kv, uint64_t i);
int64_t na_gguf_arr_i64(const na_gguf_kv_t *kv, uint64_t i);

/* Size in bytes of n elements of a ggml type (n must be a multiple of the
 * block size); 0 for an unknown type or a partial block. */
uint64_t    na_gguf_ggml_type_size(uint32_t type, uint64_t n);
const char *na_gguf_ggml_type_name(uint32_t type);   /* "?" if unknown */
/* Bytes of one fixed-size metadata value of type (na_gguf_type_t); 0 for
 * STRING / ARRAY / an unknown type (the reader and the writer share it). */
size_t na_gguf_scalar_size(uint32_t type);

/* ---- writer ------------------------------------------------------------
 * Streaming: add metadata and tensor infos, then write each tensor's bytes in
 * the order the infos were added, then finish. Tensor data is never held by
 * the writer, so models larger than memory can be written. */
typedef struct na_gguf_writer na_gguf_writer_t;

na_status_t na_gguf_writer_create(const char *path, na_gguf_writer_t **w_p);
na_status_t na_gguf_writer_kv_u32(na_gguf_writer_t *w, const char *key, uint32_t v);
na_status_t na_gguf_writer_kv_i32(na_gguf_writer_t *w, const char *key, int32_t v);
na_status_t na_gguf_writer_kv_f32(na_gguf_writer_t *w, const char *key, float v);
na_status_t na_gguf_writer_kv_str(na_gguf_writer_t *w, const char *key, const char *v);
/* Arrays (values copied). */
na_status_t na_gguf_writer_kv_arr_str(na_gguf_writer_t *w, const char *key,
                                      const char *const *v, uint64_t n);
na_status_t na_gguf_writer_kv_arr_f32(na_gguf_writer_t *w, const char *key,
                                      const float *v, uint64_t n);
na_status_t na_gguf_writer_kv_arr_i32(na_gguf_writer_t *w, const char *key,
                                      const int32_t *v, uint64_t n);
/* A metadata entry of a reader (na_gguf_t.kv[i]) written as it is: key,
 * type and value (arrays of any element type). */
na_status_t na_gguf_writer_kv_copy(na_gguf_writer_t *w, const na_gguf_kv_t *kv);
/* Declare a tensor: ne[0] contiguous, n_dims 1..4. */
na_status_t na_gguf_writer_tensor(na_gguf_writer_t *w, const char *name, uint32_t type,
                                  uint32_t n_dims, const uint64_t *ne);
/* Write the next declared tensor's data (exactly its size, may be given in
 * several calls: the tensor is complete once its size has been written). */
na_status_t na_gguf_writer_data(na_gguf_writer_t *w, const void *data, size_t bytes);
/* Check every tensor was written, flush and close. Always frees w. */
na_status_t na_gguf_writer_finish(na_gguf_writer_t *w);
/* Abandon: close, remove the partial file, free. NULL is a no-op. */
void        na_gguf_writer_abort(na_gguf_writer_t *w);

#endif /* NA_GGUF_H */
