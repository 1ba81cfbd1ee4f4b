/* tests/unit/test_tok_bpe.c — byte-level BPE (common/tok_bpe.c,
 * tok_pretok.c, tok_special.c) on a small vocabulary written by the test
 * (tests/testvocab.c): merges applied by rank and leftmost first, the
 * byte-to-unicode mapping, whole words of llama3 (ignore_merges), special
 * and user-defined tokens (never control tokens from text unless asked, or
 * inside the given spans), add_bos from the pre-tokenizer and the file,
 * decoding (bytes, a character split over tokens, special tokens), lossless
 * round trips of random bytes, the pre-tokenizer splits of several families
 * on numbers, contractions, CJK, emoji and whitespace runs, and clear errors
 * for an unknown pre-tokenizer and a merge naming no token; and `nearattn
 * tokenize` (cli/cmd_tokenize.c) on that vocabulary. Also the special
 * tokens of a GGUF SentencePiece vocabulary (gen-model's): cut out of the
 * text as in BPE, each text piece after one with the dummy space prefix,
 * and Phi-3's strip attributes there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/genmodel.h"
#include "common/gguf.h"
#include "common/tok_pretok.h"
#include "common/tokenizer.h"
#include "tests/testutil.h"

static na_tokenizer_t *open_vocab(const char *dir, const char *name, const char *pre,
                                  const char *extra, char *path, size_t cap)
{
    na_tokenizer_t *t = NULL;
    snprintf(path, cap, "%s/%s.gguf", dir, name);
    if (na_test_bpe_vocab(path, pre, extra) != 0)
        return NULL;
    NA_CHECK_OK(na_tokenizer_open(path, 0, &t));
    return t;
}

/* Encode text with flags and spans; compare with want[0..nw) (nw < 0: only
 * print). */
static void check_enc(const na_tokenizer_t *t, const char *text, unsigned flags,
                      const na_tok_span_t *sp, size_t nsp, const int *want, int nw)
{
    int got[256];
    size_t n = 0, i;
    na_status_t st = na_tokenizer_encode_ex(t, text, strlen(text), flags, sp, nsp, got, 256, &n);
    int same = st == NA_OK && (int)n == nw;
    for (i = 0; same && i < n; i++)
        same = got[i] == want[i];
    if (!same) {
        fprintf(stderr, "encode '%s' flags %u: status %d, got", text, flags, (int)st);
        for (i = 0; i < n; i++)
            fprintf(stderr, " %d", got[i]);
        fprintf(stderr, " want");
        for (i = 0; i < (size_t)nw; i++)
            fprintf(stderr, " %d", want[i]);
        fputc('\n', stderr);
    }
    NA_CHECK(same);
}

#define ENC(t, text, flags, ...) do { static const int w_[] = { __VA_ARGS__ }; \
    check_enc(t, text, flags, NULL, 0, w_, (int)(sizeof(w_) / sizeof(w_[0]))); } while (0)

static void check_merges(const na_tokenizer_t *t)
{
    /* "b c" (rank 0) before "a b" (rank 1): a + bc, then "a bc"; merging
     * left to right would give ab + c, which no merge joins */
    ENC(t, "abc", 0, NA_TEST_BPE_ABC);
    ENC(t, "aaa", 0, NA_TEST_BPE_AA, 'a');              /* equal ranks: leftmost first */
    ENC(t, "aaaa", 0, NA_TEST_BPE_AA, NA_TEST_BPE_AA);
    ENC(t, "ab", 0, NA_TEST_BPE_AB);
    ENC(t, "a b", 0, 'a', NA_TEST_BPE_SP_B);            /* the space is byte 0x20 = U+0120 */
    ENC(t, "\xc3\xa9t\xc3\xa9", 0, NA_TEST_BPE_E_ACUTE, 't', NA_TEST_BPE_E_ACUTE);
    ENC(t, "ca", 0, 'c', 'a');                          /* no merge makes it (gpt-2) */
    ENC(t, "\xff\x01", 0, 0xFF, 0x01);                  /* invalid UTF-8: byte by byte */
    ENC(t, "hi", NA_TOK_ADD_BOS | NA_TOK_ADD_EOS, NA_TEST_BPE_BOS, NA_TEST_BPE_HI,
        NA_TEST_BPE_EOS);
}

