/* tests/unit/test_genmodel.c — common/genmodel.c (+ genvocab.c) and the
 * gen-model command: the llama2.c and GGUF files of one generation hold the
 * same weights (exactly for f32, within dtype tolerance for f16/bf16/q8_0),
 * the same tokenizer, are deterministic in the seed, weights have the
 * documented scale, bad shapes are refused, and the CLI works; --vocab-from
 * copies a BPE vocabulary's tokenizer.* keys as they are (a vocabulary the
 * test writes: tests/testvocab.c) and refuses files without one. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/genmodel.h"
#include "common/gguf.h"
#include "common/model.h"
#include "common/tokenizer.h"
#include "kernels/ref/ref.h"
#include "tests/testutil.h"

/* Row r of a tensor, dequantized to f32. */
static void row_f32(const na_tensor_t *t, int r, float *out)
{
    size_t c, cols = (size_t)t->cols;
    const uint8_t *base = t->data;
    for (c = 0; c < cols; c++) {
        uint16_t h;
        switch (t->dtype) {
        case NA_DTYPE_F32:
            memcpy(&out[c], base + ((size_t)r * cols + c) * 4, 4);
            break;
        case NA_DTYPE_F16:
            memcpy(&h, base + ((size_t)r * cols + c) * 2, 2);
            out[c] = na_f16_to_f32(h);
            break;
        case NA_DTYPE_BF16:
            memcpy(&h, base + ((size_t)r * cols + c) * 2, 2);
            out[c] = na_bf16_to_f32(h);
            break;
        default: {
            const uint8_t *blk = base + ((size_t)r * cols / 32 + c / 32) * NA_Q8_0_BLOCK_SIZE;
            memcpy(&h, blk, 2);
            out[c] = na_f16_to_f32(h) * (float)(int8_t)blk[2 + c % 32];
        }
        }
    }
}

/* Compare tensor a (llama2.c, f32) with b (GGUF, dtype): same shape, values
 * equal (f32) or within the dtype's rounding. */
static void cmp_tensor(const char *what, int layer, const na_tensor_t *a, const na_tensor_t *b)
{
    float *x = malloc((size_t)a->cols * 4), *y = malloc((size_t)a->cols * 4);
    double worst = 0.0;
    int r, c;

    NA_CHECK_MSG(a->rows == b->rows && a->cols == b->cols, "%s[%d]: shape", what, layer);
    if (a->rows != b->rows || a->cols != b->cols)
        goto out;
    for (r = 0; r < a->rows; r++) {
        row_f32(a, r, x);
        row_f32(b, r, y);
        for (c = 0; c < a->cols; c++) {
            double tol, err = fabs((double)x[c] - (double)y[c]);
            switch (b->dtype) {
            case NA_DTYPE_F32:  tol = 0.0; break;
            case NA_DTYPE_F16:  tol = fabs(x[c]) * 4.9e-4 + 6e-8; break;
            case NA_DTYPE_BF16: tol = fabs(x[c]) * 3.91e-3; break;
            default: {                 /* q8_0: half a step of the block scale */
                float amax = 0.0f;
                int k, b0 = c / 32 * 32;
                for (k = b0; k < b0 + 32; k++)
                    amax = fmaxf(amax, fabsf(x[k]));
                tol = amax / 127.0 * 0.5 * 1.01 + amax * 1e-3;
            }
            }
            if (err > tol && err - tol > worst)
                worst = err - tol;
        }
    }
    NA_CHECK_MSG(worst == 0.0, "%s[%d] (%s): exceeds tolerance by %g", what, layer,
                 na_dtype_name(b->dtype), worst);
out:
    free(x);
    free(y);
}

static void cmp_models(const na_model_t *a, const na_model_t *b)
{
    int l;
    NA_CHECK(memcmp(&a->cfg, &b->cfg, sizeof(a->cfg)) == 0);
    if (memcmp(&a->cfg, &b->cfg, sizeof(a->cfg)) != 0)
        return;
    cmp_tensor("tok_embd", 0, &a->tok_embd, &b->tok_embd);
    cmp_tensor("output", 0, &a->output, &b->output);
    cmp_tensor("out_norm", 0, &a->out_norm, &b->out_norm);
    for (l = 0; l < a->cfg.n_layers; l++) {
        const na_layer_weights_t *x = &a->layers[l], *y = &b->layers[l];
        cmp_tensor("attn_norm", l, &x->attn_norm, &y->attn_norm);
        cmp_tensor("wq", l, &x->wq, &y->wq);
        cmp_tensor("wk", l, &x->wk, &y->wk);
        cmp_tensor("wv", l, &x->wv, &y->wv);
        cmp_tensor("wo", l, &x->wo, &y->wo);
        cmp_tensor("ffn_norm", l, &x->ffn_norm, &y->ffn_norm);
        cmp_tensor("w1", l, &x->w1, &y->w1);
        cmp_tensor("w2", l, &x->w2, &y->w2);
        cmp_tensor("w3", l, &x->w3, &y->w3);
        NA_CHECK(y->attn_norm.dtype == NA_DTYPE_F32 && y->ffn_norm.dtype == NA_DTYPE_F32);
    }
}

