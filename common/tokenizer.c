/* common/tokenizer.c — SentencePiece-style BPE with byte fallback (see
 * tokenizer.h) and the loading of both vocabularies; the top of the
 * tokenizer's files: encoding goes down to tok_special.c (special tokens in
 * text), tok_bpe.c (byte-level BPE, over tok_pretok.c) and tok_spm.c
 * (SentencePiece merges). Pieces live in one arena; lookup is an
 * open-addressing hash table over the piece bytes (tok_internal.h). */
#include "tokenizer.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mapfile.h"
#include "common/log.h"
#include "gguf.h"
#include "model.h"
#include "tok_internal.h"

#define NA_TOK_MAX_PIECE   65536      /* longest piece accepted from a file */

/* Allocate the tokenizer with its per-token arrays for n tokens, room for
 * n_special special-token ids (t->special; na_tok_special_room), a merge
 * table of mcap slots (t->merges; 0: none) and an arena of arena_bytes
 * behind it, one block (freed with t). NULL when out of memory. */
static na_tokenizer_t *na_tok_alloc(int n, size_t arena_bytes, int n_special, uint64_t mcap)
{
    na_tokenizer_t *t;
    uint32_t cap = 16;
    size_t vn = (size_t)n;
    uint8_t *p;
    int b;

    while (cap < 2u * (uint32_t)n)
        cap <<= 1;
    /* widest elements first so that every array is aligned (the struct's
     * size is a multiple of its pointer alignment) */
    t = calloc(1, sizeof(*t) + (size_t)mcap * sizeof(na_tok_merge_t) + vn * sizeof(char *) +
                  vn * (sizeof(float) + sizeof(uint32_t) + 3) + cap * sizeof(uint32_t) +
                  (size_t)n_special * sizeof(int) + arena_bytes + 1);
    if (t == NULL)
        return NULL;
    p = (uint8_t *)(t + 1);
    t->vocab_size = n;
    t->merges    = mcap ? (na_tok_merge_t *)p : NULL; p += (size_t)mcap * sizeof(na_tok_merge_t);
    t->mmask     = mcap ? mcap - 1 : 0;
    t->pieces    = (char **)p;                        p += vn * sizeof(char *);
    t->scores    = (float *)p;                        p += vn * sizeof(float);
    t->piece_len = (uint32_t *)p;                     p += vn * sizeof(uint32_t);
    t->hash      = (uint32_t *)p;                     p += cap * sizeof(uint32_t);
    t->hash_mask = cap - 1;
    t->special   = n_special ? (int *)p : NULL;       p += (size_t)n_special * sizeof(int);
    t->kind      = p;                                 p += vn;
    t->byte_val  = p;                                 p += vn;
    t->strip     = p;                                 p += vn;
    t->arena     = (char *)p;
    for (b = 0; b < 256; b++) {
        t->byte_id[b] = -1;
        t->byte_str[b][0] = (char)b;
        t->byte_str[b][1] = 0;
    }
    t->bos = 1;
    t->eos = 2;
    t->unk = 0;
    t->add_bos = 1;
    return t;
}

