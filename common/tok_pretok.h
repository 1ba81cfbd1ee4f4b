/* common/tok_pretok.h — the pre-tokenizer of a byte-level BPE vocabulary:
 * the text split into words by the regular expressions named by the GGUF
 * key tokenizer.ggml.pre, with PCRE2 (UTF + Unicode properties, JIT when
 * the library has it).
 *
 * The expressions are llama.cpp's (src/llama-vocab.cpp) and are applied as
 * it applies them: each one splits every piece of the previous split into
 * its matches and the gaps between them (both kept), a match seen on its
 * piece alone (look-arounds and `$` stop at the piece's end). Invalid UTF-8
 * never matches, so it stays in the gaps and the byte-level encoder takes it
 * byte by byte. */
#ifndef NA_TOK_PRETOK_H
#define NA_TOK_PRETOK_H

#include <stddef.h>

#include "status.h"

typedef struct na_pretok na_pretok_t;

/* A word of the split: text[off .. off + len). Returns 0 to go on, else
 * the split stops and returns NA_ERR_NOSPACE. */
typedef int (*na_pretok_fn)(void *user, size_t off, size_t len);

/* The pre-tokenizer of that name (tokenizer.ggml.pre; NULL or "" = the
 * default one). *ignore_merges_p gets whether the vocabulary's words that
 * are a token are taken whole (llama3), *add_bos_p its default for adding
 * BOS (1 for llama3). NA_ERR_UNSUPPORTED for an unknown name (the message
 * lists the known ones; the caller adds the file and field), NA_ERR_INTERNAL
 * if PCRE2 rejects an expression, NA_ERR_NOMEM. */
na_status_t na_pretok_create(const char *name, size_t name_len, na_pretok_t **p_out,
                             int *ignore_merges_p, int *add_bos_p);
void        na_pretok_destroy(na_pretok_t *p);
/* Its canonical name ("llama3", "qwen2", ...). */
const char *na_pretok_name(const na_pretok_t *p);

/* Split text[0..len) and call fn for each word in order (the words cover
 * the text). Thread-safe. NA_ERR_NOMEM, NA_ERR_NOSPACE (fn stopped it),
 * NA_ERR_INTERNAL (PCRE2 failed a match: the message says how). */
na_status_t na_pretok_split(const na_pretok_t *p, const char *text, size_t len,
                            na_pretok_fn fn, void *user);

#endif /* NA_TOK_PRETOK_H */