static void check_special(const na_tokenizer_t *t)
{
    static const char *chat = "<|im_start|>hi<|im_start|>";
    int want[] = { NA_TEST_BPE_IM_START, NA_TEST_BPE_HI, NA_TEST_BPE_IM_START };
    int got[64];
    size_t n = 0, i;
    na_tok_span_t first = { 0, 12 };
    int as_text = 1;

    /* user-defined tokens are tokens in any text */
    ENC(t, "x<think>y", 0, 'x', NA_TEST_BPE_THINK, 'y');
    /* control tokens: text unless asked */
    NA_CHECK_OK(na_tokenizer_encode_ex(t, chat, strlen(chat), 0, NULL, 0, got, 64, &n));
    for (i = 0; i < n; i++)
        if (got[i] == NA_TEST_BPE_IM_START)
            as_text = 0;
    NA_CHECK(as_text && n > 3);
    ENC(t, "<|im_start|>hi<|im_start|>", NA_TOK_PARSE_SPECIAL, NA_TEST_BPE_IM_START,
        NA_TEST_BPE_HI, NA_TEST_BPE_IM_START);
    /* only the first marker lies in a span: the second stays text */
    NA_CHECK_OK(na_tokenizer_encode_ex(t, chat, strlen(chat), 0, &first, 1, got, 64, &n));
    NA_CHECK(n > 3 && got[0] == NA_TEST_BPE_IM_START && got[1] == NA_TEST_BPE_HI &&
             got[2] != NA_TEST_BPE_IM_START);
    {
        na_tok_span_t both[2] = { { 0, 12 }, { 14, 12 } };
        check_enc(t, chat, 0, both, 2, want, 3);
    }
    /* a span that cuts the marker does not make it a token */
    {
        na_tok_span_t part = { 0, 11 };
        NA_CHECK_OK(na_tokenizer_encode_ex(t, chat, 12, 0, &part, 1, got, 64, &n));
        NA_CHECK(n > 1 && got[0] != NA_TEST_BPE_IM_START);
    }
    /* the capacity is checked */
    NA_CHECK(na_tokenizer_encode_ex(t, "abcabc", 6, NA_TOK_ADD_BOS, NULL, 0, got, 2, &n) ==
             NA_ERR_NOSPACE);
}

static void check_decode(const na_tokenizer_t *t)
{
    size_t len = 0;
    const char *p;
    char buf[64];
    int ids[] = { NA_TEST_BPE_BOS, 0xC3, 0xA9, ' ', NA_TEST_BPE_THINK, NA_TEST_BPE_SP_B,
                  NA_TEST_BPE_PAD, NA_TEST_BPE_EOS };

    p = na_tokenizer_decode_len(t, -1, NA_TEST_BPE_SP_B, &len);
    NA_CHECK(len == 2 && memcmp(p, " b", 2) == 0);      /* no SentencePiece space strip: */
    p = na_tokenizer_decode_len(t, NA_TEST_BPE_BOS, NA_TEST_BPE_SP_B, &len);
    NA_CHECK(len == 2 && memcmp(p, " b", 2) == 0);
    /* a character over two tokens: each gives its byte, the two make é */
    p = na_tokenizer_decode_len(t, -1, 0xC3, &len);
    NA_CHECK(len == 1 && (unsigned char)p[0] == 0xC3);
    p = na_tokenizer_decode_len(t, -1, 0x00, &len);
    NA_CHECK(len == 1 && p[0] == 0);
    NA_CHECK_OK(na_tokenizer_decode_all(t, ids, sizeof(ids) / sizeof(ids[0]), buf, sizeof(buf),
                                        &len));
    NA_CHECK(len == 12 && strcmp(buf, "\xc3\xa9 <think> b") == 0);
    NA_CHECK(strcmp(na_tokenizer_decode(t, -1, NA_TEST_BPE_IM_START), "") == 0);
    NA_CHECK(strcmp(na_tokenizer_decode(t, -1, NA_TEST_BPE_N + 5), "") == 0);
}

