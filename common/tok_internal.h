/* common/tok_internal.h — the tokenizer object shared by the files of the
 * tokenizer, top-down: tokenizer.c (the vocabulary, loading, the API) →
 * tok_special.c (special tokens in text) → tok_bpe.c (byte-level BPE merges)
 * and tok_spm.c (SentencePiece merges); the merge heap and the piece lookup
 * both merge loops use are static inline here, so no file calls up. Not for
 * other modules: they use tokenizer.h. */
#ifndef NA_TOK_INTERNAL_H
#define NA_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/fnv.h"
#include "tok_pretok.h"
#include "tokenizer.h"

/* kind[] of a token */
enum {
    NA_TOK_NORMAL  = 0,
    NA_TOK_CONTROL = 1,       /* BOS/EOS/unknown/<|im_start|>: decodes to "", never from text
                               * unless special tokens are parsed */
    NA_TOK_BYTE    = 2,       /* <0xNN> */
    NA_TOK_USER    = 3,       /* user-defined (added) token: found in any text, decodes to
                               * its text */
    NA_TOK_UNUSED  = 4,       /* padding: decodes to "" */
};

/* strip[] of a special token (llama.cpp's LLAMA_TOKEN_ATTR_LSTRIP / RSTRIP):
 * cut out of text, it takes the white space before / after it along */
enum {
    NA_TOK_LSTRIP = 1,
    NA_TOK_RSTRIP = 2,
};

/* A slot of the BPE merge table (open addressing; tok_bpe.c): the pair's key
 * (left << 32 | right) + 1, 0 when the slot is empty, with its rank (index in
 * tokenizer.ggml.merges) and the merged token side by side, so a probe that
 * hits reads one cache line. */
typedef struct {
    uint64_t key;
    uint32_t rank;
    int32_t  to;
} na_tok_merge_t;

struct na_tokenizer {
    int       vocab_size;
    char    **pieces;        /* [vocab] NUL-terminated, into arena; the arrays, the merge
                              * table and the special list follow the struct in its one
                              * block (na_tok_alloc). BPE: normal pieces hold raw bytes
                              * (byte-to-unicode mapping undone) */
    uint32_t *piece_len;     /* [vocab] */
    float    *scores;        /* [vocab] */
    uint8_t  *kind;          /* [vocab] NA_TOK_* */
    uint8_t  *byte_val;      /* [vocab] value of a byte token */
    uint8_t  *strip;         /* [vocab] NA_TOK_LSTRIP | NA_TOK_RSTRIP of special tokens */
    char     *arena;
    uint32_t  max_piece_len;
    uint32_t *hash;          /* [hash_mask+1] token id + 1, 0 = empty */
    uint32_t  hash_mask;
    int       byte_id[256];  /* SPM: the <0xNN> token of each byte; BPE: the token of the
                              * one-byte piece; -1 if none */
    int       bos, eos, unk;
    char      byte_str[256][2];
    /* byte-level BPE (tokenizer.ggml.model = "gpt2"); bpe == 0: SentencePiece */
    int          bpe;
    int          add_bos, add_eos;   /* what the file asks (tokenizer.ggml.add_*_token) */
    int          ignore_merges;      /* a word that is a token is taken whole (llama3) */
    na_pretok_t *pre;
    na_tok_merge_t *merges;          /* [mmask+1] the merge table (NULL: no merges) */
    uint64_t     mmask;
    int         *special;            /* [n_special] control / user tokens, longest text first */
    int          n_special;
};

/* A merge candidate of both merge loops (SentencePiece in tok_spm.c,
 * byte-level BPE in tok_bpe.c): the pair (left, right) at node pos, which
 * merges into token `to`. The heap pops the smallest key first (BPE: the
 * merge's rank; SentencePiece: minus the merged piece's score), equal keys
 * leftmost first. */
typedef struct {
    double key;
    int    pos;                /* left node */
    int    left, right, to;    /* token ids when pushed */
} na_tok_cand_t;

/* Heap order: higher score first, then leftmost. */
static inline int na_tok_before(const na_tok_cand_t *a, const na_tok_cand_t *b)
{
    return a->key < b->key || (a->key == b->key && a->pos < b->pos);
}

