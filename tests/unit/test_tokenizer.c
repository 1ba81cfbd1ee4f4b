/* tests/unit/test_tokenizer.c — common/tokenizer.c: round trips (ASCII,
 * UTF-8, bytes not in the vocabulary), agreement with a plain O(n^2)
 * re-statement of the llama2.c merge rule, the same vocabulary read from a
 * GGUF file, and rejection of truncated / mismatched tokenizer files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "common/tokenizer.h"
#include "tests/testutil.h"

/* Reference encoder: linear-search lookups, repeated best-pair scans. */
static int ref_lookup(const na_tokenizer_t *t, const char *s, size_t len)
{
    int i, n = na_tokenizer_vocab_size(t);
    for (i = 0; i < n; i++) {
        const char *p = na_tokenizer_piece(t, i);
        unsigned b;
        if (strlen(p) == len && memcmp(p, s, len) == 0 && i > 2 &&
            !(len == 6 && sscanf(p, "<0x%02X>", &b) == 1))
            return i;
    }
    return -1;
}

static int ref_byte(const na_tokenizer_t *t, unsigned char c)
{
    char buf[8];
    int i, n = na_tokenizer_vocab_size(t);
    snprintf(buf, sizeof(buf), "<0x%02X>", c);
    for (i = 0; i < n; i++)
        if (strcmp(na_tokenizer_piece(t, i), buf) == 0)
            return i;
    return 0;
}

static size_t ref_encode(const na_tokenizer_t *t, const char *text, int *out)
{
    size_t n = 0, i = 0, len = strlen(text);
    char buf[1024];
    if (len > 0)
        out[n++] = ref_lookup(t, " ", 1);
    while (i < len) {
        const unsigned char *s = (const unsigned char *)text + i;
        size_t cl = 1, k;
        int id;
        if (s[0] >= 0xC0 && s[0] <= 0xF7) {
            size_t want = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : 2;
            for (k = 1; k < want && (s[k] & 0xC0) == 0x80; k++)
                ;
            if (k == want)
                cl = want;
        }
        id = ref_lookup(t, text + i, cl);
        if (id >= 0)
            out[n++] = id;
        else
            for (k = 0; k < cl; k++)
                out[n++] = ref_byte(t, s[k]);
        i += cl;
    }
    for (;;) {
        float best = -1e10f;
        int best_id = -1;
        size_t best_i = 0;
        for (i = 0; i + 1 < n; i++) {
            int id;
            snprintf(buf, sizeof(buf), "%s%s", na_tokenizer_piece(t, out[i]),
                     na_tokenizer_piece(t, out[i + 1]));
            id = ref_lookup(t, buf, strlen(buf));
            if (id >= 0 && na_tokenizer_score(t, id) > best) {
                best = na_tokenizer_score(t, id);
                best_id = id;
                best_i = i;
            }
        }
        if (best_id < 0)
            break;
        out[best_i] = best_id;
        memmove(out + best_i + 1, out + best_i + 2, (n - best_i - 2) * sizeof(int));
        n--;
    }
    return n;
}

static const char *const samples[] = {
    "Once upon a time",
    "Once upon a time, there was a little girl named Lily.",
    "  leading spaces and trailing  ",
    "a",
    "The quick brown fox jumps over the lazy dog 0123456789 !?@#$%^&*()[]{}",
    "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82",
    "bytes \x01\x02\x7f\xff\xfe\x80 not in vocab",
    "tab\tnew\nline\r\n",
};

/* Encode with BOS, decode, compare; and compare with the reference. */
static void check_round_trips(const na_tokenizer_t *t, const char *what)
{
    size_t s;
    for (s = 0; s < sizeof(samples) / sizeof(samples[0]); s++) {
        const char *text = samples[s];
        size_t cap = na_tokenizer_max_tokens(strlen(text)), n = 0, rn, out_len = 0;
        int *tok = malloc(cap * sizeof(int)), *ref = malloc(cap * sizeof(int));
        char buf[512];
        NA_CHECK_OK(na_tokenizer_encode(t, text, 1, 0, tok, cap, &n));
        NA_CHECK(n >= 1 && tok[0] == na_tokenizer_bos(t));
        NA_CHECK_OK(na_tokenizer_decode_all(t, tok, n, buf, sizeof(buf), &out_len));
        NA_CHECK_MSG(out_len == strlen(text) && memcmp(buf, text, out_len) == 0,
                     "%s: round trip of sample %zu gave '%s'", what, s, buf);
        rn = ref_encode(t, text, ref);
        NA_CHECK_MSG(rn == n - 1 && memcmp(ref, tok + 1, rn * sizeof(int)) == 0,
                     "%s: sample %zu: %zu tokens, reference %zu", what, s, n - 1, rn);
        free(tok);
        free(ref);
    }
}

