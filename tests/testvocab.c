/* tests/testvocab.c — a small GPT-2-style byte-level BPE vocabulary written
 * as a GGUF file (see testutil.h: na_test_bpe_vocab). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "tests/testutil.h"

/* GPT-2's bytes_to_unicode, restated: printable Latin-1 bytes stand for
 * themselves, the others for U+0100.. in byte order. UTF-8 into out. */
static void byte_char(unsigned b, char out[3])
{
    unsigned cp, n = 0, x;
    int direct = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (direct) {
        cp = b;
    } else {
        for (x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE))
                n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

/* The tokens after the 256 byte tokens (ids 256..), written in mapped form. */
static const char *const tv_words[] = {
    "bc", "ab", "abc", "aa", "\xc4\240b", "\xc3\x83\xc2\xa9", "hi", "ca",
};
/* "a b" merges in rank order; every one yields a token above */
static const char *const tv_merges[] = {
    "b c", "a b", "a bc", "a a", "\xc4\xa0 b", "\xc3\x83 \xc2\xa9", "h i",
};
static const char *const tv_special[] = {
    "<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<think>", "[PAD9]", "<mask>",
};
static const int tv_special_type[] = { 3, 3, 3, 4, 5, 4 };

int na_test_bpe_vocab(const char *path, const char *pre, const char *extra_merge)
{
    return na_test_bpe_vocab_named(path, pre, extra_merge, NULL);
}

int na_test_bpe_vocab_named(const char *path, const char *pre, const char *extra_merge,
                            const char *name)
{
    enum { NW = sizeof(tv_words) / sizeof(tv_words[0]),
           NM = sizeof(tv_merges) / sizeof(tv_merges[0]),
           NS = sizeof(tv_special) / sizeof(tv_special[0]), N = 256 + NW + NS };
    char bytes[256][3];
    const char *toks[N], *merges[NM + 1];
    int32_t types[N];
    na_gguf_writer_t *w = NULL;
    size_t nm = NM;
    int i;
    na_status_t st;

    for (i = 0; i < 256; i++) {
        byte_char((unsigned)i, bytes[i]);
        toks[i] = bytes[i];
        types[i] = 1;
    }
    for (i = 0; i < NW; i++) {
        toks[256 + i] = tv_words[i];
        types[256 + i] = 1;
    }
    for (i = 0; i < NS; i++) {
        toks[256 + NW + i] = tv_special[i];
        types[256 + NW + i] = tv_special_type[i];
    }
    for (i = 0; i < NM; i++)
        merges[i] = tv_merges[i];
    if (extra_merge != NULL)
        merges[nm++] = extra_merge;
    st = na_gguf_writer_create(path, &w);
    if (st == NA_OK && name != NULL)
        st = na_gguf_writer_kv_str(w, "general.name", name);
    if (st == NA_OK)
        st = na_gguf_writer_kv_str(w, "tokenizer.ggml.model", "gpt2");
    if (st == NA_OK && pre != NULL)
        st = na_gguf_writer_kv_str(w, "tokenizer.ggml.pre", pre);
    if (st == NA_OK)
        st = na_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", toks, N);
    if (st == NA_OK)
        st = na_gguf_writer_kv_arr_i32(w, "tokenizer.ggml.token_type", types, N);
    if (st == NA_OK)
        st = na_gguf_writer_kv_arr_str(w, "tokenizer.ggml.merges", merges, nm);
    if (st == NA_OK)
        st = na_gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", NA_TEST_BPE_BOS);
    if (st == NA_OK)
        st = na_gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", NA_TEST_BPE_BOS + 1);
    if (st != NA_OK) {
        na_gguf_writer_abort(w);
        fprintf(stderr, "na_test_bpe_vocab %s: %s\n", path, na_errmsg());
        return -1;
    }
    if (na_gguf_writer_finish(w) != NA_OK) {
        fprintf(stderr, "na_test_bpe_vocab %s: %s\n", path, na_errmsg());
        return -1;
    }
    return 0;
}
