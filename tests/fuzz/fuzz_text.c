/* tests/fuzz/fuzz_text.c — the shared driver of the JSON text fuzz targets
 * (see fuzz_text.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/fuzz/fuzz_text.h"
#include "tests/testutil.h"

static char fuzz_dir[1024];

static void fuzz_cleanup(void)
{
    if (fuzz_dir[0])
        na_test_rmtree(fuzz_dir);
}

const char *fuzz_text_dir(void)
{
    if (fuzz_dir[0] == '\0') {
        /* /dev/shm when there is one: the results file is synced at every
         * close, which a disk makes slow (52 s for 4000 inputs here) */
        snprintf(fuzz_dir, sizeof(fuzz_dir), "/dev/shm/nearattn-fuzz-XXXXXX");
        if (access("/dev/shm", W_OK) != 0 || mkdtemp(fuzz_dir) == NULL) {
            if (na_test_tmpdir(fuzz_dir, sizeof(fuzz_dir)) != 0) {
                fuzz_dir[0] = '\0';
                return NULL;
            }
        }
        atexit(fuzz_cleanup);
    }
    return fuzz_dir;
}

int fuzz_text_done(void)
{
#ifdef NA_LIBFUZZER
    if (fuzz_unexpected() != 0)
        __builtin_trap();
#endif
    return 0;
}

#ifndef NA_LIBFUZZER

static uint64_t fuzz_env(const char *name, uint64_t def)
{
    const char *s = getenv(name);
    return s != NULL && *s != '\0' ? strtoull(s, NULL, 0) : def;
}

/* Tokens worth inserting into JSON text: syntax, escapes, numbers past any
 * range, UTF-8 characters whole and cut, bytes that are never UTF-8, field
 * names of both parsers. */
static const char *const fuzz_tokens[] = {
    "\"", "\\", "\\u", "\\u00", "\\ud800", "\\udc00", "\\ud83d\\ude00", "\\u0000", "\\n",
    "{", "}", "[", "]", ",", ":", "null", "true", "false", "0", "-0", "1e999", "-1e999",
    "18446744073709551616", "-9223372036854775809", "1.5", "1e-300", "\"\"", "[]", "{}",
    "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xc3", "\xe2\x82", "\xf0\x9f\x98",
    "\xff", "\xfe", "\xc0\x80", "\xed\xa0\x80", "\x00", "\n", "\r\n", " ", "\t",
    "\"prompt\":", "\"messages\":", "\"role\":", "\"content\":", "\"stop\":",
    "\"max_tokens\":", "\"temperature\":", "\"top_p\":", "\"seed\":", "\"n\":", "\"stream\":",
    "\"stream_options\":", "\"include_usage\":", "\"custom_id\":", "\"method\":", "\"url\":",
    "\"body\":", "\"POST\"", "\"/v1/completions\"", "\"/v1/chat/completions\"", "\"user\"",
    "\"system\"", "\"assistant\"", "\"type\":\"text\"", "\"text\":",
};
#define FUZZ_N_TOKENS ((int)(sizeof(fuzz_tokens) / sizeof(fuzz_tokens[0])))

/* Insert n bytes of s at position at of buf (len bytes, cap capacity). */
static size_t fuzz_insert(uint8_t *buf, size_t len, size_t cap, size_t at, const void *s, size_t n)
{
    if (n > cap - len)
        n = cap - len;
    memmove(buf + at + n, buf + at, len - at);
    memcpy(buf + at, s, n);
    return len + n;
}