/* Parse "<0xNN>" (exactly) into *b. */
static int na_tok_parse_byte(const char *s, size_t len, uint8_t *b)
{
    unsigned v = 0;
    size_t i;
    if (len != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>')
        return 0;
    for (i = 3; i < 5; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')      v |= (unsigned)(c - '0');
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else return 0;
    }
    *b = (uint8_t)v;
    return 1;
}

/* After pieces/kinds are filled: build the hash table and byte table. */
static void na_tok_index(na_tokenizer_t *t)
{
    int id;
    t->max_piece_len = 0;
    for (id = 0; id < t->vocab_size; id++) {
        uint32_t len = t->piece_len[id], i;
        if (len > t->max_piece_len)
            t->max_piece_len = len;
        if (t->kind[id] == NA_TOK_BYTE) {
            if (t->byte_id[t->byte_val[id]] < 0)
                t->byte_id[t->byte_val[id]] = id;
            continue;                 /* byte tokens are not merge targets */
        }
        if (t->kind[id] == NA_TOK_CONTROL)
            continue;                 /* never produced by text */
        if (na_tok_lookup(t, t->pieces[id], len) >= 0)
            continue;                 /* duplicate: first one wins */
        i = na_tok_hash(t->pieces[id], len) & t->hash_mask;
        while (t->hash[i] != 0)
            i = (i + 1) & t->hash_mask;
        t->hash[i] = (uint32_t)id + 1;
    }
}

/* Open the tokenizer file for reading, checking that it is a regular file
 * (a directory or a device opens fine but has no sensible size, a FIFO would
 * block): NA_ERR_IO (open or fstat failed) or NA_ERR_FORMAT (not a regular
 * file). */
static na_status_t na_tok_open_regular(const char *path, FILE **f_p)
{
    struct stat sb;
    FILE *f;
    int fd = -1;
    na_status_t st = na_open_regular(path, "tokenizer", NA_ERR_FORMAT, &fd, &sb);

    if (st != NA_OK)
        return st;
    f = fdopen(fd, "rb");
    if (f == NULL) {
        int e = errno;
        close(fd);
        return na_err(NA_ERR_IO, "%s: cannot open tokenizer: %s", path, strerror(e));
    }
    *f_p = f;
    return NA_OK;
}

/* Read a whole (small) file into a malloc'd buffer. */
static na_status_t na_tok_read_file(const char *path, uint8_t **buf_p, size_t *len_p)
{
    FILE *f = NULL;
    uint8_t *buf;
    long len;
    na_status_t st = na_tok_open_regular(path, &f);

    if (st != NA_OK)
        return st;
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return na_err(NA_ERR_IO, "%s: cannot size tokenizer: %s", path, strerror(errno));
    }
    buf = malloc((size_t)len + 1);
    if (buf == NULL) {
        fclose(f);
        return na_err(NA_ERR_NOMEM, "%s: no memory for %ld bytes", path, len);
    }
    if (len > 0 && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        fclose(f);
        return na_err(NA_ERR_IO, "%s: short read", path);
    }
    fclose(f);
    *buf_p = buf;
    *len_p = (size_t)len;
    return NA_OK;
}

na_status_t na_tokenizer_create_llama2c(const char *path, int vocab_size,
                                        na_tokenizer_t **tok_p)
{
    na_tokenizer_t *t;
    uint8_t *buf = NULL;
    size_t len = 0, off, a = 0;
    int32_t max_len;
    na_status_t st;
    int id;

    if (vocab_size <= 0 || vocab_size > (1 << 22))
        return na_err(NA_ERR_RANGE, "%s: vocab_size %d out of range [1, %d]",
                      path, vocab_size, 1 << 22);
    st = na_tok_read_file(path, &buf, &len);
    if (st != NA_OK)
        return st;
    if (len < 4) {
        st = na_err(NA_ERR_FORMAT, "%s: field 'max_token_length' runs past the end "
                    "(file is %zu bytes)", path, len);
        goto err_free_buf;
    }
    memcpy(&max_len, buf, 4);
    if (max_len <= 0 || max_len > NA_TOK_MAX_PIECE) {
        st = na_err(NA_ERR_RANGE, "%s: field 'max_token_length' = %d out of range [1, %d]",
                    path, max_len, NA_TOK_MAX_PIECE);
        goto err_free_buf;
    }
    t = na_tok_alloc(vocab_size, len, 0, 0);
    if (t == NULL) {
        st = na_err(NA_ERR_NOMEM, "%s: no memory for the vocabulary", path);
        goto err_free_buf;
    }
    off = 4;
    for (id = 0; id < vocab_size; id++) {
        int32_t plen;
        float score;
        if (len - off < 8) {
            st = na_err(NA_ERR_FORMAT, "%s: token %d: field 'score/length' runs past the end "
                        "(offset %zu, file is %zu bytes; vocab_size %d too large?)",
                        path, id, off, len, vocab_size);
            goto err_destroy;
        }
        memcpy(&score, buf + off, 4);
        memcpy(&plen, buf + off + 4, 4);
        off += 8;
        if (isnan(score)) {
            st = na_err(NA_ERR_FORMAT, "%s: token %d: field 'score' is NaN", path, id);
            goto err_destroy;
        }
        if (plen < 0 || plen > max_len) {
            st = na_err(NA_ERR_RANGE, "%s: token %d: field 'length' = %d out of range [0, %d]",
                        path, id, plen, max_len);
            goto err_destroy;
        }
        if ((size_t)plen > len - off) {
            st = na_err(NA_ERR_FORMAT, "%s: token %d: piece of %d bytes runs past the end "
                        "(offset %zu, file is %zu bytes)", path, id, plen, off, len);
            goto err_destroy;
        }
        t->pieces[id] = t->arena + a;
        memcpy(t->arena + a, buf + off, (size_t)plen);
        t->arena[a + (size_t)plen] = 0;
        a += (size_t)plen + 1;
        t->piece_len[id] = (uint32_t)plen;
        t->scores[id] = score;
        off += (size_t)plen;
        if (na_tok_parse_byte(t->pieces[id], (size_t)plen, &t->byte_val[id]))
            t->kind[id] = NA_TOK_BYTE;
        else if (id <= 2)
            t->kind[id] = NA_TOK_CONTROL;   /* <unk>, <s>, </s> */
    }
    if (off != len) {
        st = na_err(NA_ERR_FORMAT, "%s: %zu trailing bytes after %d tokens "
                    "(tokenizer of a larger vocabulary?)", path, len - off, vocab_size);
        goto err_destroy;
    }
    free(buf);
    na_tok_index(t);
    *tok_p = t;
    return NA_OK;

err_destroy:
    na_tokenizer_destroy(t);
err_free_buf:
    free(buf);
    return st;
}