/* Random bytes (any UTF-8 or not) encode and decode back unchanged. */
static void check_round_trips(const na_tokenizer_t *t)
{
    na_rng_t r;
    int it;
    na_rng_seed(&r, 20);
    for (it = 0; it < 300; it++) {
        char text[96], back[200];
        int ids[128];
        size_t n = 0, len = 1 + na_rng_u64(&r) % 90, i, bl = 0;
        for (i = 0; i < len; i++) {
            uint64_t v = na_rng_u64(&r) % 8;
            text[i] = (char)(v < 4 ? "ab c"[v] : v == 4 ? 0xC3 : v == 5 ? 0xA9
                            : 1 + (int)(na_rng_u64(&r) % 255));
        }
        text[len] = 0;
        len = strlen(text);
        NA_CHECK_OK(na_tokenizer_encode_ex(t, text, len, 0, NULL, 0, ids, 128, &n));
        NA_CHECK_OK(na_tokenizer_decode_all(t, ids, n, back, sizeof(back), &bl));
        NA_CHECK_MSG(bl == len && memcmp(back, text, len) == 0, "round trip %d", it);
    }
}

typedef struct {
    const char *text;
    char        out[512];
} split_acc_t;

static int split_word(void *user, size_t off, size_t len)
{
    split_acc_t *a = user;
    size_t o = strlen(a->out);
    if (o + len + 2 >= sizeof(a->out))
        return 1;
    if (o > 0)
        a->out[o++] = '|';
    memcpy(a->out + o, a->text + off, len);
    a->out[o + len] = 0;
    return 0;
}

/* The words of text under pre-tokenizer name, joined by '|', are want. */
static void check_split(const char *name, const char *text, const char *want)
{
    na_pretok_t *p = NULL;
    int ign = 0, bos = 0;
    split_acc_t a = { text, "" };

    NA_CHECK_OK(na_pretok_create(name, strlen(name), &p, &ign, &bos));
    if (p == NULL)
        return;
    NA_CHECK_OK(na_pretok_split(p, text, strlen(text), split_word, &a));
    NA_CHECK_MSG(strcmp(a.out, want) == 0, "%s: '%s' split as '%s', want '%s'", name, text,
                 a.out, want);
    na_pretok_destroy(p);
}

static void check_splits(void)
{
    static const char *s = "I'm 12345 cats!!\n\n  x";
    check_split("llama-bpe", s, "I|'m| |123|45| cats|!!\n\n| | x");
    check_split("qwen2", s, "I|'m| |1|2|3|4|5| cats|!!\n\n| | x");
    check_split("gpt-2", s, "I|'m| 12345| cats|!!|\n\n | x");
    check_split("llama3", "HE'S", "HE|'S");           /* llama3 contractions any case */
    check_split("gpt-2", "HE'S", "HE|'|S");
    /* CJK, an emoji with a skin tone, a word after it */
    check_split("llama-bpe", "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c"
                "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd ok",
                "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c|"
                "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd| ok");
    check_split("deepseek-llm", "\xe4\xbd\xa0\xe5\xa5\xbd world 123",
                "\xe4\xbd\xa0\xe5\xa5\xbd| world| |123");
    check_split("starcoder", "x 42", "x| |4|2");
    check_split("falcon", "1234567 a", "123|456|7| a");
    check_split("default", "a   b", "a|  | b");
    /* invalid UTF-8 is kept in the words, never dropped */
    check_split("llama-bpe", "a\xff\xfe b", "a|\xff\xfe| b");
    /* tekken: case runs (camelCase, an acronym before a word), one digit a
     * word, "/" kept after a line break; a letter outside ASCII is of both
     * cases (llama.cpp's reading), so "\xc3\x89COLE" splits after the É */
    check_split("tekken", "camelCaseWord HTTPServer iOS x\n/y 123",
                "camel|Case|Word| HTTPServer| i|OS| x|\n|/y| |1|2|3");
    check_split("tekken", "\xc3\x89" "COLE \xc3\xa9" "cole",
                "\xc3\x89|COLE| \xc3\xa9" "cole");
    /* chameleon: each expression splits every piece the last one left, so
     * a sentinel's digits and brackets are words too; two or four spaces,
     * tabs and newlines alone; punctuation one character a word */
    check_split("chameleon", "<sentinel:12>IMGIMGABZ  x 12, y's\tz    w",
                "<|sentinel|:|1|2|>|IMGIMGABZ|  |x| |1|2|,| y|'|s|\t|z|    |w");
}

