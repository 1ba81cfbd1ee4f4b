/* tests/unit/test_gguf.c — common/gguf.c, common/gguf_write.c and
 * common/model_gguf.c: a hand-built GGUF with every metadata type parses to
 * the right values; each corrupted field (magic, version, counts, string and
 * array lengths, value types, n_dims, ne, tensor type, offsets, alignment)
 * and every truncation is rejected naming the file and the field; generated
 * LLaMA GGUF files load, and patched hyper-parameters, names, shapes and
 * types are rejected; non-F32 norms are converted to F32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/genmodel.h"
#include "common/gguf.h"
#include "common/model.h"
#include "common/tokenizer.h"
#include "tests/testutil.h"

typedef struct {
    uint8_t *b;
    size_t   n, cap;
} buf_t;

static size_t put(buf_t *b, const void *p, size_t n)
{
    size_t at = b->n;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->b = realloc(b->b, b->cap);
    }
    memcpy(b->b + b->n, p, n);
    b->n += n;
    return at;
}
static size_t put_u32(buf_t *b, uint32_t v) { return put(b, &v, 4); }
static size_t put_u64(buf_t *b, uint64_t v) { return put(b, &v, 8); }
static size_t put_str(buf_t *b, const char *s)
{
    size_t at = put_u64(b, strlen(s));
    put(b, s, strlen(s));
    return at;
}

/* Offsets of the fields the corruption tests poke at. */
typedef struct {
    size_t n_tensors, n_kv, key0_len, arch_len, align_type, align_val, arr_type, arr_count,
           arr_str1_len, bool_val, t0_ndims, t0_ne0, t0_type, t1_type, t1_offset, t1_name,
           key_i8,
           data_start, total;
} layout_t;

/* A small GGUF: 5 kv (string, alignment, string array, f32 array, one of every
 * scalar type), 2 tensors (f32 [32, 3] and q8_0 [64]). */
static buf_t build(layout_t *L)
{
    buf_t b = { NULL, 0, 0 };
    const char *strs[3] = { "a", "bc", "def" };
    float f3[3] = { 1.0f, 2.0f, 3.0f };
    uint8_t u8 = 200, bl = 1;
    int8_t i8 = -5;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    int32_t i32 = -123456;
    float f32 = 0.25f;
    int64_t i64 = -(1ll << 40);
    double f64 = 3.5;
    int i;

    put_u32(&b, NA_GGUF_MAGIC);
    put_u32(&b, 3);
    L->n_tensors = put_u64(&b, 2);
    L->n_kv = put_u64(&b, 15);
    L->key0_len = put_str(&b, "general.architecture");
    put_u32(&b, NA_GGUF_STRING);
    L->arch_len = put_str(&b, "llama");
    put_str(&b, "general.alignment");
    L->align_type = put_u32(&b, NA_GGUF_UINT32);
    L->align_val = put_u32(&b, 32);
    put_str(&b, "test.strs");
    put_u32(&b, NA_GGUF_ARRAY);
    L->arr_type = put_u32(&b, NA_GGUF_STRING);
    L->arr_count = put_u64(&b, 3);
    put_str(&b, strs[0]);
    L->arr_str1_len = put_str(&b, strs[1]);
    put_str(&b, strs[2]);
    put_str(&b, "test.f32s");
    put_u32(&b, NA_GGUF_ARRAY);
    put_u32(&b, NA_GGUF_FLOAT32);
    put_u64(&b, 3);
    put(&b, f3, 12);
    put_str(&b, "t.u8");  put_u32(&b, NA_GGUF_UINT8);   put(&b, &u8, 1);
    L->key_i8 = put_str(&b, "t.i8");  put_u32(&b, NA_GGUF_INT8);    put(&b, &i8, 1);
    put_str(&b, "t.u16"); put_u32(&b, NA_GGUF_UINT16);  put(&b, &u16, 2);
    put_str(&b, "t.i16"); put_u32(&b, NA_GGUF_INT16);   put(&b, &i16, 2);
    put_str(&b, "t.u32"); put_u32(&b, NA_GGUF_UINT32);  put_u32(&b, 4000000000u);
    put_str(&b, "t.i32"); put_u32(&b, NA_GGUF_INT32);   put(&b, &i32, 4);
    put_str(&b, "t.f32"); put_u32(&b, NA_GGUF_FLOAT32); put(&b, &f32, 4);
    put_str(&b, "t.bool"); put_u32(&b, NA_GGUF_BOOL);   L->bool_val = put(&b, &bl, 1);
    put_str(&b, "t.u64"); put_u32(&b, NA_GGUF_UINT64);  put_u64(&b, 1ull << 63);
    put_str(&b, "t.i64"); put_u32(&b, NA_GGUF_INT64);   put(&b, &i64, 8);
    put_str(&b, "t.f64"); put_u32(&b, NA_GGUF_FLOAT64); put(&b, &f64, 8);
    /* tensor infos */
    put_str(&b, "t0");
    L->t0_ndims = put_u32(&b, 2);
    L->t0_ne0 = put_u64(&b, 32);
    put_u64(&b, 3);
    L->t0_type = put_u32(&b, NA_GGML_TYPE_F32);
    put_u64(&b, 0);
    L->t1_name = put_str(&b, "t1");
    put_u32(&b, 1);
    put_u64(&b, 64);
    L->t1_type = put_u32(&b, NA_GGML_TYPE_Q8_0);
    L->t1_offset = put_u64(&b, 384);
    while (b.n % 32)
        put(&b, "", 1);
    L->data_start = b.n;
    for (i = 0; i < 96; i++) {
        float v = (float)i;
        put(&b, &v, 4);
    }
    for (i = 0; i < 68; i++)
        put(&b, &(uint8_t){ (uint8_t)i }, 1);
    L->total = b.n;
    return b;
}

