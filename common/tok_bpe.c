/* common/tok_bpe.c — byte-level BPE (GPT-2 vocabularies, tokenizer.ggml.model
 * = "gpt2"): the byte-to-unicode mapping, the merges table and the encoding
 * of one pre-tokenizer word by merge rank.
 *
 * The vocabulary and the merges are kept in raw bytes (the mapping undone at
 * load), so a word of the text is encoded without mapping it: its bytes
 * start as the one-byte tokens, then the adjacent pair of lowest rank (the
 * leftmost among equals) is merged until no pair is a merge, as llama.cpp's
 * llm_tokenizer_bpe_session does. */
#include <stdlib.h>
#include <string.h>

#include "common/fnv.h"
#include "gguf.h"
#include "tok_internal.h"

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 bytes for U+0100.. in byte order. */
static int na_bpe_is_direct(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The byte a code point stands for, or -1. The 68 other bytes, in order:
 * 0x00-0x20, 0x7F-0xA0, 0xAD. */
static int na_bpe_cp_byte(uint32_t cp)
{
    if (cp < 256)
        return na_bpe_is_direct(cp) ? (int)cp : -1;
    if (cp < 256 + 33)
        return (int)(cp - 256);
    if (cp < 256 + 67)
        return (int)(0x7F + cp - (256 + 33));
    return cp == 256 + 67 ? 0xAD : -1;
}

size_t na_bpe_unmap(char *dst, const char *s, size_t len)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0, o = 0;

    while (i < len) {
        uint32_t cp = u[i];
        size_t cl = 1;
        int b;
        if (u[i] >= 0xC2 && u[i] <= 0xDF && i + 1 < len && (u[i + 1] & 0xC0) == 0x80) {
            cp = ((uint32_t)(u[i] & 0x1F) << 6) | (u[i + 1] & 0x3F);
            cl = 2;
        } else if (u[i] >= 0x80) {
            cp = 0x110000;             /* longer sequences map to no byte: copied below */
            if (u[i] >= 0xE0 && u[i] <= 0xF4)
                while (cl < (u[i] >= 0xF0 ? 4u : 3u) && i + cl < len &&
                       (u[i + cl] & 0xC0) == 0x80)
                    cl++;
        }
        b = na_bpe_cp_byte(cp);
        if (b >= 0) {
            dst[o++] = (char)b;
        } else {
            memcpy(dst + o, s + i, cl);
            o += cl;
        }
        i += cl;
    }
    return o;
}

/* ---- merges ------------------------------------------------------------ */

static uint64_t na_bpe_key(int l, int r) { return ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1; }

static uint64_t na_bpe_slot(const na_tokenizer_t *t, uint64_t key)
{
    return na_fnv1a64(&key, sizeof(key)) & t->mmask;
}

/* The merge of (l, r): its rank and result, or 0. */
static int na_bpe_find(const na_tokenizer_t *t, int l, int r, uint32_t *rank, int *to)
{
    uint64_t key = na_bpe_key(l, r), i;
    if (t->merges == NULL)
        return 0;
    for (i = na_bpe_slot(t, key);; i = (i + 1) & t->mmask) {
        const na_tok_merge_t *m = &t->merges[i];
        if (m->key == 0)
            return 0;
        if (m->key == key) {
            *rank = m->rank;
            *to = m->to;
            return 1;
        }
    }
}

na_status_t na_bpe_merges_size(const na_gguf_t *g, uint64_t *cap_p)
{
    const na_gguf_kv_t *kv;
    uint64_t n, cap = 16;
    na_status_t st;

    *cap_p = 0;
    if (na_gguf_find(g, "tokenizer.ggml.merges") == NULL)
        return NA_OK;                  /* no merges: every byte its own token */
    if ((st = na_gguf_get_arr(g, "tokenizer.ggml.merges", NA_GGUF_STRING, &kv)) != NA_OK)
        return st;
    n = kv->v.arr.n;
    if (n > (1u << 24))
        return na_err(NA_ERR_RANGE, "%s: field 'tokenizer.ggml.merges' has %llu entries, "
                      "more than %u", g->path, (unsigned long long)n, 1u << 24);
    while (cap < 2 * n)
        cap <<= 1;
    *cap_p = cap;
    return NA_OK;
}

