/* tests/fuzz/fuzz_llama2c.c — hostile llama2.c checkpoints for
 * common/llama2c.c (through na_model_open, which picks the format from the
 * first bytes).
 *
 * Each input is written to a file and opened as a model; on success every
 * weight byte is read (a tensor that points past the mapped file faults),
 * else the failure must carry a status other than NA_ERR_INTERNAL /
 * NA_ERR_NOMEM and a message naming the file. Seeds: tiny generated
 * checkpoints (dim 8, one layer, 259 tokens), tied and untied (negative
 * vocab_size); mutations aim at the 28-byte header. Driver and builds:
 * tests/fuzz/fuzz_files.h (NA_FUZZ_ITERS, default 15000). */
#include "common/genmodel.h"
#include "tests/fuzz/fuzz_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_open_model(data, size);
    return fuzz_done();
}

#ifndef NA_LIBFUZZER

static const char *const seed_files[] = { "tied.bin", "untied.bin", NULL };

static int make_seeds(const char *dir)
{
    return fuzz_genmodel(dir, "tied", 8, NA_GENMODEL_MIN_VOCAB, NA_DTYPE_F32, 1, 0) ||
           fuzz_genmodel(dir, "untied", 8, NA_GENMODEL_MIN_VOCAB, NA_DTYPE_F32, 0, 0) ? -1 : 0;
}

int main(void)
{
    static const fuzz_files_target_t t = { "fuzz_llama2c", seed_files, make_seeds, 64, 15000 };
    return fuzz_files_main(&t);
}

#endif /* NA_LIBFUZZER */