static void check_good(const char *path, const buf_t *b, const layout_t *L)
{
    na_gguf_t *g = NULL;
    const na_gguf_kv_t *kv;
    uint32_t u;
    int64_t i;
    float f;
    na_gguf_str_t s;

    (void)na_test_write_file(path, b->b, b->n);
    NA_CHECK_OK(na_gguf_open(path, &g));
    if (g == NULL)
        return;
    NA_CHECK(g->version == 3 && g->n_kv == 15 && g->n_tensors == 2 && g->alignment == 32);
    NA_CHECK(g->data_offset == L->data_start);
    NA_CHECK_OK(na_gguf_get_str(g, "general.architecture", &s));
    NA_CHECK(s.len == 5 && memcmp(s.data, "llama", 5) == 0);
    NA_CHECK_OK(na_gguf_get_arr(g, "test.strs", NA_GGUF_STRING, &kv));
    NA_CHECK(kv->v.arr.n == 3 && kv->v.arr.strs[2].len == 3 &&
             memcmp(kv->v.arr.strs[2].data, "def", 3) == 0);
    NA_CHECK_OK(na_gguf_get_arr(g, "test.f32s", NA_GGUF_FLOAT32, &kv));
    NA_CHECK(na_gguf_arr_f64(kv, 2) == 3.0);
    NA_CHECK(na_gguf_get_arr(g, "test.f32s", NA_GGUF_INT32, &kv) == NA_ERR_FORMAT);
    NA_CHECK_OK(na_gguf_get_u32(g, "t.u8", &u));  NA_CHECK(u == 200);
    NA_CHECK_OK(na_gguf_get_i64(g, "t.i8", &i));  NA_CHECK(i == -5);
    NA_CHECK_OK(na_gguf_get_u32(g, "t.u16", &u)); NA_CHECK(u == 60000);
    NA_CHECK_OK(na_gguf_get_i64(g, "t.i16", &i)); NA_CHECK(i == -30000);
    NA_CHECK_OK(na_gguf_get_u32(g, "t.u32", &u)); NA_CHECK(u == 4000000000u);
    NA_CHECK_OK(na_gguf_get_i64(g, "t.i32", &i)); NA_CHECK(i == -123456);
    NA_CHECK(na_gguf_get_u32(g, "t.i32", &u) == NA_ERR_RANGE);
    NA_CHECK_OK(na_gguf_get_f32(g, "t.f32", &f)); NA_CHECK(f == 0.25f);
    NA_CHECK_OK(na_gguf_get_u32(g, "t.bool", &u)); NA_CHECK(u == 1);
    NA_CHECK(na_gguf_get_i64(g, "t.u64", &i) == NA_ERR_RANGE);
    NA_CHECK_OK(na_gguf_get_i64(g, "t.i64", &i)); NA_CHECK(i == -(1ll << 40));
    NA_CHECK_OK(na_gguf_get_f32(g, "t.f64", &f)); NA_CHECK(f == 3.5f);
    NA_CHECK(na_gguf_get_f32(g, "t.u8", &f) == NA_ERR_FORMAT);
    NA_CHECK(na_gguf_get_u32(g, "no.such.key", &u) == NA_ERR_NOT_FOUND);
    NA_CHECK(strstr(na_errmsg(), "no.such.key") != NULL);
    NA_CHECK(na_gguf_find_tensor(g, "t0") != NULL && na_gguf_find_tensor(g, "t9") == NULL);
    if (na_gguf_find_tensor(g, "t1")) {
        const na_gguf_tensor_t *t0 = na_gguf_find_tensor(g, "t0");
        const na_gguf_tensor_t *t1 = na_gguf_find_tensor(g, "t1");
        NA_CHECK(t0->size == 384 && t0->ne[0] == 32 && t0->ne[1] == 3 && t0->n_dims == 2);
        NA_CHECK(((const float *)t0->data)[95] == 95.0f);
        NA_CHECK(t1->size == 68 && ((const uint8_t *)t1->data)[67] == 67);
    }
    na_gguf_destroy(g);
}