/* Encode text (no BOS) into out; the count, or -1. */
static int enc_ids(const na_tokenizer_t *t, const char *text, unsigned flags, int *out, int cap)
{
    size_t n = 0;
    if (na_tokenizer_encode_ex(t, text, strlen(text), flags, NULL, 0, out, (size_t)cap, &n) !=
        NA_OK)
        return -1;
    return (int)n;
}

/* text = a + the special token `id` + b: its ids are enc(a'), id, enc(b'),
 * where a' is a without its trailing white space when lstrip and b' is b
 * without its leading white space when rstrip. */
static void check_strip(const na_tokenizer_t *t, const char *a, int id, const char *b,
                        unsigned flags, int lstrip, int rstrip)
{
    char text[128], a2[64], what[160];
    const char *b2 = b;
    int got[64], want[64], n, na_, nb;
    size_t al = strlen(a);

    snprintf(text, sizeof(text), "%s%s%s", a, na_tokenizer_piece(t, id), b);
    while (lstrip && al > 0 && (a[al - 1] == ' ' || a[al - 1] == '\n'))
        al--;
    snprintf(a2, sizeof(a2), "%.*s", (int)al, a);
    while (rstrip && (*b2 == ' ' || *b2 == '\n'))
        b2++;
    n = enc_ids(t, text, flags, got, 64);
    na_ = enc_ids(t, a2, 0, want, 64);
    if (na_ < 0)
        na_ = 0;
    want[na_] = id;
    nb = enc_ids(t, b2, 0, want + na_ + 1, 63 - na_);
    snprintf(what, sizeof(what), "'%s' (lstrip %d, rstrip %d)", text, lstrip, rstrip);
    NA_CHECK_MSG(n == na_ + 1 + nb && memcmp(got, want, (size_t)n * sizeof(int)) == 0,
                 "%s: %d ids, want %d", what, n, na_ + 1 + nb);
}

/* llama.cpp's strip attributes (set by name): "<mask>" takes the white
 * space before it along for jina-v2-de/-es/-code; with a general.name of
 * Phi-3 every special token takes the white space after it. */
static void check_strips(const char *dir)
{
    char path[512];
    na_tokenizer_t *t = NULL;

    t = open_vocab(dir, "plain", "gpt-2", NULL, path, sizeof(path));
    if (t != NULL) {
        check_strip(t, "x  ", NA_TEST_BPE_MASK, "  y", 0, 0, 0);
        check_strip(t, "a ", NA_TEST_BPE_THINK, " \nb", 0, 0, 0);
        na_tokenizer_destroy(t);
    }
    t = open_vocab(dir, "jina", "jina-v2-de", NULL, path, sizeof(path));
    if (t != NULL) {
        check_strip(t, "x \n ", NA_TEST_BPE_MASK, "  y", 0, 1, 0);
        check_strip(t, "a ", NA_TEST_BPE_THINK, " b", 0, 0, 0);     /* only <mask> */
        na_tokenizer_destroy(t);
    }
    snprintf(path, sizeof(path), "%s/phi.gguf", dir);
    NA_CHECK(na_test_bpe_vocab_named(path, "gpt-2", NULL, "Phi-3 Mini (test)") == 0);
    NA_CHECK_OK(na_tokenizer_open(path, 0, &t));
    if (t != NULL) {
        check_strip(t, "a ", NA_TEST_BPE_THINK, " \n b", 0, 0, 1);
        check_strip(t, "a ", NA_TEST_BPE_IM_START, "  b", NA_TOK_PARSE_SPECIAL, 0, 1);
        check_strip(t, "a ", NA_TEST_BPE_MASK, " b", 0, 0, 1);
        na_tokenizer_destroy(t);
    }
}

