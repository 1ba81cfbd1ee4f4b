/* tests/fuzz/fuzz_files.h — the shared driver of the file-loader fuzz targets
 * (fuzz_gguf.c, fuzz_llama2c.c, fuzz_tokenizer.c).
 *
 * A target defines LLVMFuzzerTestOneInput(data, size), which writes the input
 * to a temporary file (fuzz_file_write) and opens it with the loader under
 * test, and a fuzz_files_target_t naming the seed files it generates
 * in-process (common/genmodel.h). Two builds, as for tests/fuzz/fuzz_wire.c:
 *   - with clang and -fsanitize=fuzzer (target <name>_libfuzzer, defined
 *     NA_LIBFUZZER): libFuzzer drives the entry point;
 *   - everywhere (ctest test <name>, label fuzz): fuzz_files_main() generates
 *     the seeds, runs each, then applies seeded random mutations (bit flips,
 *     interesting values in 1/2/4/8-byte fields, random bytes, insertions and
 *     deletions, truncation, extension, splices of another seed), most of them
 *     aimed at the first `hot` bytes (the headers), for NA_FUZZ_ITERS
 *     iterations (default: the target's) from seed NA_FUZZ_SEED (default 1).
 *     With NA_FUZZ_CORPUS_OUT=DIR it also copies the seed files to DIR, a
 *     starting corpus for the libFuzzer build.
 * Exit 0 unless an unexpected result was counted (fuzz_unexpected). */
#ifndef NA_FUZZ_FILES_H
#define NA_FUZZ_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/dtype.h"
#include "common/status.h"
#include "tests/fuzz/fuzz_expect.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The value of environment variable name (strtoull, base 0), or def when it
 * is unset or empty. */
static inline uint64_t fuzz_env_u64(const char *name, uint64_t def)
{
    const char *s = getenv(name);
    return s != NULL && *s != '\0' ? strtoull(s, NULL, 0) : def;
}

/* End of an entry point that counted bad unexpected results: under
 * libFuzzer trap when there were any, so that it keeps the input. 0. */
static inline int fuzz_trap_if(unsigned long bad)
{
#ifdef NA_LIBFUZZER
    if (bad != 0)
        __builtin_trap();
#else
    (void)bad;
#endif
    return 0;
}

typedef struct {
    const char        *name;        /* "fuzz_gguf": messages and the summary line */
    const char *const *seeds;       /* seed file names in the seed directory, NULL-ended */
    int              (*make_seeds)(const char *dir);  /* write them there: 0, or -1 */
    size_t             hot;         /* most mutations land in the first hot bytes */
    long               iters;       /* default NA_FUZZ_ITERS */
} fuzz_files_target_t;

/* Write data to the target's temporary input file (made on first use under
 * $TMPDIR, removed at exit) and return its path; NULL if it cannot be written. */
const char *fuzz_file_write(const uint8_t *data, size_t size);

/* The result of loader `what` on path, its output pointer out: 1 when st is
 * NA_OK; else 0 after checking the failure is an expected one (a status
 * other than NA_ERR_INTERNAL / NA_ERR_NOMEM, a message naming path, out
 * still NULL). */
int fuzz_loaded(const char *what, na_status_t st, const char *path, const void *out);

/* Read every byte of p[0..n) (ASan sees over-reads); returns a checksum. */
unsigned fuzz_touch(const void *p, size_t n);

/* Use a tokenizer that loaded, then destroy it: every piece and its decoding
 * read, a few hostile texts (invalid UTF-8, byte-token look-alikes) encoded
 * to ids in range and decoded back. */
struct na_tokenizer;
void fuzz_use_tokenizer(struct na_tokenizer *tok);

/* Build the tokenizer of a parsed GGUF when it has tokenizer.ggml.tokens,
 * and use it (fuzz_use_tokenizer). */
struct na_gguf;
void fuzz_use_gguf_tokenizer(const struct na_gguf *g);

/* Write data to the input file and open it with na_model_open: on success
 * read every weight (and use a GGUF model's tokenizer), else check the
 * failure (fuzz_failure_ok). */
void fuzz_open_model(const uint8_t *data, size_t size);

/* End of an entry point: under libFuzzer, trap when something unexpected was
 * counted so that it keeps the input. Returns 0. */
int fuzz_done(void);

/* Write a tiny generated model dir/name.gguf (gguf) or dir/name.bin +
 * dir/name.tok.bin: one layer, 2 heads, 1 KV head, hidden 16 (dim 8) or dim,
 * seq_len 8. 0, or -1 (na_errmsg says why). Not in the libFuzzer build. */
int fuzz_genmodel(const char *dir, const char *name, int dim, int vocab, na_dtype_t dtype,
                  int tied, int gguf);

/* The mutation driver (not in the libFuzzer build). */
int fuzz_files_main(const fuzz_files_target_t *t);

#endif /* NA_FUZZ_FILES_H */