/* Patch 4 or 8 bytes at off, write, expect a failure naming needle. */
static void expect_bad(const char *path, const buf_t *b, size_t off, uint64_t v, int width,
                       na_status_t want, const char *needle)
{
    uint8_t *copy = malloc(b->n);
    na_gguf_t *g = NULL;
    na_status_t st;

    memcpy(copy, b->b, b->n);
    memcpy(copy + off, &v, (size_t)width);
    (void)na_test_write_file(path, copy, b->n);
    st = na_gguf_open(path, &g);
    NA_CHECK_MSG(st == want, "patch @%zu = %llu: status %d, want %d (%s)", off,
                 (unsigned long long)v, st, want, na_errmsg());
    NA_CHECK_MSG(strstr(na_errmsg(), path) && strstr(na_errmsg(), needle),
                 "patch @%zu: '%s' lacks '%s'", off, na_errmsg(), needle);
    if (st == NA_OK)
        na_gguf_destroy(g);
    free(copy);
}

static void check_corrupt(const char *path, const buf_t *b, const layout_t *L)
{
    size_t cut;

    expect_bad(path, b, 0, 0x46554746u, 4, NA_ERR_FORMAT, "magic");
    expect_bad(path, b, 4, 2, 4, NA_ERR_VERSION, "version");
    expect_bad(path, b, L->n_tensors, 1ull << 40, 8, NA_ERR_RANGE, "n_tensors");
    expect_bad(path, b, L->n_kv, ~0ull, 8, NA_ERR_RANGE, "n_kv");
    expect_bad(path, b, L->n_kv, 16, 8, NA_ERR_RANGE, "tensor_info[0].name"); /* one kv too many */
    expect_bad(path, b, L->key0_len, 1ull << 50, 8, NA_ERR_RANGE, "kv[0].key");
    expect_bad(path, b, L->key0_len, 5000, 8, NA_ERR_FORMAT, "kv[0].key");
    expect_bad(path, b, L->arch_len, ~0ull, 8, NA_ERR_RANGE, "general.architecture");
    expect_bad(path, b, L->arch_len, 1 << 20, 8, NA_ERR_FORMAT, "general.architecture");
    expect_bad(path, b, L->align_type, 99, 4, NA_ERR_FORMAT, "general.alignment");
    expect_bad(path, b, L->align_val, 0, 4, NA_ERR_RANGE, "general.alignment");
    expect_bad(path, b, L->align_val, 24, 4, NA_ERR_RANGE, "general.alignment");
    expect_bad(path, b, L->align_type, NA_GGUF_INT32, 4, NA_ERR_FORMAT, "general.alignment");
    expect_bad(path, b, L->arr_type, NA_GGUF_ARRAY, 4, NA_ERR_UNSUPPORTED, "test.strs");
    expect_bad(path, b, L->arr_type, 77, 4, NA_ERR_FORMAT, "test.strs");
    expect_bad(path, b, L->arr_count, 1ull << 60, 8, NA_ERR_FORMAT, "test.strs");
    expect_bad(path, b, L->arr_count, 1000, 8, NA_ERR_FORMAT, "test.strs");
    expect_bad(path, b, L->arr_str1_len, 1ull << 62, 8, NA_ERR_RANGE, "test.strs");
    expect_bad(path, b, L->arr_str1_len, 100000, 8, NA_ERR_FORMAT, "test.strs");
    expect_bad(path, b, L->bool_val, 2, 1, NA_ERR_FORMAT, "t.bool");
    expect_bad(path, b, L->t0_ndims, 0, 4, NA_ERR_RANGE, "n_dims");
    expect_bad(path, b, L->t0_ndims, 5, 4, NA_ERR_RANGE, "n_dims");
    expect_bad(path, b, L->t0_ne0, 0, 8, NA_ERR_RANGE, "ne[0]");
    expect_bad(path, b, L->t0_ne0, ~0ull, 8, NA_ERR_RANGE, "ne[0]");
    expect_bad(path, b, L->t0_ne0, 1u << 20, 8, NA_ERR_FORMAT, "'t0'");      /* past the end */
    expect_bad(path, b, L->t0_type, 99, 4, NA_ERR_FORMAT, "'t0'");
    expect_bad(path, b, L->t1_offset, 388, 8, NA_ERR_FORMAT, "offset");       /* misaligned */
    expect_bad(path, b, L->t1_offset, 416, 8, NA_ERR_FORMAT, "offset");       /* past the end */
    expect_bad(path, b, L->t1_offset, ~0ull - 31, 8, NA_ERR_FORMAT, "offset"); /* wraps */
    expect_bad(path, b, L->t1_name + 8, 0x3074, 2, NA_ERR_FORMAT, "twice");   /* "t0" again */
    expect_bad(path, b, L->t1_type, 10, 4, NA_ERR_FORMAT, "ne[0]");           /* q2_k: 64 % 256 */
    /* the block formats nearattn loads: columns not whole blocks, a type id
     * past the table, blocks cut short by the end of the data */
    expect_bad(path, b, L->t1_type, NA_GGML_TYPE_Q4_K, 4, NA_ERR_FORMAT, "q4_k block (256)");
    expect_bad(path, b, L->t1_type, NA_GGML_TYPE_Q6_K, 4, NA_ERR_FORMAT, "q6_k block (256)");
    expect_bad(path, b, L->t1_type, 31, 4, NA_ERR_FORMAT, "'type' = 31");
    expect_bad(path, b, L->t1_type, 0xffffffffu, 4, NA_ERR_FORMAT, "is not a known ggml type");
    {
        buf_t c = { malloc(b->n), b->n, b->n };
        uint32_t q4_0 = NA_GGML_TYPE_Q4_0, q6_k = NA_GGML_TYPE_Q6_K;
        na_gguf_t *g = NULL;
        /* q4_0 [64]: 36 bytes fit the 68 of t1 */
        memcpy(c.b, b->b, b->n);
        memcpy(c.b + L->t1_type, &q4_0, 4);
        (void)na_test_write_file(path, c.b, c.n);
        NA_CHECK_OK(na_gguf_open(path, &g));
        if (g != NULL) {
            NA_CHECK(g->tensors[1].size == 36);
            na_gguf_destroy(g);
        }
        /* q4_0 [128]: 4 blocks, 72 bytes, the last one cut after 14 */
        expect_bad(path, &c, L->t1_name + 10 + 4, 128, 8, NA_ERR_FORMAT, "past the end");
        /* q6_k [256]: one 210-byte block in 68 */
        memcpy(c.b + L->t1_type, &q6_k, 4);
        expect_bad(path, &c, L->t1_name + 10 + 4, 256, 8, NA_ERR_FORMAT, "'t1'");
        free(c.b);
    }
    /* "t.i8" becomes "t.u8": a metadata key given twice is refused, naming it */
    expect_bad(path, b, L->key_i8 + 8 + 2, 'u', 1, NA_ERR_FORMAT, "key 't.u8' appears twice");
    /* truncation anywhere: header fields and inside tensor data */
    for (cut = 0; cut < L->total; cut += (cut < L->data_start ? 1 : 37)) {
        na_gguf_t *g = NULL;
        na_status_t st;
        (void)na_test_write_file(path, b->b, cut);
        st = na_gguf_open(path, &g);
        NA_CHECK_MSG(st == NA_ERR_FORMAT, "cut at %zu: status %d (%s)", cut, st, na_errmsg());
        NA_CHECK_MSG(strstr(na_errmsg(), path) != NULL, "cut at %zu: %s", cut, na_errmsg());
        NA_CHECK_MSG(cut < 24 || strstr(na_errmsg(), "past the end") != NULL ||
                     strstr(na_errmsg(), "'n_tensors'") || strstr(na_errmsg(), "'n_kv'"),
                     "cut at %zu: %s", cut, na_errmsg());
        if (st == NA_OK)
            na_gguf_destroy(g);
    }
}

