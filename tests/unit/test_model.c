/* tests/unit/test_model.c — common/model.c + common/llama2c.c: the shared
 * stories260K checkpoint loads with the documented shape and zero-copy
 * tensors; generated tied/untied checkpoints load; truncated files (every
 * header field, inside every tensor) and corrupted header fields are
 * rejected with NA_ERR_FORMAT/NA_ERR_RANGE and a message naming the file and
 * the field or tensor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/genmodel.h"
#include "common/model.h"
#include "tests/testutil.h"

static const char *const hdr_names[7] = {
    "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len",
};

/* Open path, expect failure with one of two statuses and all needles in the message. */
static void expect_reject(const char *path, na_status_t a, na_status_t b, const char *needle,
                          const char *what)
{
    na_model_t *m = NULL;
    na_status_t st = na_model_open(path, &m);
    NA_CHECK_MSG(st == a || st == b, "%s: status %d (%s)", what, st, na_errmsg());
    NA_CHECK_MSG(m == NULL || st == NA_OK, "%s: model returned on failure", what);
    NA_CHECK_MSG(strstr(na_errmsg(), path) != NULL, "%s: '%s' lacks the path", what, na_errmsg());
    NA_CHECK_MSG(needle == NULL || strstr(na_errmsg(), needle) != NULL,
                 "%s: '%s' lacks '%s'", what, na_errmsg(), needle);
    if (st == NA_OK)
        na_model_destroy(m);
}

static void check_stories(const char *path)
{
    na_model_t *m = NULL;
    const na_model_config_t *c;
    size_t len;
    char *raw = na_test_read_file(path, &len);
    float first;

    NA_CHECK_OK(na_model_open(path, &m));
    if (m == NULL || raw == NULL) {
        free(raw);
        return;
    }
    c = &m->cfg;
    NA_CHECK(m->format == NA_MODEL_FORMAT_LLAMA2C);
    NA_CHECK(c->dim == 64 && c->hidden_dim == 172 && c->n_layers == 5 && c->n_heads == 8);
    NA_CHECK(c->n_kv_heads == 4 && c->vocab_size == 512 && c->seq_len == 512);
    NA_CHECK(c->head_dim == 8 && c->shared_classifier == 1);
    NA_CHECK(c->rope_theta == 10000.0f && c->rms_eps == 1e-5f);
    NA_CHECK(m->output.data == m->tok_embd.data);
    NA_CHECK(m->tok_embd.rows == 512 && m->tok_embd.cols == 64);
    NA_CHECK(m->layers[0].wq.rows == 64 && m->layers[0].wq.cols == 64);
    NA_CHECK(m->layers[4].wk.rows == 32 && m->layers[4].wk.cols == 64);
    NA_CHECK(m->layers[2].wo.rows == 64 && m->layers[2].wo.cols == 64);
    NA_CHECK(m->layers[1].w1.rows == 172 && m->layers[1].w1.cols == 64);
    NA_CHECK(m->layers[1].w2.rows == 64 && m->layers[1].w2.cols == 172);
    NA_CHECK(m->layers[3].attn_norm.rows == 1 && m->layers[3].attn_norm.cols == 64);
    /* zero copy: tensors point into the map, and hold the file's bytes */
    NA_CHECK((const char *)m->tok_embd.data == (const char *)m->map + 28);
    memcpy(&first, raw + 28, 4);
    NA_CHECK(((const float *)m->tok_embd.data)[0] == first);
    /* wq of layer 1 starts after tok_embd, rms_att (5x64) and wq of layer 0 */
    NA_CHECK((const char *)m->layers[1].wq.data ==
             (const char *)m->map + 28 + 4 * (512 * 64 + 5 * 64 + 64 * 64));
    NA_CHECK((const char *)m->out_norm.data + 4 * (64 + 2 * 512 * 4) ==
             (const char *)m->map + m->map_size);
    NA_CHECK(na_model_param_count(m) == (size_t)(512 * 64 + 64 +
             5 * (2 * 64 + 64 * 64 * 2 + 2 * 64 * 32 + 3 * 64 * 172)));
    na_model_destroy(m);
    free(raw);
}

/* Truncate at every header field and inside every tensor. */
static void check_truncated(const char *src, const char *dir)
{
    /* stories260K layout: name, elements */
    static const struct { const char *name; long n; } t[] = {
        { "token_embedding", 512 * 64 }, { "rms_att_weight", 5 * 64 }, { "wq", 5 * 64 * 64 },
        { "wk", 5 * 32 * 64 }, { "wv", 5 * 32 * 64 }, { "wo", 5 * 64 * 64 },
        { "rms_ffn_weight", 5 * 64 }, { "w1", 5 * 172 * 64 }, { "w2", 5 * 64 * 172 },
        { "w3", 5 * 172 * 64 }, { "rms_final_weight", 64 }, { "freq_cis_real", 512 * 4 },
        { "freq_cis_imag", 512 * 4 },
    };
    char path[600];
    size_t len, i;
    char *raw = na_test_read_file(src, &len);
    long off = 28;

    snprintf(path, sizeof(path), "%s/cut.bin", dir);
    for (i = 0; i < 28; i += 2) {
        char what[64];
        (void)na_test_write_file(path, raw, i);
        snprintf(what, sizeof(what), "cut at %zu", i);
        expect_reject(path, NA_ERR_FORMAT, NA_ERR_FORMAT, i == 0 ? "dim" : hdr_names[i / 4], what);
    }
    for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        long cuts[3] = { off + 1, off + t[i].n * 2 + 3, off + t[i].n * 4 - 1 };
        int k;
        char needle[64];
        snprintf(needle, sizeof(needle), "'%s'", t[i].name);
        for (k = 0; k < 3; k++) {
            (void)na_test_write_file(path, raw, (size_t)cuts[k]);
            expect_reject(path, NA_ERR_FORMAT, NA_ERR_FORMAT, needle, t[i].name);
        }
        off += t[i].n * 4;
    }
    NA_CHECK(off == (long)len);
    /* one extra byte */
    raw = realloc(raw, len + 4);
    (void)na_test_write_file(path, raw, len + 1);
    expect_reject(path, NA_ERR_FORMAT, NA_ERR_FORMAT, "trailing", "one extra byte");
    free(raw);
}

