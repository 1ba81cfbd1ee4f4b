/* tests/fuzz/fuzz_tokenizer.c — hostile tokenizer files for
 * common/tokenizer.c (na_tokenizer_open: llama2.c tokenizer.bin, or a GGUF
 * file's tokenizer.ggml.* metadata).
 *
 * Each input is written to a file and opened with the vocabulary sizes of the
 * seeds (259 and 300, and 0: any GGUF vocabulary); a tokenizer that loads is
 * used (fuzz_use_tokenizer: every piece decoded, hostile texts encoded, with
 * and without special tokens, to ids in range and decoded back), a failure
 * must carry a status other than NA_ERR_INTERNAL / NA_ERR_NOMEM and a message
 * naming the file. Seeds: the tokenizer.bin of tiny generated models with 259
 * and 300 tokens, a GGUF one with 259, and two byte-level BPE vocabularies
 * (tests/testvocab.c: tokens, token types, merges, pre-tokenizer llama-bpe
 * and gpt-2), so the mutations reach the merges and the BPE loader.
 * Mutations may land anywhere (the whole file is structure). Driver and
 * builds: tests/fuzz/fuzz_files.h (NA_FUZZ_ITERS, default 15000). */
#include "common/genmodel.h"
#include "common/tokenizer.h"
#include "tests/fuzz/fuzz_files.h"
#include "tests/testutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int vocab[] = { NA_GENMODEL_MIN_VOCAB, 300, 0 };
    const char *path = fuzz_file_write(data, size);
    size_t i;

    for (i = 0; path != NULL && i < sizeof(vocab) / sizeof(vocab[0]); i++) {
        na_tokenizer_t *tok = NULL;
        na_status_t st = na_tokenizer_open(path, vocab[i], &tok);
        if (fuzz_loaded("na_tokenizer_open", st, path, tok))
            fuzz_use_tokenizer(tok);
    }
    return fuzz_done();
}

#ifndef NA_LIBFUZZER

static const char *const seed_files[] = { "v259.tok.bin", "v300.tok.bin", "v259.gguf",
                                          "bpe-llama3.gguf", "bpe-gpt2.gguf", NULL };

static int make_seeds(const char *dir)
{
    char path[4096];

    snprintf(path, sizeof(path), "%s/bpe-llama3.gguf", dir);
    if (na_test_bpe_vocab(path, "llama-bpe", NULL) != 0)
        return -1;
    snprintf(path, sizeof(path), "%s/bpe-gpt2.gguf", dir);
    if (na_test_bpe_vocab(path, "gpt-2", NULL) != 0)
        return -1;
    return fuzz_genmodel(dir, "v259", 8, NA_GENMODEL_MIN_VOCAB, NA_DTYPE_F32, 1, 0) ||
           fuzz_genmodel(dir, "v300", 8, 300, NA_DTYPE_F32, 1, 0) ||
           fuzz_genmodel(dir, "v259", 8, NA_GENMODEL_MIN_VOCAB, NA_DTYPE_F16, 1, 1) ? -1 : 0;
}

int main(void)
{
    static const fuzz_files_target_t t = { "fuzz_tokenizer", seed_files, make_seeds,
                                           (size_t)-1, 15000 };
    return fuzz_files_main(&t);
}

#endif /* NA_LIBFUZZER */