/* Both tokenizers hold the same vocabulary and round-trip text. */
static void cmp_tokenizers(const char *tokbin, const na_model_t *gm, int vocab)
{
    static const char *const texts[] = {
        "Once upon a time, there was a little girl named Lily.",
        "The little dog wanted to go for a walk.  ",
        "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x99\x82 \x01\x7f\xff",
        "",
    };
    na_tokenizer_t *a = NULL, *b = NULL;
    size_t i;
    int id;

    NA_CHECK_OK(na_tokenizer_create_llama2c(tokbin, vocab, &a));
    NA_CHECK_OK(na_tokenizer_create_gguf(gm->gguf, &b));
    if (a == NULL || b == NULL)
        goto out;
    NA_CHECK(na_tokenizer_vocab_size(a) == vocab && na_tokenizer_vocab_size(b) == vocab);
    for (id = 0; id < vocab; id++) {
        NA_CHECK(strcmp(na_tokenizer_piece(a, id), na_tokenizer_piece(b, id)) == 0);
        NA_CHECK(na_tokenizer_score(a, id) == na_tokenizer_score(b, id));
    }
    for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        int ta[128], tb[128];
        size_t na = 0, nb = 0, ol = 0;
        char out[256];
        NA_CHECK_OK(na_tokenizer_encode(a, texts[i], 1, 0, ta, 128, &na));
        NA_CHECK_OK(na_tokenizer_encode(b, texts[i], 1, 0, tb, 128, &nb));
        NA_CHECK(na == nb && memcmp(ta, tb, na * sizeof(int)) == 0);
        NA_CHECK_OK(na_tokenizer_decode_all(b, tb, nb, out, sizeof(out), &ol));
        NA_CHECK_MSG(ol == strlen(texts[i]) && memcmp(out, texts[i], ol) == 0,
                     "round trip of '%s' gave '%s'", texts[i], out);
        if (i == 0)   /* merges learnt from the built-in text compress it */
            NA_CHECK_MSG(na < strlen(texts[i]) * 2 / 3, "%zu tokens for %zu bytes", na,
                         strlen(texts[i]));
    }
out:
    na_tokenizer_destroy(a);
    na_tokenizer_destroy(b);
}

static void check_formats(const char *dir, na_dtype_t dt, int untied)
{
    na_genmodel_opts_t o;
    char prefix[600], p1[640], p2[640], p3[640];
    na_model_t *a = NULL, *b = NULL;

    /* hidden 160: q8_0 needs multiples of 32 */
    na_genmodel_shape(&o, 64, 160, 2, 4, 2, 512 + 32 * (int)dt, 64);
    o.write_gguf = 1;
    o.dtype = dt;
    o.seed = 42 + (uint64_t)dt;
    o.shared_classifier = !untied;
    snprintf(prefix, sizeof(prefix), "%s/m_%s_%d", dir, na_dtype_name(dt), untied);
    NA_CHECK_OK(na_genmodel_write(prefix, &o));
    snprintf(p1, sizeof(p1), "%s.bin", prefix);
    snprintf(p2, sizeof(p2), "%s.gguf", prefix);
    snprintf(p3, sizeof(p3), "%s.tok.bin", prefix);
    NA_CHECK_OK(na_model_open(p1, &a));
    NA_CHECK_OK(na_model_open(p2, &b));
    if (a != NULL && b != NULL) {
        NA_CHECK(a->cfg.shared_classifier == !untied && b->tok_embd.dtype == dt);
        cmp_models(a, b);
        cmp_tokenizers(p3, b, o.vocab_size);
    }
    na_model_destroy(a);
    na_model_destroy(b);
}

static int files_equal(const char *x, const char *y)
{
    FILE *a = fopen(x, "rb"), *b = fopen(y, "rb");
    int ca, cb, eq = a && b;
    while (eq) {
        ca = fgetc(a);
        cb = fgetc(b);
        eq = ca == cb;
        if (ca == EOF || cb == EOF)
            break;
    }
    if (a) fclose(a);
    if (b) fclose(b);
    return eq;
}

