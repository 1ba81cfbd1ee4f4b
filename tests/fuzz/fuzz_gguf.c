/* tests/fuzz/fuzz_gguf.c — hostile GGUF files for common/gguf.c,
 * common/model_gguf.c and the GGUF side of common/tokenizer.c.
 *
 * Each input is
 *   1. parsed in memory (na_gguf_parse over an exact-size copy, so
 *      AddressSanitizer sees any read past the end); on success every key,
 *      value, array element and tensor byte is read and a tokenizer is built
 *      from the metadata when it has one;
 *   2. written to a file and opened as a model (na_model_open); on success
 *      every weight byte is read and the embedded tokenizer is used.
 * A failure must carry a status other than NA_ERR_INTERNAL / NA_ERR_NOMEM and
 * a message naming the file. Seeds: tiny generated models (dim 8 or 32, one
 * layer, 259 tokens) in f32, f16, bf16, q8_0, q4_0 and q5_1, and dim 256 in
 * q4_k and q6_k, tied and untied. Driver and
 * builds: tests/fuzz/fuzz_files.h (NA_FUZZ_ITERS, default 6000). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "tests/fuzz/fuzz_files.h"

#define MEM_NAME "in-memory.gguf"

/* Read every value of g. */
static void use_gguf(const na_gguf_t *g)
{
    uint64_t i, j;

    for (i = 0; i < g->n_kv; i++) {
        const na_gguf_kv_t *kv = &g->kv[i];
        (void)fuzz_touch(kv->key, strlen(kv->key) + 1);
        if (kv->type == NA_GGUF_STRING)
            (void)fuzz_touch(kv->v.str.data, kv->v.str.len);
        if (kv->type != NA_GGUF_ARRAY)
            continue;
        for (j = 0; j < kv->v.arr.n; j++) {
            if (kv->v.arr.type == NA_GGUF_STRING)
                (void)fuzz_touch(kv->v.arr.strs[j].data, kv->v.arr.strs[j].len);
            else if (kv->v.arr.type == NA_GGUF_FLOAT32 || kv->v.arr.type == NA_GGUF_FLOAT64)
                (void)na_gguf_arr_f64(kv, j);
            else
                (void)na_gguf_arr_i64(kv, j);
        }
    }
    for (i = 0; i < g->n_tensors; i++) {
        const na_gguf_tensor_t *t = &g->tensors[i];
        (void)fuzz_touch(t->name, strlen(t->name) + 1);
        (void)fuzz_touch(t->data, (size_t)t->size);
        fuzz_expect(na_gguf_find_tensor(g, t->name) != NULL, "tensor '%s' not found", t->name);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    na_gguf_t *g = NULL;
    na_status_t st;

    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    st = na_gguf_parse(MEM_NAME, copy, size, &g);
    if (fuzz_loaded("na_gguf_parse", st, MEM_NAME, g)) {
        use_gguf(g);
        fuzz_use_gguf_tokenizer(g);
        na_gguf_destroy(g);
    }
    free(copy);

    fuzz_open_model(data, size);
    return fuzz_done();
}

#ifndef NA_LIBFUZZER

#include <stdio.h>

#include "common/genmodel.h"

static const char *const seed_files[] = {
    "f32.gguf", "f16.gguf", "bf16.gguf", "q8_0.gguf", "q4_0.gguf", "q5_1.gguf", "q4_k.gguf",
    "q6_k.gguf", "qwen2.gguf", "qwen3.gguf", "llama3.gguf", NULL,
};

/* A seed of architecture a at the tiny shape: qwen2's biases, qwen3's q/k
 * norms and key_length, llama3's rope_freqs with yarn scaling keys. */
static int arch_seed(const char *dir, const char *name, na_genmodel_arch_t a)
{
    char prefix[2048];
    na_genmodel_opts_t o;

    na_genmodel_shape(&o, 8, 16, 1, 2, 1, NA_GENMODEL_MIN_VOCAB, 8);
    na_genmodel_set_arch(&o, a);
    o.write_llama2c = 0;
    o.write_gguf = 1;
    if (a == NA_GENMODEL_LLAMA3) {
        o.rope_scaling = "yarn";
        o.rope_scaling_factor = 4.0f;
    }
    snprintf(prefix, sizeof(prefix), "%s/%s", dir, name);
    return na_genmodel_write(prefix, &o) == NA_OK ? 0 : -1;
}

static int make_seeds(const char *dir)
{
    return arch_seed(dir, "qwen2", NA_GENMODEL_QWEN2) ||
           arch_seed(dir, "qwen3", NA_GENMODEL_QWEN3) ||
           arch_seed(dir, "llama3", NA_GENMODEL_LLAMA3) ||
           fuzz_genmodel(dir, "f32", 8, NA_GENMODEL_MIN_VOCAB, NA_DTYPE_F32, 1, 1) ||
           fuzz_genmodel(dir, "f16", 8, NA_GENMODEL_MIN_VOCAB, NA_DTYPE_F16, 0, 1) ||
           fuzz_genmodel(dir, "bf16", 8, NA_GENMODEL_MIN_VOCAB, NA_DTYPE_BF16, 1, 1) ||
           fuzz_genmodel(dir, "q8_0", 32, NA_GENMODEL_MIN_VOCAB, NA_DTYPE_Q8_0, 0, 1) ||
           fuzz_genmodel(dir, "q4_0", 32, NA_GENMODEL_MIN_VOCAB, NA_DTYPE_Q4_0, 1, 1) ||
           fuzz_genmodel(dir, "q5_1", 32, NA_GENMODEL_MIN_VOCAB, NA_DTYPE_Q5_1, 0, 1) ||
           /* the K-quants need rows of 256 (smaller dims fall back to Q5_0 / Q8_0) */
           fuzz_genmodel(dir, "q4_k", 256, NA_GENMODEL_MIN_VOCAB, NA_DTYPE_Q4_K, 0, 1) ||
           fuzz_genmodel(dir, "q6_k", 256, NA_GENMODEL_MIN_VOCAB, NA_DTYPE_Q6_K, 1, 1) ? -1 : 0;
}

int main(void)
{
    static const fuzz_files_target_t t = { "fuzz_gguf", seed_files, make_seeds, 8192, 6000 };
    return fuzz_files_main(&t);
}

#endif /* NA_LIBFUZZER */