/* Find a key's (or tensor name's) string in the file; offset just past it + 4
 * (the value of a kv, or ne[0] of a tensor info). */
static size_t find_value(const uint8_t *p, size_t n, const char *key)
{
    size_t kl = strlen(key), i;
    for (i = 8; i + kl + 4 <= n; i++) {
        uint64_t len;
        memcpy(&len, p + i - 8, 8);
        if (len == kl && memcmp(p + i, key, kl) == 0)
            return i + kl + 4;
    }
    return 0;
}

/* Patch `width` bytes at (value of key) + rel, or rename key (width 0), and
 * expect na_model_open to fail with want and a message naming needle. */
static void expect_model_bad(const char *path, const uint8_t *orig, size_t n, const char *key,
                             size_t rel, uint64_t v, int width, na_status_t want,
                             const char *needle)
{
    uint8_t *copy = malloc(n);
    size_t off;
    na_model_t *m = NULL;
    na_status_t st;

    memcpy(copy, orig, n);
    off = find_value(copy, n, key);
    NA_CHECK_MSG(off != 0, "key %s not found", key);
    if (off != 0 && width == 0)
        copy[off - 4 - 1] ^= 0x01;      /* rename: flip a bit of the last name byte */
    else if (off != 0)
        memcpy(copy + off + rel, &v, (size_t)width);
    (void)na_test_write_file(path, copy, n);
    st = na_model_open(path, &m);
    NA_CHECK_MSG(st == want, "%s: status %d, want %d (%s)", key, st, want, na_errmsg());
    NA_CHECK_MSG(strstr(na_errmsg(), path) && strstr(na_errmsg(), needle),
                 "%s: '%s' lacks '%s'", key, na_errmsg(), needle);
    if (st == NA_OK)
        na_model_destroy(m);
    free(copy);
}

