/* tests/fuzz/fuzz_files.c — the shared driver of the file-loader fuzz targets
 * (see fuzz_files.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/genmodel.h"
#include "common/gguf.h"
#include "common/model.h"
#include "common/tokenizer.h"
#include "tests/fuzz/fuzz_files.h"
#include "tests/testutil.h"

static unsigned long fuzz_models, fuzz_toks;  /* models / tokenizers that loaded */
static char fuzz_dir[1024], fuzz_path[1200];

static void fuzz_cleanup(void)
{
    if (fuzz_dir[0])
        na_test_rmtree(fuzz_dir);
}

/* The temporary directory (made on first use): its path, or NULL. */
static const char *fuzz_tmpdir(void)
{
    if (fuzz_dir[0] == '\0') {
        if (na_test_tmpdir(fuzz_dir, sizeof(fuzz_dir)) != 0) {
            fuzz_dir[0] = '\0';
            return NULL;
        }
        snprintf(fuzz_path, sizeof(fuzz_path), "%s/input", fuzz_dir);
        atexit(fuzz_cleanup);
    }
    return fuzz_dir;
}

const char *fuzz_file_write(const uint8_t *data, size_t size)
{
    if (fuzz_tmpdir() == NULL || na_test_write_file(fuzz_path, data, size) != 0)
        return NULL;
    return fuzz_path;
}

int fuzz_loaded(const char *what, na_status_t st, const char *path, const void *out)
{
    if (st == NA_OK)
        return 1;
    fuzz_expect(st != NA_ERR_INTERNAL && st != NA_ERR_NOMEM, "%s: %s: %s", what,
                na_status_string(st), na_errmsg());
    fuzz_expect(strstr(na_errmsg(), path) != NULL, "%s: message does not name %s: %s", what,
                path, na_errmsg());
    fuzz_expect(out == NULL, "%s set its output on failure", what);
    return 0;
}

unsigned fuzz_touch(const void *p, size_t n)
{
    const volatile uint8_t *b = p;
    unsigned sum = 0;
    size_t i;

    for (i = 0; i < n; i++)
        sum = sum * 31u + b[i];
    return sum;
}

void fuzz_use_tokenizer(na_tokenizer_t *tok)
{
    static const char *const texts[] = {
        "", " ", "Hello, world!", "the  quick brown fox\n\t", "\xe2\x96\x81 \xff\xfe\xc3(",
        "<0x41><s></s><unk>", "\xf0\x9f\x98\x80 caf\xc3\xa9",
        "<|im_start|>x<think>I'M 12345\r\n\n  \xe4\xbd\xa0\xe5\xa5\xbd!!", "<|<|im_start|",
    };
    int n_vocab = na_tokenizer_vocab_size(tok), toks[64], i;
    size_t j, n, len;
    char buf[512];

    fuzz_toks++;
    fuzz_expect(n_vocab > 0, "tokenizer: vocab_size %d", n_vocab);
    for (i = 0; i < n_vocab; i++) {
        const char *p = na_tokenizer_piece(tok, i), *d = na_tokenizer_decode_len(tok, 1, i, &len);
        fuzz_expect(p != NULL && d != NULL, "tokenizer: token %d has no piece", i);
        if (p != NULL)
            (void)fuzz_touch(p, strlen(p) + 1);
        if (d != NULL)
            (void)fuzz_touch(d, len);
        (void)na_tokenizer_score(tok, i);
    }
    for (j = 0; j < 2 * sizeof(texts) / sizeof(texts[0]); j++) {
        const char *text = texts[j / 2];
        na_status_t st = (j & 1) ? na_tokenizer_encode_ex(tok, text, strlen(text),
                                                          NA_TOK_ADD_BOS | NA_TOK_PARSE_SPECIAL,
                                                          NULL, 0, toks, 64, &n)
                                 : na_tokenizer_encode(tok, text, 1, 1, toks, 64, &n);
        if (!fuzz_expect(st == NA_OK, "tokenizer: encode '%s': %s: %s", text,
                         na_status_string(st), na_errmsg()))
            continue;
        for (i = 0; (size_t)i < n; i++)
            fuzz_expect(toks[i] >= 0 && toks[i] < n_vocab, "tokenizer: encode gave %d", toks[i]);
        st = na_tokenizer_decode_all(tok, toks, n, buf, sizeof(buf), &len);
        fuzz_expect(st == NA_OK || st == NA_ERR_NOSPACE, "tokenizer: decode_all: %s",
                    na_status_string(st));
        (void)fuzz_touch(buf, len);
    }
    na_tokenizer_destroy(tok);
}