static void check_errors(const char *dir)
{
    char path[512];
    na_tokenizer_t *t = NULL;
    na_status_t st;

    snprintf(path, sizeof(path), "%s/badpre.gguf", dir);
    if (na_test_bpe_vocab(path, "nonesuch-pre", NULL) == 0) {
        st = na_tokenizer_open(path, 0, &t);
        NA_CHECK(st == NA_ERR_UNSUPPORTED && t == NULL);
        NA_CHECK_MSG(strstr(na_errmsg(), path) && strstr(na_errmsg(), "tokenizer.ggml.pre") &&
                     strstr(na_errmsg(), "nonesuch-pre"), "%s", na_errmsg());
    }
    snprintf(path, sizeof(path), "%s/badmerge.gguf", dir);
    if (na_test_bpe_vocab(path, "gpt-2", "a zz") == 0) {
        st = na_tokenizer_open(path, 0, &t);
        NA_CHECK(st == NA_ERR_FORMAT && t == NULL);
        NA_CHECK_MSG(strstr(na_errmsg(), path) && strstr(na_errmsg(), "tokenizer.ggml.merges") &&
                     strstr(na_errmsg(), "'a zz'"), "%s", na_errmsg());
    }
    snprintf(path, sizeof(path), "%s/badmerge2.gguf", dir);
    if (na_test_bpe_vocab(path, "gpt-2", "c b") == 0) {   /* both tokens, "cb" is none */
        NA_CHECK(na_tokenizer_open(path, 0, &t) == NA_ERR_FORMAT);
        NA_CHECK_MSG(strstr(na_errmsg(), "merged text"), "%s", na_errmsg());
    }
    snprintf(path, sizeof(path), "%s/badmerge3.gguf", dir);
    if (na_test_bpe_vocab(path, "gpt-2", "abc") == 0) {   /* no separator */
        NA_CHECK(na_tokenizer_open(path, 0, &t) == NA_ERR_FORMAT);
        NA_CHECK_MSG(strstr(na_errmsg(), "tokenizer.ggml.merges"), "%s", na_errmsg());
    }
}