/* A tiny llama GGUF written directly: f16 attn norms, bf16 ffn norms, bf16
 * matrices; norms must come back as F32. */
static void check_norm_conversion(const char *dir)
{
    char path[600];
    na_gguf_writer_t *w;
    na_model_t *m = NULL;
    const char *toks[260];
    char names[256][8];
    uint64_t vec[1] = { 32 }, mat[2] = { 32, 32 }, ffn[2] = { 32, 64 }, down[2] = { 64, 32 };
    uint64_t emb[2] = { 32, 259 };
    uint16_t buf[259 * 32];
    int i;

    snprintf(path, sizeof(path), "%s/tiny.gguf", dir);
    toks[0] = "<unk>"; toks[1] = "<s>"; toks[2] = "</s>";
    for (i = 0; i < 256; i++) {
        snprintf(names[i], sizeof(names[i]), "<0x%02X>", i);
        toks[3 + i] = names[i];
    }
    NA_CHECK_OK(na_gguf_writer_create(path, &w));
    NA_CHECK_OK(na_gguf_writer_kv_str(w, "general.architecture", "llama"));
    NA_CHECK_OK(na_gguf_writer_kv_u32(w, "llama.embedding_length", 32));
    NA_CHECK_OK(na_gguf_writer_kv_u32(w, "llama.feed_forward_length", 64));
    NA_CHECK_OK(na_gguf_writer_kv_u32(w, "llama.block_count", 1));
    NA_CHECK_OK(na_gguf_writer_kv_u32(w, "llama.attention.head_count", 4));
    NA_CHECK_OK(na_gguf_writer_kv_u32(w, "llama.context_length", 16));
    NA_CHECK_OK(na_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 259));
    NA_CHECK_OK(na_gguf_writer_tensor(w, "token_embd.weight", NA_GGML_TYPE_BF16, 2, emb));
    NA_CHECK_OK(na_gguf_writer_tensor(w, "blk.0.attn_norm.weight", NA_GGML_TYPE_F16, 1, vec));
    NA_CHECK_OK(na_gguf_writer_tensor(w, "blk.0.attn_q.weight", NA_GGML_TYPE_BF16, 2, mat));
    NA_CHECK_OK(na_gguf_writer_tensor(w, "blk.0.attn_k.weight", NA_GGML_TYPE_BF16, 2, mat));
    NA_CHECK_OK(na_gguf_writer_tensor(w, "blk.0.attn_v.weight", NA_GGML_TYPE_BF16, 2, mat));
    NA_CHECK_OK(na_gguf_writer_tensor(w, "blk.0.attn_output.weight", NA_GGML_TYPE_BF16, 2, mat));
    NA_CHECK_OK(na_gguf_writer_tensor(w, "blk.0.ffn_norm.weight", NA_GGML_TYPE_BF16, 1, vec));
    NA_CHECK_OK(na_gguf_writer_tensor(w, "blk.0.ffn_gate.weight", NA_GGML_TYPE_BF16, 2, ffn));
    NA_CHECK_OK(na_gguf_writer_tensor(w, "blk.0.ffn_down.weight", NA_GGML_TYPE_BF16, 2, down));
    NA_CHECK_OK(na_gguf_writer_tensor(w, "blk.0.ffn_up.weight", NA_GGML_TYPE_BF16, 2, ffn));
    NA_CHECK_OK(na_gguf_writer_tensor(w, "output_norm.weight", NA_GGML_TYPE_F32, 1, vec));
    for (i = 0; i < 259 * 32; i++)
        buf[i] = na_f32_to_bf16(0.5f);
    NA_CHECK_OK(na_gguf_writer_data(w, buf, 259 * 32 * 2));
    for (i = 0; i < 32; i++)
        buf[i] = na_f32_to_f16(1.5f);
    NA_CHECK_OK(na_gguf_writer_data(w, buf, 64));
    for (i = 0; i < 32 * 64; i++)
        buf[i] = na_f32_to_bf16(0.25f);
    for (i = 0; i < 4; i++)
        NA_CHECK_OK(na_gguf_writer_data(w, buf, 32 * 32 * 2));
    NA_CHECK_OK(na_gguf_writer_data(w, buf, 64));               /* ffn_norm = 0.25 */
    for (i = 0; i < 3; i++)
        NA_CHECK_OK(na_gguf_writer_data(w, buf, 32 * 64 * 2));
    {
        float ones[32];
        for (i = 0; i < 32; i++)
            ones[i] = 2.0f;
        NA_CHECK_OK(na_gguf_writer_data(w, ones, sizeof(ones)));
    }
    NA_CHECK_OK(na_gguf_writer_finish(w));
    NA_CHECK_OK(na_model_open(path, &m));
    if (m == NULL)
        return;
    NA_CHECK(m->cfg.n_kv_heads == 4 && m->cfg.vocab_size == 259 && m->cfg.rms_eps == 1e-5f);
    NA_CHECK(m->layers[0].attn_norm.dtype == NA_DTYPE_F32 &&
             ((const float *)m->layers[0].attn_norm.data)[31] == 1.5f);
    NA_CHECK(m->layers[0].ffn_norm.dtype == NA_DTYPE_F32 &&
             ((const float *)m->layers[0].ffn_norm.data)[0] == 0.25f);
    NA_CHECK(m->out_norm.dtype == NA_DTYPE_F32 && ((const float *)m->out_norm.data)[5] == 2.0f);
    NA_CHECK(m->out_norm.data != (const void *)m->owned);  /* f32 stays in the map */
    NA_CHECK(m->layers[0].wq.dtype == NA_DTYPE_BF16 && m->tok_embd.dtype == NA_DTYPE_BF16);
    NA_CHECK(m->cfg.shared_classifier && m->output.dtype == NA_DTYPE_BF16);
    na_model_destroy(m);
}

