/* tests/testutil.h — tiny test harness: checks that count failures, seeded
 * random inputs, temporary directories, the shared model folder. A test's
 * main() ends with `return na_test_finish();`; exit 77 means skipped. */
#ifndef NA_TESTUTIL_H
#define NA_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern int na_test_failures;
extern int na_test_checks;

#define NA_CHECK(cond) do { na_test_checks++; if (!(cond)) { na_test_failures++; \
    fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define NA_CHECK_MSG(cond, ...) do { na_test_checks++; if (!(cond)) { na_test_failures++; \
    fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
/* Check a status is NA_OK, printing na_errmsg() otherwise. */
#define NA_CHECK_OK(expr) do { na_status_t st_ = (expr); na_test_checks++; if (st_ != NA_OK) { \
    na_test_failures++; fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr, \
    na_status_string(st_), na_errmsg()); } } while (0)
#define NA_SKIP(...) do { fprintf(stderr, "SKIPPED: "); fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr); return 77; } while (0)

/* Print "<checks> checks, <failures> failed" and return 0 or 1. */
int na_test_finish(void);

/* Deterministic xorshift random numbers. */
typedef struct { uint64_t s; } na_rng_t;
void     na_rng_seed(na_rng_t *r, uint64_t seed);
uint64_t na_rng_u64(na_rng_t *r);
float    na_rng_uniform(na_rng_t *r);               /* [0, 1) */
float    na_rng_normal(na_rng_t *r);
void     na_rng_fill(na_rng_t *r, float *x, size_t n, float lo, float hi);
/* n elements of dt (NA_DTYPE_F32, F16 or BF16; a na_dtype_t), uniform in
 * [-1, 1) before the conversion, one draw each in order, into p; and the
 * same into a fresh na_test_xmalloc'ed buffer. */
void     na_rng_fill_dtype(na_rng_t *r, void *p, int dt, size_t n);
void    *na_test_rand_dtype(na_rng_t *r, int dt, size_t n);

/* malloc(n) (n = 0: one byte); out of memory: says so and exits 1. */
void *na_test_xmalloc(size_t n);

/* The first i where a[i] and b[i] differ in any bit (memcmp), or -1. */
int    na_test_first_diff(const float *a, const float *b, size_t n);
/* Max |a-b| / (atol + rtol*|b|) over n elements: <= 1 means "close". */
double na_close_ratio(const float *a, const float *b, size_t n, double atol, double rtol);

/* Make a fresh directory under $TMPDIR (or /tmp); path written to buf. */
int  na_test_tmpdir(char *buf, size_t len);
/* rm -rf of a directory tree made by na_test_tmpdir. */
void na_test_rmtree(const char *path);
/* Path of a file in shared/models/ ($NA_SHARED_DIR/models/name), or NULL if absent. */
const char *na_test_shared_model(const char *name);
/* The whole of a file, malloc'ed with a NUL after its *len_p bytes; NULL if it
 * cannot be read. */
char *na_test_read_file(const char *path, size_t *len_p);
/* Write n bytes to path (created or truncated): 0, or -1 on failure. */
int   na_test_write_file(const char *path, const void *p, size_t n);

/* A prompt of n tokens: toks[0] = 1 (BOS), then tokens drawn from
 * [3, vocab) by the 64-bit LCG in *state (advanced). Returns n. */
int  na_test_prompt(uint64_t *state, int *toks, int n, int vocab);
/* 1 when a[0..na) and b[0..nb) are the same ints (e.g. generated tokens). */
int  na_test_same_ints(const int *a, int na, const int *b, int nb);

/* ---- tests/testmodel.c (na_testutil; needs na_common) ---------------------- */
struct na_model;
struct na_genmodel_opts;

/* Write the generated model o as dir/name.* (na_genmodel_write) and put the
 * path of dir/name.ext ("bin" or "gguf") in path: 0, or -1 after a failed
 * check. */
int na_test_genmodel(const char *dir, const char *name, const struct na_genmodel_opts *o,
                     const char *ext, char *path, size_t cap);