/* Copy GGUF piece s into dst converting U+2581 to ' '; returns bytes written. */
static size_t na_tok_copy_sp(char *dst, const char *s, size_t len)
{
    size_t i = 0, o = 0;
    while (i < len) {
        if (len - i >= 3 && (uint8_t)s[i] == 0xE2 && (uint8_t)s[i + 1] == 0x96 &&
            (uint8_t)s[i + 2] == 0x81) {
            dst[o++] = ' ';
            i += 3;
        } else {
            dst[o++] = s[i++];
        }
    }
    dst[o] = 0;
    return o;
}

/* An optional array beside tokenizer.ggml.tokens: absent (*kv_p untouched),
 * or of `type` with one entry per token. */
static na_status_t na_tok_side_arr(const na_gguf_t *g, const char *key, na_gguf_type_t type,
                                   uint64_t n, const na_gguf_kv_t **kv_p)
{
    na_status_t st;

    if (na_gguf_find(g, key) == NULL)
        return NA_OK;
    if ((st = na_gguf_get_arr(g, key, type, kv_p)) != NA_OK)
        return st;
    if ((*kv_p)->v.arr.n != n)
        return na_err(NA_ERR_FORMAT, "%s: field '%s' has %llu entries, tokens has %llu", g->path,
                      key, (unsigned long long)(*kv_p)->v.arr.n, (unsigned long long)n);
    return NA_OK;
}

/* An optional bool key: absent leaves *v. */
static na_status_t na_tok_bool(const na_gguf_t *g, const char *key, int *v)
{
    const na_gguf_kv_t *kv = na_gguf_find(g, key);
    if (kv == NULL)
        return NA_OK;
    if (kv->type != NA_GGUF_BOOL)
        return na_err(NA_ERR_FORMAT, "%s: field '%s' is not a bool (type %d)", g->path, key,
                      (int)kv->type);
    *v = kv->v.u64 != 0;
    return NA_OK;
}

/* An optional token id key: absent leaves *v; outside the vocabulary fails. */
static na_status_t na_tok_id(const na_gguf_t *g, const char *key, int n, int *v)
{
    uint32_t u;
    na_status_t st;
    if (na_gguf_find(g, key) == NULL)
        return NA_OK;
    if ((st = na_gguf_get_u32(g, key, &u)) != NA_OK)
        return st;
    if (u >= (uint32_t)n)
        return na_err(NA_ERR_RANGE, "%s: field '%s' = %u outside the vocabulary of %d", g->path,
                      key, u, n);
    *v = (int)u;
    return NA_OK;
}