/* Random byte mutations of the metadata/infos region: whatever the verdict,
 * no crash (run under ASan), a message on failure, and a usable model and
 * tokenizer on success. */
static void check_mutations(const char *path, const uint8_t *orig, size_t n)
{
    uint8_t *copy = malloc(n);
    size_t head = n < 24000 ? n : 24000;
    na_rng_t r;
    int iter, ok = 0;

    na_rng_seed(&r, 99);
    for (iter = 0; iter < 400; iter++) {
        na_model_t *m = NULL;
        na_status_t st;
        int k, flips = 1 + (int)(na_rng_u64(&r) % 4);
        memcpy(copy, orig, n);
        for (k = 0; k < flips; k++) {
            size_t at = (size_t)(na_rng_u64(&r) % head);
            uint64_t kind = na_rng_u64(&r) % 3;
            copy[at] = kind == 0 ? (uint8_t)na_rng_u64(&r) : kind == 1 ? 0xff : 0x00;
        }
        (void)na_test_write_file(path, copy, n);
        st = na_model_open(path, &m);
        if (st == NA_OK) {
            na_tokenizer_t *t = NULL;
            ok++;
            NA_CHECK(m->cfg.dim > 0 && m->layers != NULL);
            if (na_tokenizer_create_gguf(m->gguf, &t) == NA_OK) {
                int toks[64];
                size_t nt = 0;
                char out[256];
                if (na_tokenizer_encode(t, "mutated text \xe2\x9c\x93", 1, 1, toks, 64, &nt) == NA_OK)
                    (void)na_tokenizer_decode_all(t, toks, nt, out, sizeof(out), NULL);
                na_tokenizer_destroy(t);
            }
            na_model_destroy(m);
        } else {
            NA_CHECK_MSG(strstr(na_errmsg(), path) != NULL, "mutation %d: '%s'", iter,
                         na_errmsg());
        }
    }
    fprintf(stderr, "mutations: %d of 400 still loadable\n", ok);
    free(copy);
}

/* Generate arch a (with scaling sc or NULL) at the test shape: its bytes. */
static uint8_t *arch_file(const char *dir, na_genmodel_arch_t a, const char *sc, size_t *n_p,
                          char *path, size_t plen)
{
    na_genmodel_opts_t o;
    char prefix[600];
    na_genmodel_defaults(&o);
    na_genmodel_set_arch(&o, a);
    o.write_llama2c = 0;
    o.dim = 128, o.n_heads = 4, o.n_kv_heads = 2, o.hidden_dim = 160;
    o.rope_scaling = sc;
    o.rope_scaling_factor = 4.0f;
    snprintf(prefix, sizeof(prefix), "%s/arch%d%s", dir, (int)a, sc ? sc : "");
    NA_CHECK_OK(na_genmodel_write(prefix, &o));
    snprintf(path, plen, "%s.gguf", prefix);
    return (uint8_t *)na_test_read_file(path, n_p);
}

/* The architectures' own tensors and keys: loaded, and bad ones refused
 * naming the file and the field (issue 20 item 1). */