/* The output of a shell command (first line), or "" ; *rc_p its exit code. */
static void run_cmd(const char *cmd, char *out, size_t cap, int *rc_p)
{
    FILE *f = popen(cmd, "r");
    size_t n = 0;
    int st;
    out[0] = 0;
    *rc_p = -1;
    if (f == NULL)
        return;
    if (fgets(out, (int)cap, f) != NULL)
        n = strlen(out);
    while (n > 0 && out[n - 1] == '\n')
        out[--n] = 0;
    while (fgetc(f) != EOF)
        ;
    st = pclose(f);
    *rc_p = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* `nearattn tokenize` on the gpt-2 test vocabulary: --prompt, --special,
 * --inp/--check against a right and a wrong .out, usage errors. */
static void check_cli(const char *dir, const char *vocab)
{
    const char *bin = getenv("NA_BIN");
    char cmd[2048], out[256], inp[512], good[512], bad[512];
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char text[128];
    int rc;

    if (bin == NULL) {
        fprintf(stderr, "note: NA_BIN unset: nearattn tokenize not checked\n");
        return;
    }
    snprintf(cmd, sizeof(cmd), "'%s' tokenize --model '%s' --prompt 'abc hi'", bin, vocab);
    run_cmd(cmd, out, sizeof(out), &rc);
    snprintf(text, sizeof(text), "%d %d %d", NA_TEST_BPE_ABC, ' ', NA_TEST_BPE_HI);
    NA_CHECK_MSG(rc == 0 && !strcmp(out, text), "rc %d out '%s' want '%s'", rc, out, text);
    snprintf(cmd, sizeof(cmd), "'%s' tokenize --model '%s' --special --prompt '<|im_start|>hi'",
             bin, vocab);
    run_cmd(cmd, out, sizeof(out), &rc);
    snprintf(text, sizeof(text), "%d %d", NA_TEST_BPE_IM_START, NA_TEST_BPE_HI);
    NA_CHECK_MSG(rc == 0 && !strcmp(out, text), "rc %d out '%s' want '%s'", rc, out, text);
    /* .inp: "abc", "", "aaa" (the last ends with the separator, as llama.cpp's) */
    snprintf(inp, sizeof(inp), "%s/t.inp", dir);
    snprintf(good, sizeof(good), "%s/t.out", dir);
    snprintf(bad, sizeof(bad), "%s/bad.out", dir);
    snprintf(text, sizeof(text), "abc%s%saaa%s", sep, sep, sep);
    NA_CHECK(na_test_write_file(inp, text, strlen(text)) == 0);
    snprintf(text, sizeof(text), " %d\n\n %d %d\n", NA_TEST_BPE_ABC, NA_TEST_BPE_AA, 'a');
    NA_CHECK(na_test_write_file(good, text, strlen(text)) == 0);
    snprintf(text, sizeof(text), " %d\n\n %d %d\n", NA_TEST_BPE_ABC, 'a', NA_TEST_BPE_AA);
    NA_CHECK(na_test_write_file(bad, text, strlen(text)) == 0);
    snprintf(cmd, sizeof(cmd), "'%s' tokenize --model '%s' --inp '%s'", bin, vocab, inp);
    run_cmd(cmd, out, sizeof(out), &rc);
    snprintf(text, sizeof(text), " %d", NA_TEST_BPE_ABC);
    NA_CHECK_MSG(rc == 0 && !strcmp(out, text), "rc %d out '%s'", rc, out);
    snprintf(cmd, sizeof(cmd), "'%s' tokenize --model '%s' --inp '%s' --check '%s'", bin, vocab,
             inp, good);
    run_cmd(cmd, out, sizeof(out), &rc);
    NA_CHECK_MSG(rc == 0 && strstr(out, "3 strings, every id matches"), "rc %d out '%s'", rc, out);
    snprintf(cmd, sizeof(cmd), "'%s' tokenize --model '%s' --inp '%s' --check '%s'", bin, vocab,
             inp, bad);
    run_cmd(cmd, out, sizeof(out), &rc);
    NA_CHECK_MSG(rc == 1 && strstr(out, "string 3 'aaa'"), "rc %d out '%s'", rc, out);
    snprintf(cmd, sizeof(cmd), "'%s' tokenize --prompt x 2>/dev/null", bin);
    run_cmd(cmd, out, sizeof(out), &rc);
    NA_CHECK(rc == 2);
}

/* A GGUF SentencePiece vocabulary (gen-model's <unk>, <s>, </s>): control
 * tokens only when asked, the piece after one with the dummy prefix; named
 * Phi-3 (the file's keys copied with general.name changed), </s> takes the
 * white space after it along and <s> does not (llama.cpp's phi-3 rule). */
static void check_spm_special(const char *dir)
{
    char pre[512], src[512], phi[512];
    na_genmodel_opts_t o;
    na_tokenizer_t *t = NULL;
    na_gguf_t *g = NULL;
    na_gguf_writer_t *w = NULL;
    int got[64], n;
    uint64_t i;

    snprintf(pre, sizeof(pre), "%s/spm", dir);
    snprintf(src, sizeof(src), "%s/spm.gguf", dir);
    snprintf(phi, sizeof(phi), "%s/spm-phi.gguf", dir);
    na_genmodel_shape(&o, 16, 32, 1, 2, 2, 300, 32);
    o.write_llama2c = 0;
    o.write_gguf = 1;
    NA_CHECK_OK(na_genmodel_write(pre, &o));
    NA_CHECK_OK(na_tokenizer_open(src, 0, &t));
    if (t != NULL) {
        NA_CHECK(strcmp(na_tokenizer_kind(t), "bpe") != 0);
        n = enc_ids(t, "a</s>b", 0, got, 64);
        NA_CHECK(n > 3);
        while (n-- > 0)
            NA_CHECK(got[n] != 2);                  /* text unless asked */
        check_strip(t, "a ", 2, "  b", NA_TOK_PARSE_SPECIAL, 0, 0);
        check_strip(t, "hello", 1, "world", NA_TOK_PARSE_SPECIAL, 0, 0);
        na_tokenizer_destroy(t);
    }
    NA_CHECK_OK(na_gguf_open_head(src, &g));
    NA_CHECK_OK(na_gguf_writer_create(phi, &w));
    for (i = 0; g != NULL && w != NULL && i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, "general.name") != 0)
            NA_CHECK_OK(na_gguf_writer_kv_copy(w, &g->kv[i]));
    if (w != NULL) {
        NA_CHECK_OK(na_gguf_writer_kv_str(w, "general.name", "Phi3 test"));
        NA_CHECK_OK(na_gguf_writer_finish(w));
    }
    na_gguf_destroy(g);
    NA_CHECK_OK(na_tokenizer_open(phi, 0, &t));
    if (t != NULL) {
        check_strip(t, "a ", 2, " \n b", NA_TOK_PARSE_SPECIAL, 0, 1);
        check_strip(t, "a ", 1, "  b", NA_TOK_PARSE_SPECIAL, 0, 0);
        na_tokenizer_destroy(t);
    }
}