/* Apply 1..4 random mutations to buf; returns the new length. */
static size_t fuzz_mutate(na_rng_t *r, uint8_t *buf, size_t len, size_t cap,
                          const char *other, size_t other_len)
{
    int k, n = 1 + (int)(na_rng_u64(r) % 4);

    for (k = 0; k < n; k++) {
        uint64_t op = na_rng_u64(r) % 10;
        size_t at = len ? (size_t)(na_rng_u64(r) % (len + 1)) : 0;
        if (op == 0 && at < len) {                                    /* flip a bit */
            buf[at] ^= (uint8_t)(1u << (na_rng_u64(r) % 8));
        } else if (op == 1 && at < len) {                             /* random byte */
            buf[at] = (uint8_t)na_rng_u64(r);
        } else if (op <= 5) {                                         /* a token */
            const char *t = fuzz_tokens[na_rng_u64(r) % FUZZ_N_TOKENS];
            size_t tl = t[0] == '\0' ? 1 : strlen(t);                 /* "\x00": one NUL */
            len = fuzz_insert(buf, len, cap, at, t, tl);
        } else if (op == 6 && at < len) {                             /* delete */
            size_t cnt = 1 + (size_t)(na_rng_u64(r) % 16);
            if (cnt > len - at)
                cnt = len - at;
            memmove(buf + at, buf + at + cnt, len - at - cnt);
            len -= cnt;
        } else if (op == 7 && at < len) {                             /* duplicate a range */
            size_t cnt = 1 + (size_t)(na_rng_u64(r) % 200);
            if (cnt > len - at)
                cnt = len - at;
            {
                uint8_t tmp[200];
                memcpy(tmp, buf + at, cnt);
                len = fuzz_insert(buf, len, cap, at, tmp, cnt);
            }
        } else if (op == 8) {                                         /* truncate */
            len = at;
        } else if (op == 9 && other_len) {                            /* splice another seed */
            size_t from = (size_t)(na_rng_u64(r) % other_len);
            size_t cnt = 1 + (size_t)(na_rng_u64(r) % 120);
            if (cnt > other_len - from)
                cnt = other_len - from;
            len = fuzz_insert(buf, len, cap, at, other + from, cnt);
        }
    }
    return len;
}

static void fuzz_one(const uint8_t *data, size_t len)
{
    uint8_t *exact = malloc(len ? len : 1);    /* exact size: ASan sees over-reads */
    if (exact == NULL)
        return;
    memcpy(exact, data, len);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
}

/* The mutation driver: the seeds, then NA_FUZZ_ITERS mutations of them. */
int main(void)
{
    const fuzz_text_target_t *t = &fuzz_text_target;
    uint64_t iters = fuzz_env("NA_FUZZ_ITERS", (uint64_t)t->iters), it;
    uint64_t seed = fuzz_env("NA_FUZZ_SEED", 1);
    const char *corpus_out = getenv("NA_FUZZ_CORPUS_OUT");
    size_t cap = 1 << 16, n_seeds = 0, i;
    uint8_t *work = malloc(cap);
    na_rng_t r;

    if (work == NULL)
        return 1;
    for (i = 0; t->seeds[i] != NULL; i++, n_seeds++) {
        if (corpus_out != NULL) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/seed-%zu.txt", corpus_out, i);
            if (na_test_write_file(path, t->seeds[i], strlen(t->seeds[i])) != 0)
                fprintf(stderr, "%s: cannot write %s\n", t->name, path);
        }
        fuzz_one((const uint8_t *)t->seeds[i], strlen(t->seeds[i]));
    }
    na_rng_seed(&r, seed);
    for (it = 0; it < iters; it++) {
        const char *a = t->seeds[na_rng_u64(&r) % n_seeds];
        const char *b = t->seeds[na_rng_u64(&r) % n_seeds];
        size_t len = strlen(a);
        int rounds = 1 + (int)(na_rng_u64(&r) % 3), k;
        memcpy(work, a, len);
        for (k = 0; k < rounds; k++)
            len = fuzz_mutate(&r, work, len, cap, b, strlen(b));
        fuzz_one(work, len);
    }
    free(work);
    printf("%s: %llu iterations over %zu seeds (seed %llu): %lu unexpected results\n", t->name,
           (unsigned long long)iters, n_seeds, (unsigned long long)seed, fuzz_unexpected());
    return fuzz_unexpected() ? 1 : 0;
}

#endif /* NA_LIBFUZZER */