/* Corrupt each header field: zero, negative, huge, non-dividing. */
static void check_corrupt_header(const char *src, const char *dir)
{
    static const int32_t bad[] = { 0, -1, -7, 1 << 30, 0x7fffffff, (int32_t)0x80000000 };
    char path[600], what[96];
    size_t len, i, f;
    char *raw = na_test_read_file(src, &len);

    snprintf(path, sizeof(path), "%s/bad.bin", dir);
    for (f = 0; f < 7; f++) {
        for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            char *copy = malloc(len);
            int32_t v = bad[i];
            memcpy(copy, raw, len);
            memcpy(copy + 4 * f, &v, 4);
            (void)na_test_write_file(path, copy, len);
            snprintf(what, sizeof(what), "field %s = %d", hdr_names[f], v);
            /* a negative vocab_size means "separate classifier": then wcls is missing */
            expect_reject(path, NA_ERR_RANGE, NA_ERR_FORMAT,
                          f == 5 && v == -7 ? "wcls" : hdr_names[f], what);
            free(copy);
        }
    }
    {
        struct { int field; int32_t v; const char *needle; } cases[] = {
            { 3, 7, "n_heads" },       /* does not divide dim 64 */
            { 4, 3, "n_kv_heads" },    /* does not divide n_heads 8 */
            { 4, 16, "n_kv_heads" },   /* more kv heads than heads */
            { 3, 64, "head_dim" },     /* head_dim 1: odd */
            { 0, 4096, "'token_embedding'" }, /* in bounds, but runs past the end */
            { 2, 1024, "'wq'" },
            { 6, 1 << 20, "'freq_cis_real'" },
            { 5, 511, "trailing" },    /* vocab slightly off: file too long */
            { 5, 513, "'freq_cis_imag'" }, /* vocab slightly off: file too short */
        };
        for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            char *copy = malloc(len);
            memcpy(copy, raw, len);
            memcpy(copy + 4 * cases[i].field, &cases[i].v, 4);
            (void)na_test_write_file(path, copy, len);
            snprintf(what, sizeof(what), "case %zu", i);
            expect_reject(path, NA_ERR_FORMAT, NA_ERR_RANGE, cases[i].needle, what);
            free(copy);
        }
    }
    free(raw);
    expect_reject("/nonexistent/model.bin", NA_ERR_IO, NA_ERR_IO, "cannot open", "missing");
    (void)na_test_write_file(path, "ak42\1\0\0\0", 8);
    expect_reject(path, NA_ERR_UNSUPPORTED, NA_ERR_UNSUPPORTED, "magic", "v1 export");
    (void)na_test_write_file(path, "", 0);
    expect_reject(path, NA_ERR_FORMAT, NA_ERR_FORMAT, "empty", "empty file");
    expect_reject(dir, NA_ERR_FORMAT, NA_ERR_IO, NULL, "a directory");
}

/* Generated checkpoints: tied and untied. */
static void check_generated(const char *dir)
{
    na_genmodel_opts_t o;
    char name[16];
    na_model_t *m = NULL;
    int untied;

    for (untied = 0; untied <= 1; untied++) {
        na_genmodel_shape(&o, 64, 172, 3, 8, 2, 512, 256);
        o.shared_classifier = !untied;
        snprintf(name, sizeof(name), "gen%d", untied);
        m = na_test_genmodel_open(dir, name, &o, "bin");
        if (m == NULL)
            continue;
        NA_CHECK(m->cfg.n_layers == 3 && m->cfg.n_kv_heads == 2 && m->cfg.vocab_size == 512);
        NA_CHECK(m->cfg.shared_classifier == !untied);
        NA_CHECK((m->output.data == m->tok_embd.data) == !untied);
        NA_CHECK(m->output.rows == 512 && m->output.cols == 64);
        NA_CHECK(((const float *)m->layers[0].attn_norm.data)[0] > 0.5f);
        na_model_destroy(m);
        m = NULL;
    }
}

int main(void)
{
    const char *src = na_test_shared_model("stories260K.bin");
    char dir[512];

    if (na_test_tmpdir(dir, sizeof(dir)) != 0)
        NA_SKIP("no temporary directory");
    check_generated(dir);
    if (src != NULL) {
        check_stories(src);
        check_truncated(src, dir);
        check_corrupt_header(src, dir);
    } else {
        fprintf(stderr, "note: shared/models/stories260K.bin absent; only generated files tested\n");
    }
    na_test_rmtree(dir);
    return na_test_finish();
}