static void check_determinism_and_scale(const char *dir)
{
    na_genmodel_opts_t o;
    char p[3][600];
    const char *ext[3] = { ".bin", ".gguf", ".tok.bin" };
    char x[640], y[640];
    na_model_t *m = NULL;
    int k, s;

    na_genmodel_defaults(&o);
    o.dtype = NA_DTYPE_BF16;
    for (s = 0; s < 3; s++) {
        o.seed = s < 2 ? 5 : 6;
        snprintf(p[s], sizeof(p[s]), "%s/det%d", dir, s);
        NA_CHECK_OK(na_genmodel_write(p[s], &o));
    }
    for (k = 0; k < 3; k++) {
        snprintf(x, sizeof(x), "%s%s", p[0], ext[k]);
        snprintf(y, sizeof(y), "%s%s", p[1], ext[k]);
        NA_CHECK_MSG(files_equal(x, y), "same seed, different %s", ext[k]);
        snprintf(y, sizeof(y), "%s%s", p[2], ext[k]);
        NA_CHECK_MSG(!files_equal(x, y), "seeds 5 and 6 gave the same %s", ext[k]);
    }
    /* scale: matrices ~ N(0, 1/sqrt(cols)), norms ~ 1 */
    snprintf(x, sizeof(x), "%s.bin", p[0]);
    NA_CHECK_OK(na_model_open(x, &m));
    if (m != NULL) {
        const float *w = m->layers[1].w1.data, *g = m->layers[0].attn_norm.data;
        size_t n = (size_t)m->layers[1].w1.rows * (size_t)m->layers[1].w1.cols, i;
        double s1 = 0, s2 = 0, want = 1.0 / sqrt(64.0);
        for (i = 0; i < n; i++) {
            s1 += w[i];
            s2 += (double)w[i] * w[i];
        }
        NA_CHECK_MSG(fabs(s1 / (double)n) < 0.1 * want, "mean %g", s1 / (double)n);
        NA_CHECK_MSG(fabs(sqrt(s2 / (double)n) - want) < 0.05 * want, "std %g, want %g",
                     sqrt(s2 / (double)n), want);
        for (i = 0; i < 64; i++)
            NA_CHECK(g[i] > 0.7f && g[i] < 1.3f);
        na_model_destroy(m);
    }
}

static void check_bad_options(void)
{
    /* one field off its range (from the defaults) and a word the message must hold */
    static const struct {
        size_t      off;
        int         v;
        const char *needle;
    } bad[] = {
        { offsetof(na_genmodel_opts_t, n_heads), 7, "heads" },
        { offsetof(na_genmodel_opts_t, n_kv_heads), 3, "kv-heads" },
        { offsetof(na_genmodel_opts_t, dtype), NA_DTYPE_Q8_0, "q8_0" },      /* hidden 172 */
        { offsetof(na_genmodel_opts_t, vocab_size), 258, "vocab" },
        { offsetof(na_genmodel_opts_t, dim), 0, "dim" },
    };
    na_genmodel_opts_t o;
    size_t i;

    _Static_assert(sizeof(na_dtype_t) == sizeof(int), "dtype is set as an int");
    na_genmodel_defaults(&o);
    NA_CHECK_OK(na_genmodel_check(&o));
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        na_genmodel_defaults(&o);
        memcpy((char *)&o + bad[i].off, &bad[i].v, sizeof(int));
        NA_CHECK_MSG(na_genmodel_check(&o) == NA_ERR_INVALID && strstr(na_errmsg(), bad[i].needle),
                     "case %zu: %s", i, na_errmsg());
    }
    na_genmodel_defaults(&o);
    NA_CHECK(na_genmodel_write("/nonexistent-dir/x", &o) == NA_ERR_IO);
    NA_CHECK(strstr(na_errmsg(), "/nonexistent-dir/x.bin") != NULL);
}

/* Shapes whose files would not fit are refused before anything is written:
 * over the cap (NA_ERR_RANGE), over the free space of the target file
 * system (NA_ERR_NOSPACE, when that is below the cap). */
