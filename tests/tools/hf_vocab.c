/* tests/tools/hf_vocab.c — a Hugging Face tokenizer.json (byte-level BPE)
 * written as a GGUF vocabulary, the way llama.cpp's convert_hf_to_gguf.py
 * writes the tokenizer of a model (get_vocab_base + SpecialVocab):
 *
 *   tokenizer.ggml.model = "gpt2", .pre = PRE, .tokens (model.vocab and the
 *   added tokens by id; an id with neither is "[PAD<id>]", type UNUSED),
 *   .token_type (added: CONTROL when special or when it looks special,
 *   "<|...|>", else USER_DEFINED; others NORMAL), .merges ("a b"; the
 *   [a, b] pair form too), .bos_token_id / .eos_token_id and
 *   tokenizer.chat_template from tokenizer_config.json when given.
 *
 * For the tokenizer tests (tests/tok/test_tok_hf.sh) and for checking
 * llama.cpp's test vectors whose vocabulary files are not shipped
 * (llama-bpe, qwen2). Usage: na_hf_vocab tokenizer.json CONFIG|- PRE out.gguf */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "na_hf_vocab: %s: %s\n", what, why);
    return 1;
}

/* The content of a config token entry: a string or {"content": ...}. */
static const char *tok_text(json_t *v)
{
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int main(int argc, char **argv)
{
    json_error_t je;
    json_t *tj, *cfg = NULL, *vocab, *merges, *added, *v;
    const char *key, *tmpl = NULL;
    size_t n = 0, i, nm;
    char **toks, **ms, pad[32];
    int32_t *types;
    na_gguf_writer_t *w = NULL;
    na_status_t st;
    int rc = 1, bos = -1, eos = -1;

    if (argc != 5) {
        fprintf(stderr, "usage: na_hf_vocab tokenizer.json tokenizer_config.json|- PRE out.gguf\n");
        return 2;
    }
    if ((tj = json_load_file(argv[1], 0, &je)) == NULL)
        return fail(argv[1], je.text);
    if (strcmp(argv[2], "-") &&
        (cfg = json_load_file(argv[2], JSON_DECODE_INT_AS_REAL, &je)) == NULL)  /* 1e30 limits */
        return fail(argv[2], je.text);
    vocab = json_object_get(json_object_get(tj, "model"), "vocab");
    merges = json_object_get(json_object_get(tj, "model"), "merges");
    added = json_object_get(tj, "added_tokens");
    if (!json_is_object(vocab) || !json_is_array(merges))
        return fail(argv[1], "no model.vocab object or model.merges array");
    json_object_foreach(vocab, key, v)
        if (json_is_integer(v) && (size_t)json_integer_value(v) + 1 > n)
            n = (size_t)json_integer_value(v) + 1;
    json_array_foreach(added, i, v) {
        json_t *id = json_object_get(v, "id");
        if (json_is_integer(id) && (size_t)json_integer_value(id) + 1 > n)
            n = (size_t)json_integer_value(id) + 1;
    }
    toks = calloc(n, sizeof(char *));
    types = calloc(n, sizeof(int32_t));
    nm = json_array_size(merges);
    ms = calloc(nm + 1, sizeof(char *));
    if (toks == NULL || types == NULL || ms == NULL)
        return fail("memory", "out of memory");
    json_object_foreach(vocab, key, v) {
        toks[json_integer_value(v)] = (char *)key;
        types[json_integer_value(v)] = 1;
    }
    json_array_foreach(added, i, v) {
        size_t id = (size_t)json_integer_value(json_object_get(v, "id"));
        const char *c = json_string_value(json_object_get(v, "content"));
        size_t cl = c ? strlen(c) : 0;
        int looks = cl >= 4 && !strncmp(c, "<|", 2) && !strcmp(c + cl - 2, "|>");
        if (c == NULL)
            continue;
        toks[id] = (char *)c;
        types[id] = json_is_true(json_object_get(v, "special")) || looks ? 3 : 4;
    }
    for (i = 0; i < n; i++)
        if (toks[i] == NULL) {
            snprintf(pad, sizeof(pad), "[PAD%zu]", i);
            if ((toks[i] = strdup(pad)) == NULL)
                return fail("memory", "out of memory");
            types[i] = 5;               /* freed below by its type */
        }
    json_array_foreach(merges, i, v) {
        if (json_is_string(v)) {
            ms[i] = strdup(json_string_value(v));
            if (ms[i] == NULL)
                return fail("memory", "out of memory");
        } else {
            const char *a = json_string_value(json_array_get(v, 0));
            const char *b = json_string_value(json_array_get(v, 1));
            if (a == NULL || b == NULL)
                return fail(argv[1], "a merge is neither \"a b\" nor [a, b]");
            ms[i] = malloc(strlen(a) + strlen(b) + 2);
            if (ms[i] == NULL)
                return fail("memory", "out of memory");
            sprintf(ms[i], "%s %s", a, b);
        }
    }
    if (cfg != NULL) {
        const char *b = tok_text(json_object_get(cfg, "bos_token"));
        const char *e = tok_text(json_object_get(cfg, "eos_token"));
        for (i = 0; i < n; i++) {
            if (b != NULL && !strcmp(toks[i], b))
                bos = (int)i;
            if (e != NULL && !strcmp(toks[i], e))
                eos = (int)i;
        }
    }
    if (cfg != NULL && json_is_string(json_object_get(cfg, "chat_template")))
        tmpl = json_string_value(json_object_get(cfg, "chat_template"));
    if ((st = na_gguf_writer_create(argv[4], &w)) != NA_OK ||
        (st = na_gguf_writer_kv_str(w, "general.architecture", "llama")) != NA_OK ||
        (st = na_gguf_writer_kv_str(w, "tokenizer.ggml.model", "gpt2")) != NA_OK ||
        (st = na_gguf_writer_kv_str(w, "tokenizer.ggml.pre", argv[3])) != NA_OK ||
        (st = na_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks,
                                        n)) != NA_OK ||
        (st = na_gguf_writer_kv_arr_i32(w, "tokenizer.ggml.token_type", types, n)) != NA_OK ||
        (st = na_gguf_writer_kv_arr_str(w, "tokenizer.ggml.merges", (const char *const *)ms,
                                        nm)) != NA_OK ||
        (bos >= 0 && (st = na_gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id",
                                                 (uint32_t)bos)) != NA_OK) ||
        (eos >= 0 && (st = na_gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id",
                                                 (uint32_t)eos)) != NA_OK) ||
        (tmpl != NULL && (st = na_gguf_writer_kv_str(w, "tokenizer.chat_template",
                                                     tmpl)) != NA_OK)) {
        na_gguf_writer_abort(w);
        return fail(argv[4], na_errmsg());
    }
    if ((st = na_gguf_writer_finish(w)) != NA_OK)
        return fail(argv[4], na_errmsg());
    printf("%s: %zu tokens, %zu merges, pre %s, bos %d, eos %d\n", argv[4], n, nm, argv[3], bos,
           eos);
    rc = 0;
    for (i = 0; i < n; i++)
        if (types[i] == 5)
            free(toks[i]);
    for (i = 0; i < nm; i++)
        free(ms[i]);
    free(toks);
    free(types);
    free(ms);
    json_decref(tj);
    json_decref(cfg);
    return rc;
}