/* Random byte strings: round trip and reference agreement. */
static void check_random(const na_tokenizer_t *t)
{
    na_rng_t r;
    int iter;
    na_rng_seed(&r, 7);
    for (iter = 0; iter < 200; iter++) {
        char text[80], buf[256];
        int tok[96], ref[96];
        size_t len = na_rng_u64(&r) % 60, i, n = 0, rn, ol = 0;
        for (i = 0; i < len; i++) {
            uint64_t k = na_rng_u64(&r) % 10;
            text[i] = (char)(k < 7 ? "etaoin shrdlu"[na_rng_u64(&r) % 13]
                                   : (char)(1 + na_rng_u64(&r) % 255));
        }
        text[len] = 0;
        NA_CHECK_OK(na_tokenizer_encode(t, text, 1, 1, tok, 96, &n));
        NA_CHECK(tok[n - 1] == na_tokenizer_eos(t));
        NA_CHECK_OK(na_tokenizer_decode_all(t, tok, n, buf, sizeof(buf), &ol));
        NA_CHECK(ol == strlen(text) && memcmp(buf, text, ol) == 0);
        rn = ref_encode(t, text, ref);
        NA_CHECK(rn == n - 2 && memcmp(ref, tok + 1, rn * sizeof(int)) == 0);
    }
}