static void check_space_refusal(const char *dir)
{
    char prefix[600], path[700];
    na_genmodel_opts_t o;
    struct statvfs sv;
    int l;

    snprintf(prefix, sizeof(prefix), "%s/huge", dir);
    snprintf(path, sizeof(path), "%s.bin", prefix);
    na_genmodel_defaults(&o);
    o.dim = 65536;
    o.hidden_dim = 262144;
    o.n_layers = 1024;
    o.n_heads = o.n_kv_heads = 256;
    NA_CHECK_OK(na_genmodel_check(&o));
    NA_CHECK(na_genmodel_total_bytes(&o) > NA_GENMODEL_MAX_BYTES);
    NA_CHECK(na_genmodel_write(prefix, &o) == NA_ERR_RANGE);
    NA_CHECK(strstr(na_errmsg(), "cap") != NULL);
    NA_CHECK(access(path, F_OK) != 0);
    /* the default model fits and is counted at least at its real size */
    na_genmodel_defaults(&o);
    NA_CHECK_OK(na_genmodel_check_space(prefix, &o));
    /* just over the free space of the temporary directory's file system */
    if (statvfs(dir, &sv) != 0)
        return;
    o.dim = 4096;
    o.hidden_dim = 16384;
    o.n_heads = o.n_kv_heads = 32;
    for (l = 1; l <= 1024; l++) {
        o.n_layers = l;
        if (na_genmodel_total_bytes(&o) > (uint64_t)sv.f_bavail * sv.f_frsize)
            break;
    }
    if (l > 1024 || na_genmodel_total_bytes(&o) > NA_GENMODEL_MAX_BYTES)
        return;                         /* more free space than the cap */
    NA_CHECK(na_genmodel_write(prefix, &o) == NA_ERR_NOSPACE);
    NA_CHECK(strstr(na_errmsg(), "free") != NULL);
    NA_CHECK(access(path, F_OK) != 0);
}

/* Larger vocabularies: minimum size and a llama-sized one. */
static void check_vocab_sizes(const char *dir)
{
    static const int sizes[] = { 259, 32000 };
    size_t i;
    for (i = 0; i < 2; i++) {
        na_genmodel_opts_t o;
        char prefix[600], path[640];
        na_tokenizer_t *t = NULL;
        na_genmodel_defaults(&o);
        o.vocab_size = sizes[i];
        o.dim = 32;
        o.n_heads = 4;
        o.n_kv_heads = 4;
        o.n_layers = 1;
        o.write_gguf = 0;
        snprintf(prefix, sizeof(prefix), "%s/v%d", dir, sizes[i]);
        NA_CHECK_OK(na_genmodel_write(prefix, &o));
        snprintf(path, sizeof(path), "%s.tok.bin", prefix);
        NA_CHECK_OK(na_tokenizer_open(path, sizes[i], &t));
        if (t != NULL) {
            const char *s = "Tom and Sam built a tall tower of blocks.";
            int tok[64];
            size_t n = 0, ol = 0;
            char out[128];
            NA_CHECK_OK(na_tokenizer_encode(t, s, 1, 0, tok, 64, &n));
            NA_CHECK_OK(na_tokenizer_decode_all(t, tok, n, out, sizeof(out), &ol));
            NA_CHECK(strcmp(out, s) == 0);
            na_tokenizer_destroy(t);
        }
    }
}

/* Whether two metadata entries hold the same type and value. */
static int kv_same(const na_gguf_kv_t *a, const na_gguf_kv_t *b)
{
    uint64_t i;
    if (a->type != b->type)
        return 0;
    switch (a->type) {
    case NA_GGUF_STRING:
        return a->v.str.len == b->v.str.len && !memcmp(a->v.str.data, b->v.str.data, a->v.str.len);
    case NA_GGUF_ARRAY:
        if (a->v.arr.type != b->v.arr.type || a->v.arr.n != b->v.arr.n)
            return 0;
        for (i = 0; i < a->v.arr.n; i++) {
            if (a->v.arr.type == NA_GGUF_STRING
                ? a->v.arr.strs[i].len != b->v.arr.strs[i].len ||
                  memcmp(a->v.arr.strs[i].data, b->v.arr.strs[i].data, a->v.arr.strs[i].len)
                : na_gguf_arr_f64(a, i) != na_gguf_arr_f64(b, i))
                return 0;
        }
        return 1;
    case NA_GGUF_FLOAT32: case NA_GGUF_FLOAT64:
        return a->v.f64 == b->v.f64;
    default:
        return a->v.u64 == b->v.u64;
    }
}

/* gen-model --vocab-from: every tokenizer.* key of the source as it is, the
 * vocab size its token count, the same ids from both files' tokenizers; a
 * chat template given replaces the source's; files without a vocabulary and
 * the llama2.c format refused with messages naming the file and key. */