/* Build the tokenizer of g when it has a vocabulary, and use it. */
void fuzz_use_gguf_tokenizer(const na_gguf_t *g)
{
    na_tokenizer_t *tok = NULL;
    na_status_t st;

    if (na_gguf_find(g, "tokenizer.ggml.tokens") == NULL)
        return;
    st = na_tokenizer_create_gguf(g, &tok);
    if (fuzz_loaded("na_tokenizer_create_gguf", st, g->path, tok))
        fuzz_use_tokenizer(tok);
}

/* Check tensor t of m has the shape the compute code expects and lies inside
 * the map when it points into it (a mapped file's last page is padded: past
 * its end is no fault), then read all of it. */
static void use_tensor(const na_model_t *m, const na_tensor_t *t, const char *name, int rows,
                       int cols)
{
    size_t bytes = na_dtype_bytes(t->dtype, (size_t)t->rows * (size_t)t->cols);
    const uint8_t *p = t->data, *map = m->map;

    fuzz_expect(t->rows == rows && t->cols == cols, "%s: %s is %dx%d, expected %dx%d", m->path,
                name, t->rows, t->cols, rows, cols);
    if (p >= map && p < map + m->map_size)
        fuzz_expect(bytes <= m->map_size - (size_t)(p - map), "%s: %s (%zu bytes at %zu) runs "
                    "past the end (%zu)", m->path, name, bytes, (size_t)(p - map), m->map_size);
    (void)fuzz_touch(p, bytes);
}

/* Read every weight of m. */
static void use_model(const na_model_t *m)
{
    const na_model_config_t *c = &m->cfg;
    int q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim, l;

    fuzz_models++;
    use_tensor(m, &m->tok_embd, "tok_embd", c->vocab_size, c->dim);
    use_tensor(m, &m->out_norm, "out_norm", 1, c->dim);
    use_tensor(m, &m->output, "output", c->vocab_size, c->dim);
    for (l = 0; l < c->n_layers; l++) {
        const na_layer_weights_t *w = &m->layers[l];
        use_tensor(m, &w->attn_norm, "attn_norm", 1, c->dim);
        use_tensor(m, &w->wq, "wq", q, c->dim);
        use_tensor(m, &w->wk, "wk", kv, c->dim);
        use_tensor(m, &w->wv, "wv", kv, c->dim);
        use_tensor(m, &w->wo, "wo", c->dim, q);
        use_tensor(m, &w->ffn_norm, "ffn_norm", 1, c->dim);
        use_tensor(m, &w->w1, "w1", c->hidden_dim, c->dim);
        use_tensor(m, &w->w2, "w2", c->dim, c->hidden_dim);
        use_tensor(m, &w->w3, "w3", c->hidden_dim, c->dim);
        /* the architectures' optional vectors, where the file has them */
        if (na_tensor_present(&w->bq))
            use_tensor(m, &w->bq, "bq", 1, q);
        if (na_tensor_present(&w->bk))
            use_tensor(m, &w->bk, "bk", 1, kv);
        if (na_tensor_present(&w->bv))
            use_tensor(m, &w->bv, "bv", 1, kv);
        if (na_tensor_present(&w->bo))
            use_tensor(m, &w->bo, "bo", 1, c->dim);
        if (na_tensor_present(&w->q_norm))
            use_tensor(m, &w->q_norm, "q_norm", 1, c->head_dim);
        if (na_tensor_present(&w->k_norm))
            use_tensor(m, &w->k_norm, "k_norm", 1, c->head_dim);
    }
    if (na_tensor_present(&m->rope_freqs))
        use_tensor(m, &m->rope_freqs, "rope_freqs", 1, c->rope_dims / 2);
    fuzz_expect(c->rope_dims >= 2 && c->rope_dims <= c->head_dim && c->rope_dims % 2 == 0 &&
                c->rope_freq_scale > 0.0f && c->yarn_attn_factor > 0.0f && c->yarn_orig_ctx >= 1,
                "%s: a loaded RoPE config is out of bounds (dims %d of %d)", m->path,
                c->rope_dims, c->head_dim);
    (void)na_model_param_count(m);
    if (m->gguf != NULL)
        fuzz_use_gguf_tokenizer(m->gguf);
}