/* tokenizer.ggml.tokens of g, checked (1 .. 2^22 entries, each at most
 * NA_TOK_MAX_PIECE bytes): the array in *toks_p, its count in *n_p, the arena
 * bytes its pieces need (with their NULs) in *arena_p. Both vocabulary kinds. */
static na_status_t na_tok_gguf_tokens(const na_gguf_t *g, const na_gguf_kv_t **toks_p,
                                      uint64_t *n_p, size_t *arena_p)
{
    const na_gguf_kv_t *toks;
    size_t arena = 0;
    uint64_t i, n;
    na_status_t st;

    st = na_gguf_get_arr(g, "tokenizer.ggml.tokens", NA_GGUF_STRING, &toks);
    if (st != NA_OK)
        return st;
    n = toks->v.arr.n;
    if (n == 0 || n > (1u << 22))
        return na_err(NA_ERR_RANGE, "%s: field 'tokenizer.ggml.tokens' has %llu entries, "
                      "out of range [1, %u]", g->path, (unsigned long long)n, 1u << 22);
    for (i = 0; i < n; i++) {
        if (toks->v.arr.strs[i].len > NA_TOK_MAX_PIECE)
            return na_err(NA_ERR_RANGE, "%s: field 'tokenizer.ggml.tokens'[%llu]: length %llu "
                          "exceeds %d", g->path, (unsigned long long)i,
                          (unsigned long long)toks->v.arr.strs[i].len, NA_TOK_MAX_PIECE);
        arena += (size_t)toks->v.arr.strs[i].len + 1;
    }
    *toks_p = toks;
    *n_p = n;
    *arena_p = arena;
    return NA_OK;
}

/* The room t->special needs: the tokens of type 2, 3 (control) and 4 (user)
 * of tokenizer.ggml.token_type, the only ones either vocabulary kind makes
 * NA_TOK_CONTROL / NA_TOK_USER; without the field (types NULL), 2: BOS and
 * EOS, which the SentencePiece one then makes control tokens. */
static int na_tok_special_room(const na_gguf_kv_t *types, uint64_t n)
{
    uint64_t i;
    int room = 0;

    if (types == NULL)
        return 2;
    for (i = 0; i < n; i++) {
        int64_t type = na_gguf_arr_i64(types, i);
        room += type == 2 || type == 3 || type == 4;
    }
    return room;
}