static inline void na_tok_heap_push(na_tok_cand_t *h, size_t *n, na_tok_cand_t c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!na_tok_before(&c, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static inline na_tok_cand_t na_tok_heap_pop(na_tok_cand_t *h, size_t *n)
{
    na_tok_cand_t top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && na_tok_before(&h[c + 1], &h[c]))
            c++;
        if (!na_tok_before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

/* The hash of the piece s[0..len) (the table tokenizer.c builds). */
static inline uint32_t na_tok_hash(const char *s, size_t len)
{
    return (uint32_t)na_fnv1a64(s, len);
}

/* Token id of the piece s[0..len) (normal, user and unused tokens), or -1. */
static inline int na_tok_lookup(const na_tokenizer_t *t, const char *s, size_t len)
{
    uint32_t i = na_tok_hash(s, len) & t->hash_mask;
    for (;;) {
        uint32_t e = t->hash[i];
        if (e == 0)
            return -1;
        if (t->piece_len[e - 1] == len && memcmp(t->pieces[e - 1], s, len) == 0)
            return (int)(e - 1);
        i = (i + 1) & t->hash_mask;
    }
}

/* na_tokenizer_max_tokens: tokens that encoding text_len bytes may give. */
#define NA_TOK_MAX_TOKENS(text_len) ((text_len) + 3)

/* tok_bpe.c: the byte-to-unicode mapping of GPT-2 vocabularies undone on
 * s[0..len) into dst (room for len bytes): a mapped code point becomes its
 * byte, anything else is copied. Returns the bytes written. */
size_t na_bpe_unmap(char *dst, const char *s, size_t len);
/* The slots of the merge table of tokenizer.ggml.merges into *cap_p (0
 * without the field; t->merges is that many slots of t's block):
 * NA_ERR_RANGE past 2^24 merges, the field's type error. */
na_status_t na_bpe_merges_size(const struct na_gguf *g, uint64_t *cap_p);
/* Read tokenizer.ggml.merges into t->merges (sized by na_bpe_merges_size;
 * after the hash is built). NA_ERR_FORMAT naming the file, the field and
 * the entry for a merge that names an unknown token or whose result is none. */
na_status_t na_bpe_merges_load(na_tokenizer_t *t, const struct na_gguf *g);
/* Encode raw text (no special tokens in it) by pre-tokenizer words and
 * merges, appending to tokens[*n_p ..max). NA_ERR_NOSPACE, NA_ERR_NOMEM. */
na_status_t na_bpe_encode(const na_tokenizer_t *t, const char *text, size_t len, int *tokens,
                          size_t max, size_t *n_p);

/* tok_spm.c: SentencePiece-encode raw text (no special tokens in it),
 * with the dummy space prefix when `prefix`, appending to
 * tokens[*n_p .. max). NA_ERR_NOSPACE, NA_ERR_NOMEM. */
na_status_t na_tok_spm_encode(const na_tokenizer_t *t, const char *text, size_t len, int prefix,
                              int *tokens, size_t max, size_t *n_p);

/* tok_special.c: the special-token list (t->special, room in t's block),
 * built after the kinds are known; NA_ERR_NOMEM. */
na_status_t na_tok_special_index(na_tokenizer_t *t);
/* tok_special.c: the strip attributes (t->strip), set by name as llama.cpp
 * c392e5094 sets them (llama_vocab::impl::load): "<mask>" LSTRIP for the
 * jina-v2-de/-es/-code pre-tokenizers; for a general.name holding "phi-3"
 * or "phi3", RSTRIP on every special token and "</s>" but "<unk>", "<s>"
 * and "<|endoftext|>". Tokens it names that the vocabulary lacks are
 * skipped. Cannot fail. */
void na_tok_special_strip(na_tokenizer_t *t, const struct na_gguf *g);
/* Encode text[0..len), its special tokens cut out first (see
 * na_tokenizer_encode_ex for flags and spans), appending to
 * tokens[*n_p .. max): byte-level BPE encodes each raw piece; SentencePiece
 * too, with the dummy space prefix on the first piece and on each after a
 * special token (llama.cpp's is_prev_special). */
na_status_t na_tok_encode_parts(const na_tokenizer_t *t, const char *text, size_t len,
                                unsigned flags, const na_tok_span_t *spans, size_t n_spans,
                                int *tokens, size_t max, size_t *n_p);

#endif /* NA_TOK_INTERNAL_H */