void fuzz_open_model(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file_write(data, size);
    na_model_t *m = NULL;
    na_status_t st;

    if (path == NULL)
        return;
    st = na_model_open(path, &m);
    if (fuzz_loaded("na_model_open", st, path, m)) {
        use_model(m);
        na_model_destroy(m);
    }
}

int fuzz_done(void)
{
    return fuzz_trap_if(fuzz_unexpected());
}

#ifndef NA_LIBFUZZER

typedef struct {
    uint8_t *data;
    size_t   len;
} fuzz_seed_t;

/* A position for an edit: in the first `hot` bytes three times out of four. */
static size_t fuzz_pos(na_rng_t *r, size_t len, size_t hot)
{
    if (len == 0)
        return 0;
    if (hot < len && na_rng_u64(r) % 4 != 0)
        len = hot;
    return (size_t)(na_rng_u64(r) % len);
}

/* Apply 1..4 random edits to buf (len bytes, capacity cap); the new length. */
static size_t fuzz_mutate(na_rng_t *r, uint8_t *buf, size_t len, size_t cap, size_t hot,
                          const fuzz_seed_t *other)
{
    static const uint64_t values[] = {
        0, 1, 2, 3, 4, 7, 8, 31, 32, 33, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0x8000, 0xffff,
        0x10000, 259, 4096, 65536, 1048576, 1048577, 0x7fffffffull, 0x80000000ull,
        0xffffffffull, 0x100000000ull, 0x7fffffffffffffffull, UINT64_MAX,
    };
    int k, n = 1 + (int)(na_rng_u64(r) % 4);

    for (k = 0; k < n; k++) {
        uint64_t op = na_rng_u64(r) % 9;
        size_t at = fuzz_pos(r, len, hot), cnt, i;

        if (op == 0 && len) {                                  /* flip a bit */
            buf[at] ^= (uint8_t)(1u << (na_rng_u64(r) % 8));
        } else if (op <= 2 && len) {                           /* interesting field value */
            int w = 1 << (na_rng_u64(r) % 4), b;
            uint64_t v = values[na_rng_u64(r) % (sizeof(values) / sizeof(values[0]))];
            if (na_rng_u64(r) & 1)
                v = (uint64_t)0 - v;
            for (b = 0; b < w && at + (size_t)b < len; b++)
                buf[at + (size_t)b] = (uint8_t)(v >> (8 * b));
        } else if (op == 3 && len) {                           /* random byte */
            buf[at] = (uint8_t)na_rng_u64(r);
        } else if (op == 4) {                                  /* truncate */
            len = na_rng_u64(r) & 1 ? at : (size_t)(na_rng_u64(r) % (len + 1));
        } else if (op == 5 && len < cap) {                     /* insert bytes */
            cnt = 1 + (size_t)(na_rng_u64(r) % 16);
            if (cnt > cap - len)
                cnt = cap - len;
            memmove(buf + at + cnt, buf + at, len - at);
            for (i = 0; i < cnt; i++)
                buf[at + i] = (uint8_t)(na_rng_u64(r) % 3 ? 0 : na_rng_u64(r));
            len += cnt;
        } else if (op == 6 && len) {                           /* delete bytes */
            cnt = 1 + (size_t)(na_rng_u64(r) % 16);
            if (cnt > len - at)
                cnt = len - at;
            memmove(buf + at, buf + at + cnt, len - at - cnt);
            len -= cnt;
        } else if (op == 7 && len < cap) {                     /* extend */
            cnt = 1 + (size_t)(na_rng_u64(r) % 256);
            if (cnt > cap - len)
                cnt = cap - len;
            memset(buf + len, 0, cnt);
            len += cnt;
        } else if (op == 8 && other->len && len) {             /* splice another seed */
            size_t from = at < other->len ? at : (size_t)(na_rng_u64(r) % other->len);
            cnt = 1 + (size_t)(na_rng_u64(r) % 64);
            if (cnt > other->len - from)
                cnt = other->len - from;
            if (cnt > len - at)
                cnt = len - at;
            memcpy(buf + at, other->data + from, cnt);
        }
    }
    return len;
}

