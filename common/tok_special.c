/* common/tok_special.c — special tokens in text for byte-level BPE
 * vocabularies: control tokens (<|begin_of_text|>, <|im_start|>) and
 * user-defined (added) ones are cut out of the text before the
 * pre-tokenizer sees it, longest token first, as llama.cpp's
 * tokenizer_st_partition does. User-defined tokens are recognised in any
 * text; control tokens only where the caller allows (NA_TOK_PARSE_SPECIAL,
 * or inside the spans it gives: the template parts of a chat). A token
 * with the LSTRIP / RSTRIP attribute takes the ASCII white space (C
 * isspace) before / after it along, as tokenizer_st_partition does. */
#define _GNU_SOURCE             /* memmem */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tok_internal.h"

/* C's isspace in the "C" locale, whatever the locale is. */
static int na_tok_isspace(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* The id of the token whose text is s (any kind), or -1. */
static int na_tok_find_text(const na_tokenizer_t *t, const char *s)
{
    size_t l = strlen(s);
    int id;
    for (id = 0; id < t->vocab_size; id++)
        if (t->piece_len[id] == l && memcmp(t->pieces[id], s, l) == 0)
            return id;
    return -1;
}

/* Whether the string value of key holds one of the needles (after ASCII
 * lowercasing when lower). */
static int na_tok_key_has(const struct na_gguf *g, const char *key, int lower,
                          const char *const *needles, size_t n)
{
    na_gguf_str_t v;
    char buf[256];
    size_t i, l;
    if (na_gguf_find(g, key) == NULL || na_gguf_get_str(g, key, &v) != NA_OK)
        return 0;
    l = v.len < sizeof(buf) - 1 ? (size_t)v.len : sizeof(buf) - 1;
    for (i = 0; i < l; i++)
        buf[i] = lower ? (char)tolower((unsigned char)v.data[i]) : v.data[i];
    buf[l] = 0;
    for (i = 0; i < n; i++)
        if (strstr(buf, needles[i]) != NULL)
            return 1;
    return 0;
}

void na_tok_special_strip(na_tokenizer_t *t, const struct na_gguf *g)
{
    static const char *const jina[] = { "jina-v2-de", "jina-v2-es", "jina-v2-code" };
    static const char *const phi3[] = { "phi-3", "phi3" };
    static const char *const keep[] = { "<unk>", "<s>", "<|endoftext|>" };
    int id, i;

    if (na_tok_key_has(g, "tokenizer.ggml.pre", 0, jina, 3)) {
        if ((id = na_tok_find_text(t, "<mask>")) >= 0)
            t->strip[id] |= NA_TOK_LSTRIP;
    } else if (na_tok_key_has(g, "general.name", 1, phi3, 2)) {
        for (i = 0; i < t->n_special; i++)
            t->strip[t->special[i]] |= NA_TOK_RSTRIP;
        if ((id = na_tok_find_text(t, "</s>")) >= 0)
            t->strip[id] |= NA_TOK_RSTRIP;
        for (i = 0; i < 3; i++)
            if ((id = na_tok_find_text(t, keep[i])) >= 0)
                t->strip[id] &= (uint8_t)~NA_TOK_RSTRIP;
    }
}

typedef struct {
    uint32_t len;
    int      id;
} na_tok_by_len_t;

/* Longest text first, then lowest id. */
static int na_tok_special_cmp(const void *a, const void *b)
{
    const na_tok_by_len_t *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

na_status_t na_tok_special_index(na_tokenizer_t *t)
{
    na_tok_by_len_t *v;
    int id, n = 0;

    for (id = 0; id < t->vocab_size; id++)
        if ((t->kind[id] == NA_TOK_CONTROL || t->kind[id] == NA_TOK_USER) && t->piece_len[id] > 0)
            n++;
    if (n == 0)
        return NA_OK;
    v = malloc((size_t)n * sizeof(*v));
    if (v == NULL)
        return na_err(NA_ERR_NOMEM, "tokenizer: no memory for %d special tokens", n);
    n = 0;
    for (id = 0; id < t->vocab_size; id++)
        if ((t->kind[id] == NA_TOK_CONTROL || t->kind[id] == NA_TOK_USER) && t->piece_len[id] > 0)
            v[n++] = (na_tok_by_len_t){ t->piece_len[id], id };
    qsort(v, (size_t)n, sizeof(*v), na_tok_special_cmp);
    for (id = 0; id < n; id++)
        t->special[id] = v[id].id;
    t->n_special = n;
    free(v);
    return NA_OK;
}

/* A piece of the text: raw text (id < 0) or a special token. */
typedef struct {
    size_t off, len;
    int    id;
} na_tok_frag_t;

/* Whether [off, off+len) lies inside one of the spans. */
static int na_tok_in_spans(const na_tok_span_t *sp, size_t n, size_t off, size_t len)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (off >= sp[i].off && off + len <= sp[i].off + sp[i].len)
            return 1;
    return 0;
}

/* The next occurrence of p[0..pl) in text[off..end) that may be taken, or NULL. */
static const char *na_tok_next_hit(const char *text, size_t off, size_t end, const char *p,
                                   size_t pl, int check, const na_tok_span_t *sp, size_t n_sp)
{
    while (off < end && end - off >= pl) {
        const char *hit = memmem(text + off, end - off, p, pl);
        if (hit == NULL)
            return NULL;
        if (!check || na_tok_in_spans(sp, n_sp, (size_t)(hit - text), pl))
            return hit;
        off = (size_t)(hit - text) + 1;
    }
    return NULL;
}

/* Room for `need` more pieces in b (a grows alike: the lists swap). */
static int na_tok_frag_room(na_tok_frag_t **a, na_tok_frag_t **b, size_t *cap, size_t nb,
                            size_t need)
{
    na_tok_frag_t *x;
    size_t c = *cap;
    if (nb + need <= c)
        return 0;
    while (nb + need > c)
        c *= 2;
    if ((x = realloc(*a, c * sizeof(**a))) == NULL)
        return -1;
    *a = x;
    if ((x = realloc(*b, c * sizeof(**b))) == NULL)
        return -1;
    *b = x;
    *cap = c;
    return 0;
}

na_status_t na_tok_encode_parts(const na_tokenizer_t *t, const char *text, size_t len,
                                unsigned flags, const na_tok_span_t *spans, size_t n_spans,
                                int *tokens, size_t max, size_t *n_p)
{
    na_tok_frag_t *a, *b, *tmp;
    size_t na = 0, cap = 16, k;
    na_status_t st = NA_OK;
    int s;

    a = malloc(cap * sizeof(*a));
    b = malloc(cap * sizeof(*b));
    if (a == NULL || b == NULL)
        goto nomem;
    if (len > 0)
        a[na++] = (na_tok_frag_t){ 0, len, -1 };
    for (s = 0; s < t->n_special; s++) {
        int id = t->special[s];
        const char *p = t->pieces[id];
        size_t pl = t->piece_len[id], nb = 0;
        int control = t->kind[id] == NA_TOK_CONTROL;
        int check = control && !(flags & NA_TOK_PARSE_SPECIAL);

        if (check && n_spans == 0)
            continue;                  /* control tokens not asked for */
        for (k = 0; k < na; k++) {
            size_t off = a[k].off, end = a[k].off + a[k].len;
            const char *hit;
            if (a[k].id < 0) {
                while ((hit = na_tok_next_hit(text, off, end, p, pl, check, spans, n_spans))) {
                    size_t h = (size_t)(hit - text), left = h;
                    if (na_tok_frag_room(&a, &b, &cap, nb, 2) != 0)
                        goto nomem;
                    if (t->strip[id] & NA_TOK_LSTRIP)
                        while (left > off && na_tok_isspace(text[left - 1]))
                            left--;
                    if (left > off)
                        b[nb++] = (na_tok_frag_t){ off, left - off, -1 };
                    b[nb++] = (na_tok_frag_t){ h, pl, id };
                    off = h + pl;
                    if (t->strip[id] & NA_TOK_RSTRIP)
                        while (off < end && na_tok_isspace(text[off]))
                            off++;
                }
                if (off >= end)
                    continue;
            }
            if (na_tok_frag_room(&a, &b, &cap, nb, 1) != 0)
                goto nomem;
            b[nb++] = a[k].id < 0 ? (na_tok_frag_t){ off, end - off, -1 } : a[k];
        }
        tmp = a;
        a = b;
        b = tmp;
        na = nb;
    }
    for (k = 0; k < na && st == NA_OK; k++) {
        if (a[k].id < 0 && t->bpe)
            st = na_bpe_encode(t, text + a[k].off, a[k].len, tokens, max, n_p);
        else if (a[k].id < 0)
            st = na_tok_spm_encode(t, text + a[k].off, a[k].len, k == 0 || a[k - 1].id >= 0,
                                   tokens, max, n_p);
        else if (*n_p >= max)
            st = na_err(NA_ERR_NOSPACE, "tokenizer: the tokens do not fit the buffer of %zu", max);
        else
            tokens[(*n_p)++] = a[k].id;
    }
    free(a);
    free(b);
    return st;

nomem:
    free(a);
    free(b);
    return na_err(NA_ERR_NOMEM, "tokenizer: no memory to encode %zu bytes", len);
}