/* tokenizer.ggml.model = "gpt2": byte-level BPE (see tokenizer.h). */
static na_status_t na_tok_create_bpe(const na_gguf_t *g, na_tokenizer_t **tok_p)
{
    const na_gguf_kv_t *toks, *types = NULL;
    na_gguf_str_t pre = { 0, NULL };
    na_tokenizer_t *t;
    size_t arena = 0, a = 0;
    uint64_t i, n, mcap;
    int b, def_bos = 0;
    na_status_t st;

    if ((st = na_tok_gguf_tokens(g, &toks, &n, &arena)) != NA_OK)
        return st;
    if ((st = na_tok_side_arr(g, "tokenizer.ggml.token_type", NA_GGUF_INT32, n, &types)) != NA_OK)
        return st;
    if (na_gguf_find(g, "tokenizer.ggml.pre") != NULL &&
        (st = na_gguf_get_str(g, "tokenizer.ggml.pre", &pre)) != NA_OK)
        return st;
    if ((st = na_bpe_merges_size(g, &mcap)) != NA_OK)
        return st;
    t = na_tok_alloc((int)n, arena, na_tok_special_room(types, n), mcap);
    if (t == NULL)
        return na_err(NA_ERR_NOMEM, "%s: no memory for the vocabulary", g->path);
    t->bpe = 1;
    t->bos = t->eos = t->unk = -1;
    if (pre.data == NULL)
        na_log_warn("%s: no tokenizer.ggml.pre: using the default pre-tokenizer (as llama.cpp; "
                    "the ids may differ from the model's own tokenizer)", g->path);
    st = na_pretok_create(pre.data, (size_t)pre.len, &t->pre, &t->ignore_merges, &def_bos);
    if (st != NA_OK) {
        st = na_err_prefix(st, "%s: field 'tokenizer.ggml.pre': ", g->path);
        goto err;
    }
    for (i = 0; i < n; i++) {
        const na_gguf_str_t *s = &toks->v.arr.strs[i];
        int type = types ? (int)na_gguf_arr_i64(types, i) : 1;
        t->pieces[i] = t->arena + a;
        t->kind[i] = type == 2 || type == 3 ? NA_TOK_CONTROL : type == 4 ? NA_TOK_USER :
                     type == 5 ? NA_TOK_UNUSED : NA_TOK_NORMAL;
        if (type == 6 && na_tok_parse_byte(s->data, (size_t)s->len, &t->byte_val[i]))
            t->kind[i] = NA_TOK_BYTE;
        if (t->kind[i] == NA_TOK_NORMAL || t->kind[i] == NA_TOK_UNUSED) {
            t->piece_len[i] = (uint32_t)na_bpe_unmap(t->arena + a, s->data, (size_t)s->len);
        } else {
            memcpy(t->arena + a, s->data, (size_t)s->len);
            t->piece_len[i] = (uint32_t)s->len;
        }
        t->arena[a + t->piece_len[i]] = 0;
        a += t->piece_len[i] + 1;
    }
    t->add_bos = def_bos;
    if ((st = na_tok_id(g, "tokenizer.ggml.bos_token_id", (int)n, &t->bos)) != NA_OK ||
        (st = na_tok_id(g, "tokenizer.ggml.eos_token_id", (int)n, &t->eos)) != NA_OK ||
        (st = na_tok_id(g, "tokenizer.ggml.unknown_token_id", (int)n, &t->unk)) != NA_OK ||
        (st = na_tok_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos)) != NA_OK ||
        (st = na_tok_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos)) != NA_OK)
        goto err;
    na_tok_index(t);
    for (b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = na_tok_lookup(t, &c, 1);
    }
    if ((st = na_bpe_merges_load(t, g)) != NA_OK || (st = na_tok_special_index(t)) != NA_OK)
        goto err;
    na_tok_special_strip(t, g);
    *tok_p = t;
    na_err_clear();
    return NA_OK;

err:
    na_tokenizer_destroy(t);
    return st;
}