int main(void)
{
    char dir[256], path[512];
    na_tokenizer_t *t;

    if (na_test_tmpdir(dir, sizeof(dir)) != 0)
        NA_SKIP("no temporary directory");
    t = open_vocab(dir, "gpt2", "gpt-2", NULL, path, sizeof(path));
    if (t != NULL) {
        NA_CHECK(strcmp(na_tokenizer_kind(t), "bpe") == 0);
        NA_CHECK(na_tokenizer_vocab_size(t) == NA_TEST_BPE_N);
        NA_CHECK(na_tokenizer_bos(t) == NA_TEST_BPE_BOS && na_tokenizer_eos(t) == NA_TEST_BPE_EOS);
        NA_CHECK(!na_tokenizer_add_bos(t) && !na_tokenizer_add_eos(t));   /* gpt-2: neither */
        {   /* EOS, BOS; <|end_of_text|> (an end of turn) is EOS already */
            int stop[8], ns = na_tokenizer_stop_ids(t, stop, 8);
            NA_CHECK(ns == 2 && stop[0] == NA_TEST_BPE_EOS && stop[1] == NA_TEST_BPE_BOS);
        }
        check_merges(t);
        check_special(t);
        check_decode(t);
        check_round_trips(t);
        check_cli(dir, path);
        na_tokenizer_destroy(t);
    }
    /* llama3: words that are a token are taken whole; BOS added by default */
    t = open_vocab(dir, "llama3", "llama-bpe", NULL, path, sizeof(path));
    if (t != NULL) {
        NA_CHECK(na_tokenizer_add_bos(t) && !na_tokenizer_add_eos(t));
        ENC(t, "ca", 0, NA_TEST_BPE_CA);
        ENC(t, "abc", 0, NA_TEST_BPE_ABC);
        na_tokenizer_destroy(t);
    }
    /* no tokenizer.ggml.pre: the default pre-tokenizer (as llama.cpp) */
    t = open_vocab(dir, "nopre", NULL, NULL, path, sizeof(path));
    if (t != NULL) {
        ENC(t, "abc!!", 0, NA_TEST_BPE_ABC, '!', '!');
        na_tokenizer_destroy(t);
    }
    check_splits();
    check_strips(dir);
    check_spm_special(dir);
    /* tekken: words that are a token whole, BOS; chameleon: BOS, merges */
    t = open_vocab(dir, "tekken", "tekken", NULL, path, sizeof(path));
    if (t != NULL) {
        NA_CHECK(na_tokenizer_add_bos(t));
        ENC(t, "ca", 0, NA_TEST_BPE_CA);
        na_tokenizer_destroy(t);
    }
    t = open_vocab(dir, "chameleon", "chameleon", NULL, path, sizeof(path));
    if (t != NULL) {
        NA_CHECK(na_tokenizer_add_bos(t));
        ENC(t, "ca", 0, 'c', 'a');
        na_tokenizer_destroy(t);
    }
    check_errors(dir);
    na_test_rmtree(dir);
    return na_test_finish();
}
