/* tests/unit/wire_samples.h — one valid message of every wire type with small
 * random shapes, shared by tests/unit/test_wire.c and tests/fuzz/fuzz_wire.c. */
#ifndef NA_TEST_WIRE_SAMPLES_H
#define NA_TEST_WIRE_SAMPLES_H

#include <stddef.h>
#include <stdint.h>

#include "common/wire.h"

#define NA_WIRE_SAMPLE_ENTRIES 6

typedef struct {
    na_wire_msg_t        msg;
    na_wire_attn_entry_t attn_e[NA_WIRE_SAMPLE_ENTRIES];
    na_wire_out_entry_t  out_e[NA_WIRE_SAMPLE_ENTRIES];
    na_wire_stat_t       stats[NA_WIRE_SAMPLE_ENTRIES];
    na_wire_ctx_row_t    ctx_r[NA_WIRE_SAMPLE_ENTRIES];
    uint8_t             *rows;       /* (rows_len) random row bytes the message points into */
    size_t               rows_len;
} na_wire_sample_t;

/* Fill s with a valid message of type t (1 <= t < NA_WIRE_MSG_COUNT); shapes
 * and contents are drawn from seed. Returns 0, or -1 if out of memory. */
int      na_wire_sample_make(na_wire_sample_t *s, na_wire_type_t t, uint64_t seed);
void     na_wire_sample_free(na_wire_sample_t *s);
/* Encode into a fresh malloc'ed buffer of exactly *len_p bytes (NULL on failure). */
uint8_t *na_wire_sample_encode(const na_wire_sample_t *s, size_t *len_p);
/* Read every field and every row byte of a decoded message (so a sanitizer
 * sees any view that points outside the payload). Returns a checksum. */
uint64_t na_wire_sample_touch(const na_wire_msg_t *m);

#endif /* NA_TEST_WIRE_SAMPLES_H */