/* na_test_genmodel, then open that file: the model, or NULL after a failed
 * check. */
struct na_model *na_test_genmodel_open(const char *dir, const char *name,
                                       const struct na_genmodel_opts *o, const char *ext);
/* Create the cluster layout file at path and write its "cluster:" line (name,
 * secret_file $NA_SOURCE_DIR/cluster-configs/dev.secret, "." without it):
 * the open file, or NULL with na_err(NA_ERR_IO) set. */
FILE *na_test_layout_begin(const char *path, const char *cluster);
/* Write the "compute:" section (c0 on 127.0.0.1) and a "storage:" section of
 * n nodes s<i> on 127.0.0.1, ports port0 + i, one device each at kvdir/s<i>
 * with dram_mb / ssd_mb. */
void  na_test_layout_nodes(FILE *f, int n, int port0, const char *kvdir, int dram_mb, int ssd_mb);
/* A whole layout file at path: na_test_layout_begin(path, cluster),
 * na_test_layout_nodes(n, port0, kvdir, dram_mb, 64 MB SSD), then the other
 * sections as printf(fmt, ...) writes them. NA_OK, or NA_ERR_IO (said). */
int   na_test_layout_write(const char *path, const char *cluster, int n, int port0,
                           const char *kvdir, int dram_mb, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* stories260K ($NA_SHARED_DIR/models/stories260K.bin) when it is there,
 * else the model o generated as dir/name.bin: its path in path. 0, or -1
 * after a failed check. */
int   na_test_stories_or_gen(const char *dir, const char *name,
                             const struct na_genmodel_opts *o, char *path, size_t cap);
struct na_cfg;
/* The layout of a cluster whose storage nodes run as processes, written as
 * dir/layout.yaml and loaded into *cfg_p: na_test_layout_write(n nodes from
 * port0, KV under dir/kv, 16 MB DRAM each), the model path and the transport
 * (tls; timeout 5000 ms, heartbeat_ms, peer_timeout_ms), then the other
 * sections as printf(fmt, ...) writes them. The status of the write or the
 * load. */
int   na_test_layout_cluster(const char *dir, const char *cluster, int n, int port0,
                             const char *model, const char *tls, int heartbeat_ms,
                             int peer_timeout_ms, struct na_cfg **cfg_p, const char *fmt, ...)
    __attribute__((format(printf, 10, 11)));

/* ---- tests/testvocab.c (na_testutil; needs na_common) ---------------------- */
/* A GPT-2-style byte-level BPE vocabulary (tokenizer.ggml.model "gpt2") at
 * path, pre-tokenizer pre (NULL: the key absent): ids 0..255 the one-byte
 * tokens (byte b is id b), then NA_TEST_BPE_* below; merges by rank "b c",
 * "a b", "a bc", "a a", " b", "\xc3 \xa9" (é), "h i", then extra_merge
 * when not NULL. BOS/EOS are <|begin_of_text|> / <|end_of_text|>; the
 * file names no add_bos_token. 0, or -1 (said why on stderr). */
enum {
    NA_TEST_BPE_BC = 256, NA_TEST_BPE_AB, NA_TEST_BPE_ABC, NA_TEST_BPE_AA, NA_TEST_BPE_SP_B,
    NA_TEST_BPE_E_ACUTE, NA_TEST_BPE_HI, NA_TEST_BPE_CA,
    NA_TEST_BPE_BOS, NA_TEST_BPE_EOS, NA_TEST_BPE_IM_START, /* control tokens */
    NA_TEST_BPE_THINK,                                        /* user-defined <think> */
    NA_TEST_BPE_PAD,                                          /* unused [PAD9] */
    NA_TEST_BPE_MASK,                                         /* user-defined <mask> */
    NA_TEST_BPE_N
};
int na_test_bpe_vocab(const char *path, const char *pre, const char *extra_merge);
/* The same with general.name = name (NULL: the key absent). */
int na_test_bpe_vocab_named(const char *path, const char *pre, const char *extra_merge,
                            const char *name);

#endif /* NA_TESTUTIL_H */