static void check_arch_models(const char *dir)
{
    char path[640], bad[640];
    na_model_t *m = NULL;
    uint8_t *raw;
    size_t n = 0;
    int a;

    snprintf(bad, sizeof(bad), "%s/badarch.gguf", dir);
    for (a = 0; a < NA_GENMODEL_ARCH_COUNT; a++) {
        raw = arch_file(dir, (na_genmodel_arch_t)a, NULL, &n, path, sizeof(path));
        NA_CHECK_OK(na_model_open(path, &m));
        if (m != NULL) {
            const na_layer_weights_t *w = &m->layers[1];
            NA_CHECK(m->cfg.head_dim == 32 && m->cfg.rope_dims == 32);
            NA_CHECK(m->cfg.rope_style == (a >= NA_GENMODEL_QWEN2 ? NA_ROPE_NEOX : NA_ROPE_NORM));
            NA_CHECK(!strcmp(m->cfg.arch, a == NA_GENMODEL_QWEN2 ? "qwen2"
                                         : a == NA_GENMODEL_QWEN3 ? "qwen3" : "llama"));
            NA_CHECK(na_tensor_present(&w->bq) == (a == NA_GENMODEL_QWEN2));
            NA_CHECK(na_tensor_present(&w->bk) == (a == NA_GENMODEL_QWEN2) &&
                     (a != NA_GENMODEL_QWEN2 || w->bk.cols == 64));
            NA_CHECK(na_tensor_present(&w->q_norm) == (a == NA_GENMODEL_QWEN3) &&
                     (a != NA_GENMODEL_QWEN3 || w->q_norm.cols == 32));
            NA_CHECK(na_tensor_present(&m->rope_freqs) == (a == NA_GENMODEL_LLAMA3));
            NA_CHECK(!na_tensor_present(&w->bo));
            na_model_destroy(m);
            m = NULL;
        }
#define BAD(key, rel, v, width, want, needle) \
    expect_model_bad(bad, raw, n, key, rel, v, width, want, needle)
        if (a == NA_GENMODEL_QWEN2) {
            BAD("blk.0.attn_k.bias", 0, 32, 8, NA_ERR_FORMAT, "blk.0.attn_k.bias");  /* ne[0] */
            BAD("blk.1.attn_v.bias", 0, 0, 0, NA_ERR_FORMAT, "blk.1.attn_v.bias");   /* gone */
            BAD("blk.0.attn_q.bias", 8, 8, 4, NA_ERR_UNSUPPORTED, "blk.0.attn_q.bias"); /* q8_0 */
        } else if (a == NA_GENMODEL_QWEN3) {
            BAD("blk.0.attn_q_norm.weight", 0, 16, 8, NA_ERR_FORMAT, "blk.0.attn_q_norm.weight");
            BAD("blk.1.attn_k_norm.weight", 0, 0, 0, NA_ERR_FORMAT, "blk.1.attn_k_norm.weight");
            BAD("qwen3.attention.key_length", 0, 33, 4, NA_ERR_FORMAT,
                "qwen3.attention.key_length");
            BAD("qwen3.attention.value_length", 0, 16, 4, NA_ERR_UNSUPPORTED,
                "qwen3.attention.value_length");
            BAD("general.architecture", 8 + 4, '9', 1, NA_ERR_UNSUPPORTED, "'qwen9'");
        } else if (a == NA_GENMODEL_LLAMA3) {
            BAD("rope_freqs.weight", 0, 8, 8, NA_ERR_FORMAT, "rope_freqs.weight");
        }
#undef BAD
        free(raw);
    }
    /* rope scaling keys */
    raw = arch_file(dir, NA_GENMODEL_LLAMA, "yarn", &n, path, sizeof(path));
    NA_CHECK_OK(na_model_open(path, &m));
    if (m != NULL) {
        NA_CHECK(m->cfg.rope_scaling == NA_ROPE_SCALING_YARN && m->cfg.rope_freq_scale == 0.25f);
        NA_CHECK(m->cfg.yarn_ext_factor == 1.0f && m->cfg.yarn_orig_ctx == 256);
        na_model_destroy(m);
        m = NULL;
    }
#define BAD(key, rel, v, width, want, needle) \
    expect_model_bad(bad, raw, n, key, rel, v, width, want, needle)
    BAD("llama.rope.scaling.type", 8, 'x', 1, NA_ERR_UNSUPPORTED, "llama.rope.scaling.type");
    BAD("llama.rope.scaling.factor", 0, 0xc0000000u, 4, NA_ERR_RANGE,
        "llama.rope.scaling.factor");                                      /* -2.0f */
    BAD("llama.rope.scaling.original_context_length", 0, 0, 4, NA_ERR_RANGE,
        "llama.rope.scaling.original_context_length");
#undef BAD
    free(raw);
}

