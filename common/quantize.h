/* common/quantize.h — f32 values to the GGML block formats (layouts in
 * common/dtype.h), for gen-model and tests: plain round-to-nearest with
 * per-block scales (the K-quants: per-sub-block scales and mins packed into
 * 6 bits under the super-block's f16 d / dmin), valid blocks that llama.cpp
 * reads the same way, not bit-identical to llama-quantize's searches. */
#ifndef NA_QUANTIZE_H
#define NA_QUANTIZE_H

#include <stddef.h>

#include "dtype.h"

/* Quantise n values (n a multiple of na_dtype_block(t)) of src into dst as
 * type t (any na_dtype_t: f32/f16/bf16 are converted); returns the bytes
 * written (na_dtype_bytes(t, n)), 0 for an invalid type or n. */
size_t na_quantize(na_dtype_t t, const float *src, size_t n, void *dst);

#endif /* NA_QUANTIZE_H */
