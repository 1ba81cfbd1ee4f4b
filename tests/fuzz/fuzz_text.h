/* tests/fuzz/fuzz_text.h — the shared driver of the JSON text fuzz targets
 * (fuzz_oai.c: the OpenAI request parser; fuzz_batch.c: the batch input
 * and results files).
 *
 * A target defines LLVMFuzzerTestOneInput(data, size) and, outside the
 * libFuzzer build, fuzz_text_target naming its seed texts; the driver
 * (fuzz_text.c) has main(). Two builds, as for tests/fuzz/fuzz_wire.c:
 *   - with clang and -fsanitize=fuzzer (target <name>_libfuzzer, defined
 *     NA_LIBFUZZER): libFuzzer drives the entry point;
 *   - everywhere (ctest test <name>, label fuzz): main() runs each
 *     seed, then applies seeded random mutations aimed at JSON text (bit
 *     flips, random bytes, JSON and UTF-8 tokens inserted — quotes,
 *     backslashes, \u escapes and surrogates, brackets, huge numbers,
 *     multi-byte characters and their cut prefixes, invalid bytes, NUL,
 *     newlines, field names —, deletions, duplications, truncation, splices
 *     of another seed) for NA_FUZZ_ITERS iterations (default: the target's)
 *     from seed NA_FUZZ_SEED (default 1); each input is handed over in a
 *     buffer of its exact size (AddressSanitizer sees over-reads). With
 *     NA_FUZZ_CORPUS_OUT=DIR it also writes the seeds to DIR, a starting
 *     corpus for the libFuzzer build.
 * Exit 0 unless an unexpected result was counted (fuzz_expect). */
#ifndef NA_FUZZ_TEXT_H
#define NA_FUZZ_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "tests/fuzz/fuzz_expect.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    const char        *name;        /* "fuzz_oai": messages and the summary line */
    const char *const *seeds;       /* NUL-terminated seed texts, NULL-ended */
    long               iters;       /* default NA_FUZZ_ITERS */
} fuzz_text_target_t;

/* End of an entry point: under libFuzzer, trap when something unexpected was
 * counted so that it keeps the input. Returns 0. */
int         fuzz_text_done(void);
/* A private temporary directory (made on first use under /dev/shm, else
 * $TMPDIR; removed at exit); NULL if it cannot be made. */
const char *fuzz_text_dir(void);
/* The target the driver's main() runs (not in the libFuzzer build). */
extern const fuzz_text_target_t fuzz_text_target;

#endif /* NA_FUZZ_TEXT_H */