static void check_model(const char *dir)
{
    na_genmodel_opts_t o;
    char prefix[600], path[640], bad[640];
    na_model_t *m = NULL;
    uint8_t *raw;
    size_t n = 0;

    na_genmodel_defaults(&o);
    o.write_llama2c = 0;
    o.rope_theta = 500000.0f;
    o.rms_eps = 1e-6f;
    snprintf(prefix, sizeof(prefix), "%s/g", dir);
    NA_CHECK_OK(na_genmodel_write(prefix, &o));
    snprintf(path, sizeof(path), "%s.gguf", prefix);
    snprintf(bad, sizeof(bad), "%s/bad.gguf", dir);
    NA_CHECK_OK(na_model_open(path, &m));
    if (m != NULL) {
        NA_CHECK(m->format == NA_MODEL_FORMAT_GGUF && m->gguf != NULL);
        NA_CHECK(m->cfg.dim == 64 && m->cfg.hidden_dim == 172 && m->cfg.n_layers == 2);
        NA_CHECK(m->cfg.n_heads == 8 && m->cfg.n_kv_heads == 4 && m->cfg.vocab_size == 512);
        NA_CHECK(m->cfg.seq_len == 256 && m->cfg.head_dim == 8);
        NA_CHECK(m->cfg.rope_theta == 500000.0f && m->cfg.rms_eps == 1e-6f);
        NA_CHECK(m->cfg.shared_classifier && m->output.data == m->tok_embd.data);
        NA_CHECK(m->layers[1].w2.rows == 64 && m->layers[1].w2.cols == 172);
        NA_CHECK((const uint8_t *)m->layers[1].w2.data > (const uint8_t *)m->map &&
                 (const uint8_t *)m->layers[1].w2.data < (const uint8_t *)m->map + m->map_size);
        NA_CHECK(m->owned == NULL);
        na_model_destroy(m);
    }
    raw = (uint8_t *)na_test_read_file(path, &n);
    NA_CHECK(raw != NULL);
    if (raw == NULL)
        return;
#define BAD(key, rel, v, width, want, needle) \
    expect_model_bad(bad, raw, n, key, rel, v, width, want, needle)
    BAD("llama.attention.head_count", 0, 7, 4, NA_ERR_FORMAT, "llama.attention.head_count");
    BAD("llama.attention.head_count_kv", 0, 3, 4, NA_ERR_FORMAT, "llama.attention.head_count_kv");
    BAD("llama.embedding_length", 0, 0, 4, NA_ERR_RANGE, "llama.embedding_length");
    BAD("llama.context_length", 0, 0xffffffffu, 4, NA_ERR_RANGE, "llama.context_length");
    BAD("llama.block_count", 0, 3, 4, NA_ERR_FORMAT, "blk.2.attn_norm.weight");
    BAD("llama.block_count", 0, 100000, 4, NA_ERR_RANGE, "llama.block_count");
    BAD("llama.feed_forward_length", 0, 160, 4, NA_ERR_FORMAT, "blk.0.ffn_gate.weight");
    BAD("llama.rope.dimension_count", 0, 5, 4, NA_ERR_FORMAT, "llama.rope.dimension_count");
    BAD("llama.rope.dimension_count", 0, 10, 4, NA_ERR_FORMAT, "llama.rope.dimension_count");
    BAD("llama.rope.dimension_count", 0, 0, 4, NA_ERR_RANGE, "llama.rope.dimension_count");
    BAD("llama.rope.freq_base", 0, 0xbf800000u, 4, NA_ERR_RANGE, "theta");   /* -1.0f */
    BAD("general.architecture", 8 + 4, 'b', 1, NA_ERR_UNSUPPORTED, "general.architecture");
    BAD("general.architecture", 8 + 4, 'b', 1, NA_ERR_UNSUPPORTED, "llama, qwen2, qwen3");
    BAD("blk.1.ffn_up.weight", 0, 0, 0, NA_ERR_FORMAT, "blk.1.ffn_up.weight");     /* renamed */
    BAD("blk.0.attn_q.weight", 0, 32, 8, NA_ERR_FORMAT, "blk.0.attn_q.weight");    /* ne[0] */
    BAD("blk.0.attn_q.weight", 16, 9, 4, NA_ERR_UNSUPPORTED, "q8_1");             /* type */
    BAD("blk.0.attn_q.weight", 16, 12, 4, NA_ERR_FORMAT, "q4_k block");       /* 64 % 256 */
    BAD("output_norm.weight", 8, 2, 4, NA_ERR_UNSUPPORTED, "q4_0 vectors (norms, biases)"); /* wrong tensor */
    BAD("output_norm.weight", 8, 9, 4, NA_ERR_UNSUPPORTED, "output_norm.weight"); /* q8_1 */
#undef BAD
    check_mutations(bad, raw, n);
    free(raw);
}

int main(void)
{
    char dir[512], path[600];
    layout_t L;
    buf_t b;

    if (na_test_tmpdir(dir, sizeof(dir)) != 0)
        NA_SKIP("no temporary directory");
    snprintf(path, sizeof(path), "%s/t.gguf", dir);
    b = build(&L);
    check_good(path, &b, &L);
    check_corrupt(path, &b, &L);
    check_model(dir);
    check_arch_models(dir);
    check_norm_conversion(dir);
    free(b.b);
    na_test_rmtree(dir);
    return na_test_finish();
}