na_status_t na_tokenizer_create_gguf(const na_gguf_t *g, na_tokenizer_t **tok_p)
{
    const na_gguf_kv_t *toks, *scores = NULL, *types = NULL;
    na_gguf_str_t model;
    na_tokenizer_t *t;
    size_t arena = 0, a = 0;
    uint32_t v;
    uint64_t i, n;
    na_status_t st;

    if (na_gguf_get_str(g, "tokenizer.ggml.model", &model) == NA_OK &&
        model.len == 4 && memcmp(model.data, "gpt2", 4) == 0)
        return na_tok_create_bpe(g, tok_p);
    if (na_gguf_get_str(g, "tokenizer.ggml.model", &model) == NA_OK &&
        !(model.len == 5 && memcmp(model.data, "llama", 5) == 0))
        return na_err(NA_ERR_UNSUPPORTED, "%s: field 'tokenizer.ggml.model' = '%.*s': only "
                      "'llama' (SentencePiece BPE) and 'gpt2' (byte-level BPE) are supported",
                      g->path, (int)(model.len > 64 ? 64 : model.len), model.data);
    if ((st = na_tok_gguf_tokens(g, &toks, &n, &arena)) != NA_OK)
        return st;
    if ((st = na_tok_side_arr(g, "tokenizer.ggml.scores", NA_GGUF_FLOAT32, n, &scores)) != NA_OK ||
        (st = na_tok_side_arr(g, "tokenizer.ggml.token_type", NA_GGUF_INT32, n, &types)) != NA_OK)
        return st;
    t = na_tok_alloc((int)n, arena, na_tok_special_room(types, n), 0);
    if (t == NULL)
        return na_err(NA_ERR_NOMEM, "%s: no memory for the vocabulary", g->path);
    for (i = 0; i < n; i++) {
        const na_gguf_str_t *s = &toks->v.arr.strs[i];
        int type = types ? (int)na_gguf_arr_i64(types, i) : 1;
        t->pieces[i] = t->arena + a;
        t->piece_len[i] = (uint32_t)na_tok_copy_sp(t->arena + a, s->data, (size_t)s->len);
        a += t->piece_len[i] + 1;
        t->scores[i] = scores ? (float)na_gguf_arr_f64(scores, i) : 0.0f;
        if ((type == 6 || !types) &&
            na_tok_parse_byte(t->pieces[i], t->piece_len[i], &t->byte_val[i]))
            t->kind[i] = NA_TOK_BYTE;
        else if (type == 2 || type == 3)
            t->kind[i] = NA_TOK_CONTROL;
        else if (type == 4)
            t->kind[i] = NA_TOK_USER;
        if (type == 2)
            t->unk = (int)i;
    }
    if (na_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &v) == NA_OK)
        t->bos = (int)v;
    if (na_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &v) == NA_OK)
        t->eos = (int)v;
    if (na_gguf_get_u32(g, "tokenizer.ggml.unknown_token_id", &v) == NA_OK)
        t->unk = (int)v;
    if (t->bos < 0 || t->bos >= (int)n || t->eos < 0 || t->eos >= (int)n ||
        t->unk < 0 || t->unk >= (int)n) {
        st = na_err(NA_ERR_RANGE, "%s: field 'tokenizer.ggml.bos/eos/unknown_token_id' "
                    "(%d/%d/%d) outside the vocabulary of %llu", g->path, t->bos, t->eos,
                    t->unk, (unsigned long long)n);
        na_tokenizer_destroy(t);
        return st;
    }
    if ((st = na_tok_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos)) != NA_OK) {
        na_tokenizer_destroy(t);
        return st;
    }
    if (!types) {
        t->kind[t->bos] = NA_TOK_CONTROL;
        t->kind[t->eos] = NA_TOK_CONTROL;
    }
    na_tok_index(t);
    if ((st = na_tok_special_index(t)) != NA_OK) {
        na_tokenizer_destroy(t);
        return st;
    }
    na_tok_special_strip(t, g);
    *tok_p = t;
    na_err_clear();
    return NA_OK;
}

na_status_t na_tokenizer_open(const char *path, int vocab_size, na_tokenizer_t **tok_p)
{
    char magic[4] = { 0 };
    FILE *f = NULL;
    size_t got;
    na_gguf_t *g;
    na_status_t st = na_tok_open_regular(path, &f);

    if (st != NA_OK)
        return st;
    got = fread(magic, 1, 4, f);
    fclose(f);
    if (got != 4 || memcmp(magic, "GGUF", 4) != 0) {
        if (vocab_size <= 0)
            return na_err(NA_ERR_INVALID, "%s: a llama2.c tokenizer needs the model's "
                          "vocab_size", path);
        return na_tokenizer_create_llama2c(path, vocab_size, tok_p);
    }
    st = na_gguf_open(path, &g);
    if (st != NA_OK)
        return st;
    st = na_tokenizer_create_gguf(g, tok_p);
    if (st == NA_OK && vocab_size > 0 && (*tok_p)->vocab_size != vocab_size) {
        st = na_err(NA_ERR_FORMAT, "%s: tokenizer has %d tokens, the model expects %d",
                    path, (*tok_p)->vocab_size, vocab_size);
        na_tokenizer_destroy(*tok_p);
        *tok_p = NULL;
    }
    na_gguf_destroy(g);
    return st;
}

void na_tokenizer_destroy(na_tokenizer_t *t)
{
    if (t == NULL)
        return;
    na_pretok_destroy(t->pre);
    free(t);                    /* with every array and table of t (na_tok_alloc) */
}