int fuzz_genmodel(const char *dir, const char *name, int dim, int vocab, na_dtype_t dtype,
                  int tied, int gguf)
{
    char prefix[2048];
    na_genmodel_opts_t o;

    na_genmodel_shape(&o, dim, dim == 8 ? 16 : dim, 1, 2, 1, vocab, 8);
    o.dtype = dtype;
    o.shared_classifier = tied;
    o.write_llama2c = !gguf;
    o.write_gguf = gguf;
    o.seed = (uint64_t)dim * 1000u + (uint64_t)vocab + (uint64_t)dtype;
    snprintf(prefix, sizeof(prefix), "%s/%s", dir, name);
    return na_genmodel_write(prefix, &o) == NA_OK ? 0 : -1;
}

/* Read the seed files; copy them to $NA_FUZZ_CORPUS_OUT if set. Their count. */
static int fuzz_read_seeds(const fuzz_files_target_t *t, const char *dir, fuzz_seed_t *s,
                           int max)
{
    const char *out = getenv("NA_FUZZ_CORPUS_OUT");
    char path[2048];
    int n = 0;

    for (; t->seeds[n] != NULL && n < max; n++) {
        snprintf(path, sizeof(path), "%s/%s", dir, t->seeds[n]);
        s[n].data = (uint8_t *)na_test_read_file(path, &s[n].len);
        if (s[n].data == NULL) {
            fprintf(stderr, "%s: cannot read seed %s\n", t->name, path);
            return -1;
        }
        if (out != NULL && out[0] != '\0') {
            snprintf(path, sizeof(path), "%s/%s", out, t->seeds[n]);
            if (na_test_write_file(path, s[n].data, s[n].len) != 0)
                fprintf(stderr, "%s: cannot write %s\n", t->name, path);
        }
    }
    return n;
}

int fuzz_files_main(const fuzz_files_target_t *t)
{
    enum { MAX_SEEDS = 16 };
    uint64_t iters = fuzz_env_u64("NA_FUZZ_ITERS", (uint64_t)t->iters);
    uint64_t seed = fuzz_env_u64("NA_FUZZ_SEED", 1), it;
    fuzz_seed_t seeds[MAX_SEEDS];
    size_t cap = 0, maxlen = 0;
    uint8_t *work;
    na_rng_t r;
    int n, i;

    if (fuzz_tmpdir() == NULL || t->make_seeds(fuzz_dir) != 0) {
        fprintf(stderr, "%s: cannot make the seed files: %s\n", t->name, na_errmsg());
        return 1;
    }
    n = fuzz_read_seeds(t, fuzz_dir, seeds, MAX_SEEDS);
    if (n <= 0)
        return 1;
    for (i = 0; i < n; i++) {
        maxlen = seeds[i].len > maxlen ? seeds[i].len : maxlen;
        LLVMFuzzerTestOneInput(seeds[i].data, seeds[i].len);     /* the valid seeds */
    }
    fuzz_expect(fuzz_unexpected() == 0, "%s: a valid seed was refused", t->name);
    cap = 2 * maxlen + 4096;
    work = malloc(cap);
    if (work == NULL)
        return 1;
    na_rng_seed(&r, seed);
    for (it = 0; it < iters; it++) {
        const fuzz_seed_t *c = &seeds[na_rng_u64(&r) % (unsigned)n];
        const fuzz_seed_t *o = &seeds[na_rng_u64(&r) % (unsigned)n];
        size_t len = c->len;

        memcpy(work, c->data, len);
        len = fuzz_mutate(&r, work, len, cap, t->hot, o);
        LLVMFuzzerTestOneInput(work, len);
    }
    free(work);
    for (i = 0; i < n; i++)
        free(seeds[i].data);
    printf("%s: %llu mutants of %d seed files (seed %llu): %lu models and %lu tokenizers "
           "loaded, %lu unexpected results\n", t->name, (unsigned long long)iters, n,
           (unsigned long long)seed, fuzz_models, fuzz_toks, fuzz_unexpected());
    return fuzz_unexpected() ? 1 : 0;
}

#endif /* NA_LIBFUZZER */