na_status_t na_bpe_merges_load(na_tokenizer_t *t, const na_gguf_t *g)
{
    const na_gguf_kv_t *kv;
    uint64_t n, i;
    size_t longest = 0;
    char *buf;
    na_status_t st;

    if (t->merges == NULL)
        return NA_OK;                  /* no merges: every byte its own token */
    if ((st = na_gguf_get_arr(g, "tokenizer.ggml.merges", NA_GGUF_STRING, &kv)) != NA_OK)
        return st;
    n = kv->v.arr.n;
    for (i = 0; i < n; i++)
        if (kv->v.arr.strs[i].len > longest)
            longest = (size_t)kv->v.arr.strs[i].len;
    if ((buf = malloc(longest + 1)) == NULL)
        return na_err(NA_ERR_NOMEM, "%s: no memory for %llu merges", g->path,
                      (unsigned long long)n);
    for (i = 0; i < n; i++) {
        const na_gguf_str_t *s = &kv->v.arr.strs[i];
        const char *sp = s->len > 1 ? memchr(s->data + 1, ' ', (size_t)s->len - 1) : NULL;
        size_t ll, rl;
        int l, r, to;
        uint32_t rank0;
        uint64_t key, k;

        if (sp == NULL || sp + 1 == s->data + s->len) {
            st = na_err(NA_ERR_FORMAT, "%s: field 'tokenizer.ggml.merges'[%llu] = '%.*s' is not "
                        "two tokens separated by a space", g->path, (unsigned long long)i,
                        (int)(s->len > 64 ? 64 : s->len), s->data);
            goto out;
        }
        ll = na_bpe_unmap(buf, s->data, (size_t)(sp - s->data));
        rl = na_bpe_unmap(buf + ll, sp + 1, (size_t)(s->data + s->len - sp - 1));
        l = na_tok_lookup(t, buf, ll);
        r = na_tok_lookup(t, buf + ll, rl);
        to = na_tok_lookup(t, buf, ll + rl);
        if (l < 0 || r < 0 || to < 0) {
            const char *what = l < 0 ? "its left side" : r < 0 ? "its right side"
                                                         : "the merged text";
            st = na_err(NA_ERR_FORMAT, "%s: field 'tokenizer.ggml.merges'[%llu] = '%.*s': %s is "
                        "not a token of tokenizer.ggml.tokens", g->path, (unsigned long long)i,
                        (int)(s->len > 64 ? 64 : s->len), s->data, what);
            goto out;
        }
        if (na_bpe_find(t, l, r, &rank0, &to))
            continue;                  /* a repeated pair keeps its first rank */
        key = na_bpe_key(l, r);
        for (k = na_bpe_slot(t, key); t->merges[k].key != 0; k = (k + 1) & t->mmask)
            ;
        t->merges[k].key = key;
        t->merges[k].rank = (uint32_t)i;
        t->merges[k].to = to;
    }
    st = NA_OK;
out:
    free(buf);
    return st;
}

/* ---- encoding ---------------------------------------------------------- */

typedef struct {
    int id;
    int prev, next;
} na_bpe_node_t;

typedef struct {
    const na_tokenizer_t *t;
    const char           *text;
    int                  *tokens;
    size_t                max, n;
    na_bpe_node_t        *nodes;   /* scratch, grown to the longest word */
    na_tok_cand_t        *heap;
    size_t                cap;
    na_status_t           st;
} na_bpe_ctx_t;