int na_tokenizer_vocab_size(const na_tokenizer_t *t) { return t->vocab_size; }
int na_tokenizer_bos(const na_tokenizer_t *t) { return t->bos; }
int na_tokenizer_eos(const na_tokenizer_t *t) { return t->eos; }
int na_tokenizer_add_bos(const na_tokenizer_t *t) { return t->add_bos && t->bos >= 0; }
int na_tokenizer_add_eos(const na_tokenizer_t *t) { return t->add_eos && t->eos >= 0; }
int na_tokenizer_stop_ids(const na_tokenizer_t *t, int *ids, int cap)
{
    static const char *const eog[] = { "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>",
                                       "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>" };
    int n = 0, k, id, s;
    int cand[2] = { t->eos, t->bos };

    for (k = 0; k < 2; k++) {
        for (s = 0; s < n && ids[s] != cand[k]; s++)
            ;
        if (cand[k] >= 0 && s == n && n < cap)
            ids[n++] = cand[k];
    }
    for (k = 0; t->bpe && k < t->n_special; k++) {
        id = t->special[k];
        if (t->kind[id] != NA_TOK_CONTROL)
            continue;
        for (s = 0; s < (int)(sizeof(eog) / sizeof(eog[0])); s++)
            if (!strcmp(t->pieces[id], eog[s]))
                break;
        if (s == (int)(sizeof(eog) / sizeof(eog[0])))
            continue;
        for (s = 0; s < n && ids[s] != id; s++)
            ;
        if (s == n && n < cap)
            ids[n++] = id;
    }
    return n;
}

const char *na_tokenizer_kind(const na_tokenizer_t *t) { return t->bpe ? "bpe" : "spm"; }

size_t na_tokenizer_max_tokens(size_t text_len) { return NA_TOK_MAX_TOKENS(text_len); }

/* ---- encode (SentencePiece: tok_spm.c; byte-level BPE: tok_bpe.c) ------- */

/* BOS, the text (with its special tokens cut out first where the
 * vocabulary has any: byte-level BPE and GGUF SentencePiece), EOS. */
static na_status_t na_tok_encode_all(const na_tokenizer_t *t, const char *text, size_t len,
                                     unsigned flags, const na_tok_span_t *spans, size_t n_spans,
                                     int *tokens, size_t max, size_t *n_p)
{
    size_t n = 0;
    na_status_t st;

    if ((flags & NA_TOK_ADD_BOS) && t->bos >= 0) {
        if (max < 1)
            return na_err(NA_ERR_NOSPACE, "tokenizer: the tokens do not fit the buffer of %zu",
                          max);
        tokens[n++] = t->bos;
    }
    st = t->bpe || t->n_special > 0
       ? na_tok_encode_parts(t, text, len, flags, spans, n_spans, tokens, max, &n)
       : na_tok_spm_encode(t, text, len, 1, tokens, max, &n);     /* llama2.c's */
    if (st != NA_OK)
        return st;
    if ((flags & NA_TOK_ADD_EOS) && t->eos >= 0) {
        if (n >= max)
            return na_err(NA_ERR_NOSPACE, "tokenizer: the tokens do not fit the buffer of %zu",
                          max);
        tokens[n++] = t->eos;
    }
    *n_p = n;
    return NA_OK;
}

na_status_t na_tokenizer_encode_ex(const na_tokenizer_t *t, const char *text, size_t len,
                                   unsigned flags, const na_tok_span_t *spans, size_t n_spans,
                                   int *tokens, size_t max_tokens, size_t *n_p)
{
    return na_tok_encode_all(t, text, len, flags, spans, n_spans, tokens, max_tokens, n_p);
}

na_status_t na_tokenizer_encode(const na_tokenizer_t *t, const char *text,
                                int bos, int eos, int *tokens, size_t max_tokens,
                                size_t *n_p)
{
    return na_tokenizer_encode_ex(t, text, strlen(text),
                                  (bos ? NA_TOK_ADD_BOS : 0) | (eos ? NA_TOK_ADD_EOS : 0), NULL,
                                  0, tokens, max_tokens, n_p);
}

/* ---- decode ------------------------------------------------------------ */

