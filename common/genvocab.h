/* common/genvocab.h — gen-model's deterministic vocabulary (internal to
 * common/genmodel.c and its test). */
#ifndef NA_GENVOCAB_H
#define NA_GENVOCAB_H

#include <stdint.h>

#include "status.h"

#define NA_GENVOCAB_MIN 259      /* 3 specials + 256 byte tokens */

typedef struct {
    int      n;          /* pieces made (== cap on success) */
    int      cap;        /* vocab_size */
    char   **pieces;     /* [cap] NUL-terminated, real spaces (owned) */
    float   *scores;     /* [cap] merge priority: higher merges first */
    int32_t *types;      /* [cap] GGUF token types: 1 normal, 2 unknown, 3 control, 6 byte */
} na_genvocab_t;

/* Make the vocabulary: <unk>, <s>, </s>, <0x00>..<0xFF>, printable ASCII,
 * BPE merges learnt from a built-in English text, then synthetic merges
 * drawn with `seed`. NA_ERR_INVALID if vocab_size < NA_GENVOCAB_MIN. */
na_status_t na_genvocab_create(int vocab_size, uint64_t seed, na_genvocab_t *v);
void        na_genvocab_destroy(na_genvocab_t *v);

#endif /* NA_GENVOCAB_H */
