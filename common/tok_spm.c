/* common/tok_spm.c — SentencePiece encoding (tok_internal.h:
 * na_tok_spm_encode): one token per code point (byte tokens where none),
 * then the best-scoring adjacent pair merged until none is a piece, with a
 * binary heap of candidates so long prompts cost O(n log n) rather than
 * O(n^2). Below tokenizer.c and tok_special.c; calls nothing above. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

typedef struct {
    int id;
    int prev, next;           /* list links, -1 at the ends */
} na_tok_node_t;

/* Push the merge candidate (nodes[pos], its next) if the pair is a piece. */
static void na_tok_try_pair(const na_tokenizer_t *t, const na_tok_node_t *nodes, int pos,
                            char *scratch, na_tok_cand_t *heap, size_t *nheap)
{
    int r, l, m;
    uint32_t ll, rl;
    na_tok_cand_t c;

    if (pos < 0 || (r = nodes[pos].next) < 0)
        return;
    l = nodes[pos].id;
    ll = t->piece_len[l];
    rl = t->piece_len[nodes[r].id];
    memcpy(scratch, t->pieces[l], ll);
    memcpy(scratch + ll, t->pieces[nodes[r].id], rl);
    m = na_tok_lookup(t, scratch, (size_t)ll + rl);
    if (m < 0 || t->scores[m] <= -1e10f)
        return;
    c.key = -(double)t->scores[m];    /* the highest score first */
    c.pos = pos;
    c.left = l;
    c.right = nodes[r].id;
    c.to = m;
    na_tok_heap_push(heap, nheap, c);
}

/* Length of the UTF-8 code point at s, of the rem bytes left (1 if not a
 * valid multi-byte start, or cut short). */
static size_t na_tok_cp_len(const uint8_t *s, size_t rem)
{
    size_t want, i;
    if (s[0] < 0xC0 || s[0] > 0xF7)
        return 1;
    want = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : 2;
    if (want > rem)
        return 1;
    for (i = 1; i < want; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 1;
    return want;
}

/* SentencePiece: text[0..len) as llama2.c's run.c encodes it (the dummy
 * space prefix when `prefix`), appended to tokens[*n_p .. max_tokens). */
na_status_t na_tok_spm_encode(const na_tokenizer_t *t, const char *text, size_t len, int prefix,
                              int *tokens, size_t max_tokens, size_t *n_p)
{
    size_t n = 0, nheap = 0, i, out = *n_p;
    na_tok_node_t *nodes;
    na_tok_cand_t *heap;
    char *scratch;
    const uint8_t *s = (const uint8_t *)text;
    int head;

    nodes = malloc((len + 1) * sizeof(*nodes));
    heap = malloc((3 * len + 4) * sizeof(*heap));
    scratch = malloc(2 * (size_t)t->max_piece_len + 1);
    if (!nodes || !heap || !scratch) {
        free(nodes);
        free(heap);
        free(scratch);
        return na_err(NA_ERR_NOMEM, "tokenizer: no memory to encode %zu bytes", len);
    }
    /* 1. dummy prefix, then one token per code point or per byte */
    if (len > 0 && prefix) {
        int sp = na_tok_lookup(t, " ", 1);
        nodes[n++].id = sp >= 0 ? sp : (t->byte_id[' '] >= 0 ? t->byte_id[' '] : t->unk);
    }
    for (i = 0; i < len;) {
        size_t cl = na_tok_cp_len(s + i, len - i), k;
        int id = na_tok_lookup(t, text + i, cl);
        if (id >= 0) {
            nodes[n++].id = id;
        } else {
            for (k = 0; k < cl; k++) {
                int b = t->byte_id[s[i + k]];
                nodes[n++].id = b >= 0 ? b : t->unk;
            }
        }
        i += cl;
    }
    for (i = 0; i < n; i++) {
        nodes[i].prev = (int)i - 1;
        nodes[i].next = i + 1 < n ? (int)i + 1 : -1;
    }
    /* 2. merge the best-scoring adjacent pair until none is a piece */
    for (i = 0; i + 1 < n; i++)
        na_tok_try_pair(t, nodes, (int)i, scratch, heap, &nheap);
    while (nheap > 0) {
        na_tok_cand_t c = na_tok_heap_pop(heap, &nheap);
        int r = nodes[c.pos].next;
        if (nodes[c.pos].id != c.left || r < 0 || nodes[r].id != c.right)
            continue;                              /* stale candidate */
        nodes[c.pos].id = c.to;
        nodes[c.pos].next = nodes[r].next;
        if (nodes[r].next >= 0)
            nodes[nodes[r].next].prev = c.pos;
        nodes[r].id = -1;
        na_tok_try_pair(t, nodes, nodes[c.pos].prev, scratch, heap, &nheap);
        na_tok_try_pair(t, nodes, c.pos, scratch, heap, &nheap);
    }
    /* 3. emit */
    head = n > 0 ? 0 : -1;
    for (; head >= 0; head = nodes[head].next) {
        if (out >= max_tokens)
            goto err_nospace;
        tokens[out++] = nodes[head].id;
    }
    free(nodes);
    free(heap);
    free(scratch);
    *n_p = out;
    return NA_OK;

err_nospace:
    free(nodes);
    free(heap);
    free(scratch);
    return na_err(NA_ERR_NOSPACE, "tokenizer: %zu tokens do not fit the buffer of %zu",
                  NA_TOK_MAX_TOKENS(len), max_tokens);
}