const char *na_tokenizer_decode_len(const na_tokenizer_t *t, int prev_token, int token,
                                    size_t *len_p)
{
    const char *p;
    size_t len;

    if (token < 0 || token >= t->vocab_size || t->kind[token] == NA_TOK_CONTROL ||
        t->kind[token] == NA_TOK_UNUSED) {
        *len_p = 0;
        return "";
    }
    if (t->bpe && t->kind[token] != NA_TOK_BYTE) {
        *len_p = t->piece_len[token];   /* bytes; a user-defined token's text */
        return t->pieces[token];
    }
    if (t->kind[token] == NA_TOK_BYTE) {
        if (prev_token == t->bos && t->byte_val[token] == ' ') {
            *len_p = 0;               /* the dummy prefix spelled as a byte token */
            return "";
        }
        *len_p = 1;
        return t->byte_str[t->byte_val[token]];
    }
    p = t->pieces[token];
    len = t->piece_len[token];
    if (prev_token == t->bos && len > 0 && p[0] == ' ') {
        p++;
        len--;
    }
    *len_p = len;
    return p;
}

const char *na_tokenizer_decode(const na_tokenizer_t *t, int prev_token, int token)
{
    size_t len;
    return na_tokenizer_decode_len(t, prev_token, token, &len);
}

na_status_t na_tokenizer_decode_all(const na_tokenizer_t *t, const int *tokens, size_t n,
                                    char *buf, size_t len, size_t *out_len_p)
{
    size_t i, o = 0;
    na_status_t st = NA_OK;

    if (len == 0)
        return na_err(NA_ERR_NOSPACE, "tokenizer: empty decode buffer");
    for (i = 0; i < n; i++) {
        size_t pl;
        const char *p = na_tokenizer_decode_len(t, i > 0 ? tokens[i - 1] : -1, tokens[i], &pl);
        if (pl > len - 1 - o) {
            pl = len - 1 - o;
            st = na_err(NA_ERR_NOSPACE, "tokenizer: decoded text exceeds %zu bytes", len - 1);
        }
        memcpy(buf + o, p, pl);
        o += pl;
        if (st != NA_OK)
            break;
    }
    buf[o] = 0;
    if (out_len_p)
        *out_len_p = o;
    return st;
}

const char *na_tokenizer_piece(const na_tokenizer_t *t, int token)
{
    return token >= 0 && token < t->vocab_size ? t->pieces[token] : NULL;
}

float na_tokenizer_score(const na_tokenizer_t *t, int token)
{
    return token >= 0 && token < t->vocab_size ? t->scores[token] : 0.0f;
}

na_status_t na_tokenizer_open_for_model(const na_model_t *m, const char *model_path,
                                        const char *given, char *used, size_t used_cap,
                                        na_tokenizer_t **tok_p)
{
    size_t len = strlen(model_path);
    const char *slash;
    char path[4096];

    if (given != NULL) {
        snprintf(path, sizeof(path), "%s", given);     /* given may be `used` */
        snprintf(used, used_cap, "%s", path);
        return na_tokenizer_open(path, m->cfg.vocab_size, tok_p);
    }
    used[0] = '\0';
    if (m->gguf != NULL)
        return na_tokenizer_create_gguf(m->gguf, tok_p);
    if (len > 4 && !strcmp(model_path + len - 4, ".bin")) {
        snprintf(path, sizeof(path), "%.*s.tok.bin", (int)(len - 4), model_path);
        if (access(path, R_OK) == 0) {
            snprintf(used, used_cap, "%s", path);
            return na_tokenizer_open(path, m->cfg.vocab_size, tok_p);
        }
    }
    slash = strrchr(model_path, '/');
    snprintf(path, sizeof(path), "%.*stokenizer.bin", slash ? (int)(slash - model_path + 1) : 0,
             model_path);
    if (access(path, R_OK) == 0) {
        snprintf(used, used_cap, "%s", path);
        return na_tokenizer_open(path, m->cfg.vocab_size, tok_p);
    }
    return na_err(NA_ERR_NOT_FOUND, "%s is a llama2.c checkpoint without a tokenizer: "
                  "give one with --tokenizer", model_path);
}