static void check_vocab_from(const char *dir)
{
    static const char *const texts[] = { "hi abc", "<|im_start|>bc aa", "\xc3\xa9 b ca" };
    char src[600], out[600], pre[600], bad[600];
    na_genmodel_opts_t o;
    na_gguf_t *a = NULL, *b = NULL;
    na_gguf_writer_t *w = NULL;
    na_tokenizer_t *ta = NULL, *tb = NULL;
    na_model_t *m = NULL;
    const na_gguf_kv_t *t;
    uint64_t i, n_tok = 0;
    size_t k;

    snprintf(src, sizeof(src), "%s/bpe.gguf", dir);
    snprintf(pre, sizeof(pre), "%s/vf", dir);
    snprintf(out, sizeof(out), "%s/vf.gguf", dir);
    NA_CHECK(na_test_bpe_vocab(src, "llama-bpe", NULL) == 0);
    na_genmodel_shape(&o, 64, 128, 2, 4, 2, 512, 128);
    na_genmodel_set_arch(&o, NA_GENMODEL_LLAMA3);
    NA_CHECK_OK(na_genmodel_vocab_from(src, &o));
    NA_CHECK(o.vocab_size == NA_TEST_BPE_N && o.write_gguf && !o.write_llama2c);
    o.chat_template = "{{ '<|im_start|>' }}";
    NA_CHECK_OK(na_genmodel_write(pre, &o));
    NA_CHECK_OK(na_gguf_open_head(src, &a));
    NA_CHECK_OK(na_gguf_open_head(out, &b));
    for (i = 0; a != NULL && b != NULL && i < a->n_kv; i++) {
        const na_gguf_kv_t *x = &a->kv[i], *y = na_gguf_find(b, x->key);
        if (strncmp(x->key, "tokenizer.", 10) != 0)
            continue;
        n_tok++;
        NA_CHECK_MSG(y != NULL && kv_same(x, y), "key %s differs or is missing", x->key);
    }
    NA_CHECK(n_tok == 7);       /* model, pre, tokens, types, merges, bos, eos */
    if (b != NULL) {
        na_gguf_str_t ct = { 0, NULL };
        NA_CHECK_OK(na_gguf_get_str(b, "tokenizer.chat_template", &ct));
        NA_CHECK(ct.len == strlen(o.chat_template) && !memcmp(ct.data, o.chat_template, ct.len));
        NA_CHECK(na_gguf_get_arr(b, "tokenizer.ggml.tokens", NA_GGUF_STRING, &t) == NA_OK &&
                 t->v.arr.n == NA_TEST_BPE_N);
    }
    na_gguf_destroy(a);
    na_gguf_destroy(b);
    NA_CHECK_OK(na_model_open(out, &m));
    if (m != NULL) {
        NA_CHECK(m->cfg.vocab_size == NA_TEST_BPE_N && m->cfg.dim == 64);
        na_model_destroy(m);
    }
    NA_CHECK_OK(na_tokenizer_open(src, 0, &ta));
    NA_CHECK_OK(na_tokenizer_open(out, 0, &tb));
    for (k = 0; ta != NULL && tb != NULL && k < sizeof(texts) / sizeof(texts[0]); k++) {
        int ia[64], ib[64];
        size_t na_ = 0, nb = 0;
        unsigned fl = NA_TOK_ADD_BOS | NA_TOK_PARSE_SPECIAL;
        NA_CHECK_OK(na_tokenizer_encode_ex(ta, texts[k], strlen(texts[k]), fl, NULL, 0, ia, 64, &na_));
        NA_CHECK_OK(na_tokenizer_encode_ex(tb, texts[k], strlen(texts[k]), fl, NULL, 0, ib, 64, &nb));
        NA_CHECK_MSG(na_ > 1 && na_ == nb && !memcmp(ia, ib, na_ * sizeof(int)),
                     "'%s': %zu ids from the source, %zu from the copy", texts[k], na_, nb);
    }
    NA_CHECK(tb == NULL || strcmp(na_tokenizer_kind(tb), na_tokenizer_kind(ta)) == 0);
    na_tokenizer_destroy(ta);
    na_tokenizer_destroy(tb);

    /* refusals: no file, no tokens, too few tokens, the llama2.c format */
    snprintf(bad, sizeof(bad), "%s/none.gguf", dir);
    NA_CHECK(na_genmodel_vocab_from(bad, &o) != NA_OK);
    NA_CHECK_MSG(strstr(na_errmsg(), "none.gguf") != NULL, "%s", na_errmsg());
    snprintf(bad, sizeof(bad), "%s/notok.gguf", dir);
    NA_CHECK_OK(na_gguf_writer_create(bad, &w));
    if (w != NULL) {
        static const char *const few[] = { "a", "b" };
        NA_CHECK_OK(na_gguf_writer_kv_str(w, "tokenizer.ggml.model", "gpt2"));
        NA_CHECK_OK(na_gguf_writer_finish(w));
        NA_CHECK(na_genmodel_vocab_from(bad, &o) == NA_ERR_NOT_FOUND);
        NA_CHECK_MSG(strstr(na_errmsg(), "tokenizer.ggml.tokens") != NULL &&
                     strstr(na_errmsg(), "notok.gguf") != NULL, "%s", na_errmsg());
        NA_CHECK_OK(na_gguf_writer_create(bad, &w));
        NA_CHECK_OK(na_gguf_writer_kv_str(w, "tokenizer.ggml.model", "gpt2"));
        NA_CHECK_OK(na_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", few, 2));
        NA_CHECK_OK(na_gguf_writer_finish(w));
        NA_CHECK(na_genmodel_vocab_from(bad, &o) == NA_ERR_INVALID);
        NA_CHECK_MSG(strstr(na_errmsg(), "has 2 entries") != NULL, "%s", na_errmsg());
    }
    na_genmodel_set_arch(&o, NA_GENMODEL_LLAMA);    /* llama2.c-able but for the vocabulary */
    NA_CHECK_OK(na_genmodel_vocab_from(src, &o));
    o.write_llama2c = 1;
    NA_CHECK(na_genmodel_write(pre, &o) == NA_ERR_INVALID);
    NA_CHECK_MSG(strstr(na_errmsg(), "GGUF file only") != NULL, "%s", na_errmsg());
}

static int run(const char *cmd)
{
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void check_cli(const char *dir)
{
    const char *bin = getenv("NA_BIN");
    char cmd[2048], path[640];
    na_model_t *m = NULL;

    if (bin == NULL || bin[0] == '\0' || access(bin, X_OK) != 0) {
        fprintf(stderr, "note: NA_BIN unset or not built, CLI not tested\n");
        return;
    }
    snprintf(cmd, sizeof(cmd), "'%s' gen-model --help > /dev/null", bin);
    NA_CHECK(run(cmd) == 0);
    snprintf(cmd, sizeof(cmd), "'%s' gen-model --out '%s/c' --bogus 2> /dev/null", bin, dir);
    NA_CHECK(run(cmd) == 2);
    snprintf(cmd, sizeof(cmd), "'%s' gen-model --out '%s/c' --dim 0 2> /dev/null", bin, dir);
    NA_CHECK(run(cmd) == 2);
    snprintf(cmd, sizeof(cmd), "'%s' gen-model 2> /dev/null", bin);
    NA_CHECK(run(cmd) == 2);
    snprintf(cmd, sizeof(cmd), "'%s' gen-model --out '%s/c' --dim 96 --hidden 256 --layers 3 "
             "--heads 6 --kv-heads 2 --vocab 400 --seq-len 128 --dtype q8_0 --seed 9 "
             "--format gguf --quiet", bin, dir);
    NA_CHECK(run(cmd) == 0);
    snprintf(path, sizeof(path), "%s/c.gguf", dir);
    NA_CHECK_OK(na_model_open(path, &m));
    if (m != NULL) {
        NA_CHECK(m->cfg.dim == 96 && m->cfg.hidden_dim == 256 && m->cfg.n_layers == 3);
        NA_CHECK(m->cfg.n_heads == 6 && m->cfg.n_kv_heads == 2 && m->cfg.vocab_size == 400);
        NA_CHECK(m->cfg.seq_len == 128 && m->layers[0].wq.dtype == NA_DTYPE_Q8_0);
        na_model_destroy(m);
    }
    snprintf(path, sizeof(path), "%s/c.bin", dir);
    NA_CHECK(na_model_open(path, &m) == NA_ERR_IO);     /* --format gguf only */
    /* --vocab-from (the vocabulary check_vocab_from wrote): GGUF only */
    snprintf(cmd, sizeof(cmd), "'%s' gen-model --out '%s/cv' --vocab-from '%s/bpe.gguf' --quiet",
             bin, dir, dir);
    NA_CHECK(run(cmd) == 0);
    snprintf(path, sizeof(path), "%s/cv.gguf", dir);
    NA_CHECK_OK(na_model_open(path, &m));
    if (m != NULL) {
        NA_CHECK(m->cfg.vocab_size == NA_TEST_BPE_N);
        na_model_destroy(m);
    }
    snprintf(cmd, sizeof(cmd), "'%s' gen-model --out '%s/cv' --vocab-from '%s/bpe.gguf' "
             "--format both 2> /dev/null", bin, dir, dir);
    NA_CHECK(run(cmd) == 2);
    snprintf(cmd, sizeof(cmd), "'%s' gen-model --out '%s/cv' --vocab-from '%s/nothing.gguf' "
             "2> /dev/null", bin, dir, dir);
    NA_CHECK(run(cmd) == 2);
}

/* The GGML block formats (common/quantize.c): each matrix in the type
 * gen-model gives it (--dtype q4_k_m: llama-quantize's rule; K-quants fall
 * back where the columns are not whole super-blocks), valid blocks whose
 * dequantised values (kernels/ref) are within the format's rounding of the
 * f32 weights of the llama2.c file: relative RMS error below 12% (4 bits),
 * 6% (5 bits), 3% (6 bits), 1% (8 bits); observed ~1/3 of these. */
static double rel_rms(const na_tensor_t *f, const na_tensor_t *q)
{
    float *x = malloc((size_t)f->cols * 4), *y = malloc((size_t)f->cols * 4);
    double e = 0.0, n = 0.0;
    int r, c;
    for (r = 0; r < f->rows; r++) {
        na_ref_dequant_row(f->dtype, (const uint8_t *)f->data + (size_t)r * f->cols * 4, x, f->cols);
        na_ref_dequant_row(q->dtype, (const uint8_t *)q->data +
                                     (size_t)r * na_dtype_bytes(q->dtype, (size_t)q->cols),
                           y, q->cols);
        for (c = 0; c < f->cols; c++) {
            e += ((double)x[c] - y[c]) * ((double)x[c] - y[c]);
            n += (double)x[c] * x[c];
        }
    }
    free(x);
    free(y);
    return n > 0.0 ? sqrt(e / n) : 0.0;
}

static double quant_bound(na_dtype_t t)
{
    switch (t) {
    case NA_DTYPE_Q4_0: case NA_DTYPE_Q4_1: case NA_DTYPE_Q4_K: return 0.12;
    case NA_DTYPE_Q5_0: case NA_DTYPE_Q5_1: case NA_DTYPE_Q5_K: return 0.06;
    case NA_DTYPE_Q6_K: return 0.03;
    case NA_DTYPE_Q8_0: return 0.01;
    default: return 0.002;
    }
}

static void check_quant_types(const char *dir)
{
    static const char *const names[] = { "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k",
                                         "q6_k", "q4_k_m" };
    size_t i;
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        na_genmodel_opts_t o;
        char prefix[600], p1[640], p2[640];
        na_model_t *a = NULL, *b = NULL;
        int l, k, mix;
        na_genmodel_shape(&o, 256, 512, 4, 4, 2, 300, 64);
        o.write_gguf = 1;
        o.shared_classifier = (int)i % 2;
        NA_CHECK(na_genmodel_parse_dtype(names[i], &o.dtype, &mix) >= 0);
        o.quant_mix = mix;
        if (i == 4)
            o.hidden_dim = 160;              /* ffn_down: 160 columns -> q4_k falls back to q5_0 */
        snprintf(prefix, sizeof(prefix), "%s/qt_%s", dir, names[i]);
        NA_CHECK_OK(na_genmodel_write(prefix, &o));
        snprintf(p1, sizeof(p1), "%s.bin", prefix);
        snprintf(p2, sizeof(p2), "%s.gguf", prefix);
        NA_CHECK_OK(na_model_open(p1, &a));
        NA_CHECK_OK(na_model_open(p2, &b));
        if (a != NULL && b != NULL) {
            NA_CHECK_OK(na_model_check_finite(b));
            for (l = 0; l < o.n_layers; l++) {
                const na_layer_weights_t *x = &a->layers[l], *y = &b->layers[l];
                const na_tensor_t *tf[7] = { &x->wq, &x->wk, &x->wv, &x->wo, &x->w1, &x->w2, &x->w3 };
                const na_tensor_t *tq[7] = { &y->wq, &y->wk, &y->wv, &y->wo, &y->w1, &y->w2, &y->w3 };
                for (k = 0; k < 7; k++) {
                    na_dtype_t want = o.dtype;
                    double e;
                    /* Q4_K_M: attn_v (k 2) and ffn_down (k 5) of layers 0..3 of 4:
                     * use_more_bits(i, 4) holds for i = 2 and 3 */
                    if (mix && (k == 2 || k == 5) && l >= 2)
                        want = NA_DTYPE_Q6_K;
                    if (i == 4 && k == 5)
                        want = NA_DTYPE_Q5_0;
                    NA_CHECK_MSG(tq[k]->dtype == want, "%s layer %d matrix %d: %s, want %s",
                                 names[i], l, k, na_dtype_name(tq[k]->dtype), na_dtype_name(want));
                    e = rel_rms(tf[k], tq[k]);
                    NA_CHECK_MSG(e < quant_bound(tq[k]->dtype), "%s layer %d matrix %d (%s): "
                                 "relative RMS error %g", names[i], l, k,
                                 na_dtype_name(tq[k]->dtype), e);
                    if (l == 0 && k == 0)
                        printf("%s: relative RMS error of wq %.4f\n", names[i], e);
                }
            }
            /* q4_k_m: Q6_K classifier, the token embedding when tied */
            NA_CHECK(b->output.dtype == (mix ? NA_DTYPE_Q6_K : o.dtype));
            NA_CHECK(b->tok_embd.dtype == (mix && o.shared_classifier ? NA_DTYPE_Q6_K : o.dtype));
            NA_CHECK(rel_rms(&a->tok_embd, &b->tok_embd) < quant_bound(b->tok_embd.dtype));
        }
        na_model_destroy(a);
        na_model_destroy(b);
    }
}

/* A non-finite f16 scale of a block format (Q6_K's d at the end of its
 * block, Q4_1's min, Q4_K's dmin) is found by na_model_check_finite. */
static void check_quant_nonfinite(const char *dir)
{
    static const struct { const char *name; na_dtype_t dt; size_t off; } c[] = {
        { "q6_k", NA_DTYPE_Q6_K, 208 }, { "q4_1", NA_DTYPE_Q4_1, 2 }, { "q4_k", NA_DTYPE_Q4_K, 2 },
        { "q5_0", NA_DTYPE_Q5_0, 0 },
    };
    size_t i;
    for (i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        na_genmodel_opts_t o;
        char prefix[600], path[640];
        na_model_t *m = NULL;
        size_t off = 0, n = 0;
        uint8_t *raw;
        na_genmodel_shape(&o, 256, 256, 1, 2, 1, 300, 256);
        o.write_gguf = 1;
        o.dtype = c[i].dt;
        o.write_llama2c = 0;
        snprintf(prefix, sizeof(prefix), "%s/nf_%s", dir, c[i].name);
        snprintf(path, sizeof(path), "%s.gguf", prefix);
        NA_CHECK_OK(na_genmodel_write(prefix, &o));
        NA_CHECK_OK(na_model_open(path, &m));
        if (m == NULL)
            continue;
        NA_CHECK_OK(na_model_check_finite(m));
        /* the second block of layer 0's wk */
        off = (size_t)((const uint8_t *)m->layers[0].wk.data - (const uint8_t *)m->map) +
              na_dtype_block_bytes(c[i].dt) + c[i].off;
        na_model_destroy(m);
        m = NULL;
        raw = (uint8_t *)na_test_read_file(path, &n);
        NA_CHECK(raw != NULL && off + 2 <= n);
        if (raw == NULL || off + 2 > n) {
            free(raw);
            continue;
        }
        raw[off] = 0x00;
        raw[off + 1] = 0x7e;                     /* f16 NaN */
        NA_CHECK(na_test_write_file(path, raw, n) == 0);
        free(raw);
        NA_CHECK_OK(na_model_open(path, &m));
        if (m != NULL) {
            NA_CHECK(na_model_check_finite(m) == NA_ERR_FORMAT);
            NA_CHECK_MSG(strstr(na_errmsg(), "wk of layer 0") != NULL &&
                         strstr(na_errmsg(), na_dtype_block(c[i].dt) == 256 ? "element 256" : "element 32"),
                         "%s: %s", c[i].name, na_errmsg());
            na_model_destroy(m);
        }
    }
}

int main(void)
{
    char dir[512];
    int dt;

    if (na_test_tmpdir(dir, sizeof(dir)) != 0)
        NA_SKIP("no temporary directory");
    for (dt = 0; dt <= NA_DTYPE_Q8_0; dt++)
        check_formats(dir, (na_dtype_t)dt, dt == NA_DTYPE_F16 || dt == NA_DTYPE_Q8_0);
    check_quant_types(dir);
    check_quant_nonfinite(dir);
    check_determinism_and_scale(dir);
    check_bad_options();
    check_space_refusal(dir);
    check_vocab_sizes(dir);
    check_vocab_from(dir);
    check_cli(dir);
    na_test_rmtree(dir);
    return na_test_finish();
}