/* Re-write tok512 as a GGUF tokenizer (U+2581 for spaces) and compare. */
static void check_gguf_copy(const na_tokenizer_t *t, const char *dir)
{
    char path[600];
    int n = na_tokenizer_vocab_size(t), i;
    char **pieces = calloc((size_t)n, sizeof(char *));
    float *scores = calloc((size_t)n, sizeof(float));
    int32_t *types = calloc((size_t)n, sizeof(int32_t));
    na_gguf_writer_t *w;
    na_tokenizer_t *g = NULL;

    for (i = 0; i < n; i++) {
        const char *p = na_tokenizer_piece(t, i);
        char *q = malloc(3 * strlen(p) + 1), *o = q;
        unsigned b;
        for (; *p; p++) {
            if (*p == ' ') { memcpy(o, "\xe2\x96\x81", 3); o += 3; }
            else *o++ = *p;
        }
        *o = 0;
        pieces[i] = q;
        scores[i] = na_tokenizer_score(t, i);
        types[i] = i == 0 ? 2 : i <= 2 ? 3 : (strlen(q) == 6 && sscanf(q, "<0x%02X>", &b) == 1)
                                               ? 6 : 1;
    }
    snprintf(path, sizeof(path), "%s/tok.gguf", dir);
    NA_CHECK_OK(na_gguf_writer_create(path, &w));
    NA_CHECK_OK(na_gguf_writer_kv_str(w, "tokenizer.ggml.model", "llama"));
    NA_CHECK_OK(na_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens",
                                          (const char *const *)pieces, (uint64_t)n));
    NA_CHECK_OK(na_gguf_writer_kv_arr_f32(w, "tokenizer.ggml.scores", scores, (uint64_t)n));
    NA_CHECK_OK(na_gguf_writer_kv_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)n));
    NA_CHECK_OK(na_gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", 1));
    NA_CHECK_OK(na_gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", 2));
    NA_CHECK_OK(na_gguf_writer_finish(w));
    NA_CHECK_OK(na_tokenizer_open(path, n, &g));
    if (g != NULL) {
        size_t s;
        for (s = 0; s < sizeof(samples) / sizeof(samples[0]); s++) {
            int a[256], b[256];
            size_t na = 0, nb = 0;
            NA_CHECK_OK(na_tokenizer_encode(t, samples[s], 1, 0, a, 256, &na));
            NA_CHECK_OK(na_tokenizer_encode(g, samples[s], 1, 0, b, 256, &nb));
            NA_CHECK(na == nb && memcmp(a, b, na * sizeof(int)) == 0);
        }
        check_round_trips(g, "gguf");
        na_tokenizer_destroy(g);
    }
    /* wrong expected vocabulary size */
    NA_CHECK(na_tokenizer_open(path, n + 1, &g) == NA_ERR_FORMAT);
    NA_CHECK(strstr(na_errmsg(), path) != NULL);
    for (i = 0; i < n; i++)
        free(pieces[i]);
    free(pieces);
    free(scores);
    free(types);
}

/* Truncations and a wrong vocab size are rejected with the file named. */
static void check_bad_files(const char *src, const char *dir)
{
    char path[600];
    size_t len = 0, cut;
    char *buf = na_test_read_file(src, &len);
    na_tokenizer_t *t = NULL;

    NA_CHECK(buf != NULL);
    if (buf == NULL)
        return;
    snprintf(path, sizeof(path), "%s/cut.bin", dir);
    for (cut = 0; cut < len; cut += (cut < 64 ? 1 : 97)) {
        na_status_t st;
        (void)na_test_write_file(path, buf, cut);
        st = na_tokenizer_create_llama2c(path, 512, &t);
        NA_CHECK_MSG(st == NA_ERR_FORMAT || st == NA_ERR_RANGE, "cut at %zu: %d", cut, st);
        NA_CHECK(strstr(na_errmsg(), path) != NULL);
        NA_CHECK(cut < 4 ? strstr(na_errmsg(), "max_token_length") != NULL
                         : strstr(na_errmsg(), "token ") != NULL);
    }
    NA_CHECK(na_tokenizer_create_llama2c(src, 513, &t) == NA_ERR_FORMAT);
    NA_CHECK(na_tokenizer_create_llama2c(src, 100, &t) == NA_ERR_FORMAT);
    NA_CHECK(strstr(na_errmsg(), "trailing") != NULL);
    NA_CHECK(na_tokenizer_create_llama2c(src, 0, &t) == NA_ERR_RANGE);
    /* an absurd piece length */
    {
        int32_t big = 1 << 30;
        memcpy(buf + 4 + 4, &big, 4);
        (void)na_test_write_file(path, buf, len);
        NA_CHECK(na_tokenizer_create_llama2c(path, 512, &t) == NA_ERR_RANGE);
        NA_CHECK(strstr(na_errmsg(), "token 0") && strstr(na_errmsg(), "length"));
    }
    NA_CHECK(na_tokenizer_create_llama2c("/nonexistent/tok.bin", 512, &t) == NA_ERR_IO);
    /* a directory opens but is no tokenizer: a clear error, not a huge malloc */
    NA_CHECK(na_tokenizer_create_llama2c(dir, 512, &t) == NA_ERR_FORMAT);
    NA_CHECK(strstr(na_errmsg(), "not a regular file") != NULL);
    NA_CHECK(na_tokenizer_open(dir, 512, &t) == NA_ERR_FORMAT);
    NA_CHECK(strstr(na_errmsg(), "not a regular file") != NULL);
    free(buf);
}

int main(void)
{
    const char *src = na_test_shared_model("tok512.bin");
    na_tokenizer_t *t = NULL;
    char dir[512];
    int tok[8];
    size_t n = 0;

    if (src == NULL)
        NA_SKIP("shared/models/tok512.bin is absent (generated vocabularies are tested in "
                "test_genmodel)");
    if (na_test_tmpdir(dir, sizeof(dir)) != 0)
        NA_SKIP("no temporary directory");
    NA_CHECK_OK(na_tokenizer_create_llama2c(src, 512, &t));
    if (t == NULL) {
        na_test_rmtree(dir);
        return na_test_finish();
    }
    NA_CHECK(na_tokenizer_vocab_size(t) == 512);
    NA_CHECK(na_tokenizer_bos(t) == 1 && na_tokenizer_eos(t) == 2);
    /* empty text: BOS only; capacity errors */
    NA_CHECK_OK(na_tokenizer_encode(t, "", 1, 0, tok, 8, &n));
    NA_CHECK(n == 1 && tok[0] == 1);
    NA_CHECK(na_tokenizer_encode(t, "hello world, again", 1, 1, tok, 2, &n) == NA_ERR_NOSPACE);
    /* decode details: BOS strips the leading space; byte tokens; out of range */
    NA_CHECK(strcmp(na_tokenizer_decode(t, -1, 1), "") == 0);
    NA_CHECK(strcmp(na_tokenizer_decode(t, -1, 3 + 'A'), "A") == 0);
    NA_CHECK(strcmp(na_tokenizer_decode(t, 1, 100000), "") == 0);
    check_round_trips(t, "tok512");
    check_random(t);
    check_gguf_copy(t, dir);
    check_bad_files(src, dir);
    na_tokenizer_destroy(t);
    na_test_rmtree(dir);
    return na_test_finish();
}