static void na_bpe_try(const na_tokenizer_t *t, const na_bpe_node_t *nodes, int pos,
                       na_tok_cand_t *heap, size_t *nheap)
{
    na_tok_cand_t c;
    uint32_t rank;
    int r;
    if (pos < 0 || (r = nodes[pos].next) < 0 || nodes[pos].id < 0 || nodes[r].id < 0)
        return;
    if (!na_bpe_find(t, nodes[pos].id, nodes[r].id, &rank, &c.to))
        return;
    c.key = rank;                      /* the lowest rank first */
    c.pos = pos;
    c.left = nodes[pos].id;
    c.right = nodes[r].id;
    na_tok_heap_push(heap, nheap, c);
}

static int na_bpe_emit(na_bpe_ctx_t *x, int id)
{
    if (x->n >= x->max) {
        x->st = na_err(NA_ERR_NOSPACE, "tokenizer: the tokens do not fit the buffer of %zu",
                       x->max);
        return -1;
    }
    x->tokens[x->n++] = id;
    return 0;
}

static int na_bpe_word(void *user, size_t off, size_t len)
{
    na_bpe_ctx_t *x = user;
    const na_tokenizer_t *t = x->t;
    const uint8_t *w = (const uint8_t *)x->text + off;
    size_t i, nheap = 0;
    int head;

    if (t->ignore_merges) {
        int id = na_tok_lookup(t, x->text + off, len);
        if (id >= 0)
            return na_bpe_emit(x, id);
    }
    if (len > x->cap) {
        size_t cap = len > 2 * x->cap ? len : 2 * x->cap;
        na_bpe_node_t *nodes = realloc(x->nodes, cap * sizeof(*nodes));
        na_tok_cand_t *heap;
        if (nodes != NULL)
            x->nodes = nodes;
        heap = nodes != NULL ? realloc(x->heap, 3 * cap * sizeof(*heap)) : NULL;
        if (heap == NULL) {
            x->st = na_err(NA_ERR_NOMEM, "tokenizer: no memory for a word of %zu bytes", len);
            return -1;
        }
        x->heap = heap;
        x->cap = cap;
    }
    for (i = 0; i < len; i++) {
        x->nodes[i].id = t->byte_id[w[i]];
        x->nodes[i].prev = (int)i - 1;
        x->nodes[i].next = i + 1 < len ? (int)i + 1 : -1;
    }
    for (i = 0; i + 1 < len; i++)
        na_bpe_try(t, x->nodes, (int)i, x->heap, &nheap);
    while (nheap > 0) {
        na_tok_cand_t c = na_tok_heap_pop(x->heap, &nheap);
        na_bpe_node_t *nd = x->nodes;
        int r = nd[c.pos].next;
        if (nd[c.pos].id != c.left || r < 0 || nd[r].id != c.right)
            continue;                  /* stale */
        nd[c.pos].id = c.to;
        nd[c.pos].next = nd[r].next;
        if (nd[r].next >= 0)
            nd[nd[r].next].prev = c.pos;
        nd[r].id = -1;
        nd[r].next = -1;
        na_bpe_try(t, nd, nd[c.pos].prev, x->heap, &nheap);
        na_bpe_try(t, nd, c.pos, x->heap, &nheap);
    }
    for (head = 0; head >= 0; head = x->nodes[head].next)
        if (x->nodes[head].id >= 0 && na_bpe_emit(x, x->nodes[head].id) != 0)
            return -1;                 /* a byte without a token is dropped, as llama.cpp */
    return 0;
}

na_status_t na_bpe_encode(const na_tokenizer_t *t, const char *text, size_t len, int *tokens,
                          size_t max, size_t *n_p)
{
    na_bpe_ctx_t x = { t, text, tokens, max, *n_p, NULL, NULL, 0, NA_OK };
    na_status_t st = na_pretok_split(t->pre, text, len, na_bpe_word, &x);

    free(x.nodes);
    free(x.heap);
    if (st == NA_ERR_NOSPACE && x.st != NA_OK)
        st = x.st;
    if (st == NA_OK)
        *n_p = x.n;
    return st;
}
