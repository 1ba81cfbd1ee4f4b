/* tests/fuzz/fuzz_wire.c — fuzzing every wire decoder of common/wire.h.
 *
 * One entry point, LLVMFuzzerTestOneInput(data, size), feeds the input
 *   1. to na_wire_decode_buf() as a whole message,
 *   2. as the payload of every message type behind a header that agrees
 *      with its length (so each payload decoder is reached, not only the
 *      header checks), and
 *   3. to the streaming DECODE_ATTN decoder at several arrival points,
 * and reads every byte of whatever decodes (so AddressSanitizer sees views
 * that point outside the input). A decode that succeeds is re-encoded and
 * decoded again, which must succeed and agree on the size.
 *
 * Two builds:
 *   - with clang and -fsanitize=fuzzer (target fuzz_wire_libfuzzer, defined
 *     NA_LIBFUZZER): libFuzzer drives the entry point;
 *   - everywhere (ctest test fuzz_wire, label fuzz): a deterministic driver
 *     starts from valid messages of every type and applies seeded random
 *     mutations (bit flips, interesting values in 1/2/4/8-byte fields,
 *     truncation, extension, splices, payload_len fix-ups) for a bounded
 *     number of iterations: NA_FUZZ_ITERS (default 60000) and seed
 *     NA_FUZZ_SEED (default 1). Exit 0 unless a decoder returned a status
 *     other than NA_OK / NA_ERR_PROTO / NA_ERR_VERSION / NA_INPROGRESS, or a
 *     re-encoding failed. With NA_FUZZ_CORPUS_OUT=DIR it also writes its seed
 *     messages to DIR, a starting corpus for the libFuzzer build. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "tests/fuzz/fuzz_files.h"
#include "tests/testutil.h"
#include "tests/unit/wire_samples.h"

static unsigned long fuzz_bad;    /* unexpected statuses seen */
static unsigned long fuzz_ok, fuzz_runs;  /* whole-message decodes that passed / tried */

static int expected(na_status_t st)
{
    return st == NA_OK || st == NA_ERR_PROTO || st == NA_ERR_VERSION || st == NA_INPROGRESS;
}

/* Rebuild an encodable message from a decoded one (tables read through the
 * accessors) and check it encodes to a message that decodes again. */
static void reencode(const na_wire_msg_t *d)
{
    static na_wire_attn_entry_t ae[NA_WIRE_MAX_ENTRIES];
    static na_wire_out_entry_t oe[NA_WIRE_MAX_ENTRIES];
    static na_wire_stat_t sp[NA_WIRE_STATS_MAX];
    static na_wire_ctx_row_t cr[NA_WIRE_MAX_ENTRIES];
    na_wire_msg_t m = *d, again;
    na_wire_hdr_t h;
    uint8_t *buf;
    size_t size, len;
    uint32_t i;

    /* case TYPE: every row of table u.tbl (count field n) through its
     * accessor into arr, which becomes the table's encodable array */
#define ROWS(type, get, tbl, n, arr, array)                                 \
    case type:                                                              \
        for (i = 0; i < m.u.tbl.n; i++)                                     \
            fuzz_bad += get(&d->u.tbl, i, &(arr)[i]) != NA_OK;              \
        m.u.tbl.array = arr;                                                \
        break
    switch (m.type) {
    ROWS(NA_WIRE_MSG_DECODE_ATTN, na_wire_attn_get, attn, n_entries, ae, entries);
    ROWS(NA_WIRE_MSG_ATTN_OUT, na_wire_attn_out_get, attn_out, n_entries, oe, entries);
    ROWS(NA_WIRE_MSG_STATS, na_wire_stats_get, stats, n, sp, pairs);
    ROWS(NA_WIRE_MSG_BATCH_CTX, na_wire_ctx_get, ctx, n_rows, cr, rows);
    default:
        break;
    }
#undef ROWS
    if (na_wire_msg_size(&m, &size) != NA_OK) {
        fprintf(stderr, "fuzz_wire: decoded %s does not re-encode: %s\n",
                na_wire_type_name(m.type), na_errmsg());
        fuzz_bad++;
        return;
    }
    buf = malloc(size);
    if (!buf)
        return;
    if (na_wire_encode(&m, buf, size, &len) != NA_OK ||
        na_wire_decode_buf(buf, len, &h, &again) != NA_OK) {
        fprintf(stderr, "fuzz_wire: re-encoded %s does not decode: %s\n",
                na_wire_type_name(m.type), na_errmsg());
        fuzz_bad++;
    }
    free(buf);
}

static void check_decoded(na_status_t st, const na_wire_msg_t *m)
{
    if (!expected(st)) {
        fprintf(stderr, "fuzz_wire: unexpected status %s: %s\n", na_status_string(st), na_errmsg());
        fuzz_bad++;
    }
    if (st == NA_OK) {
        (void)na_wire_sample_touch(m);
        reencode(m);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    na_wire_hdr_t h;
    na_wire_msg_t m;
    uint8_t *copy;
    unsigned t;
    na_status_t st;

    /* 1: a whole message */
    copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    st = na_wire_decode_buf(copy, size, &h, &m);
    fuzz_runs++;
    fuzz_ok += st == NA_OK;
    check_decoded(st, &m);
    /* 2: the bytes as the payload of every type (past a header if there is one) */
    {
        const uint8_t *p = copy;
        size_t n = size;
        if (n >= NA_WIRE_HDR_SIZE && !memcmp(p, NA_WIRE_MAGIC, 4)) {
            p += NA_WIRE_HDR_SIZE;
            n -= NA_WIRE_HDR_SIZE;
        }
        for (t = 1; t < NA_WIRE_MSG_COUNT; t++) {
            memset(&h, 0, sizeof(h));
            h.ver_major = NA_WIRE_VERSION_MAJOR;
            h.type = (uint16_t)t;
            h.hdr_len = NA_WIRE_HDR_SIZE;
            h.payload_len = n;
            h.request_id = size & 3;
            h.layer = (uint32_t)(size % 5);
            st = na_wire_decode(&h, p, n, &m);
            check_decoded(st, &m);
        }
        /* 3: streaming DECODE_ATTN at a few arrival points */
        h.type = NA_WIRE_MSG_DECODE_ATTN;
        for (t = 0; t < 4; t++) {
            na_wire_attn_t a;
            uint32_t ready = 0, i;
            size_t avail = n * t / 3;
            st = na_wire_decode_attn_prefix(&h, p, avail, &a, &ready);
            if (!expected(st))
                fuzz_bad++;
            if (st == NA_OK) {
                if (ready > a.n_entries)
                    fuzz_bad++;
                for (i = 0; i < ready && i < a.n_entries; i++) {
                    na_wire_attn_entry_t e;
                    size_t es = na_dtype_bytes(a.dtype, 1);
                    size_t kb;
                    if (na_wire_attn_get(&a, i, &e) != NA_OK) {
                        fuzz_bad++;
                        continue;
                    }
                    kb = (size_t)e.n_queries * (e.kv_h1 - e.kv_h0) * a.head_dim * es;
                    /* the last byte of v (every query's rows) must lie inside what arrived */
                    if ((const uint8_t *)e.v + kb > p + avail)
                        fuzz_bad++;
                }
            }
        }
    }
    free(copy);
    return fuzz_trap_if(fuzz_bad);
}

#ifndef NA_LIBFUZZER

/* Apply 1..4 random mutations to buf (len bytes, cap capacity); returns the new length. */
static size_t mutate(na_rng_t *r, uint8_t *buf, size_t len, size_t cap,
                     const uint8_t *other, size_t other_len)
{
    static const uint64_t interesting[] = {
        0, 1, 2, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0x8000, 0xffff, 0x10000, 4095, 4096, 4097,
        1023, 1024, 1025, 0x7fffffffull, 0x80000000ull, 0xffffffffull, (1ull << 30),
        (1ull << 30) + 1, (1ull << 24), (1ull << 20) + 1, UINT64_MAX, 0x8000000000000000ull,
    };
    int k, n = 1 + (int)(na_rng_u64(r) % 4);

    for (k = 0; k < n; k++) {
        uint64_t op = na_rng_u64(r) % 8;
        size_t at = len ? (size_t)(na_rng_u64(r) % len) : 0;
        if (op == 0 && len) {                                        /* flip a bit */
            buf[at] ^= (uint8_t)(1u << (na_rng_u64(r) % 8));
        } else if (op <= 2 && len) {                                 /* interesting field value */
            int w = 1 << (na_rng_u64(r) % 4);
            uint64_t v = interesting[na_rng_u64(r) % (sizeof(interesting) / sizeof(interesting[0]))];
            int b;
            if (na_rng_u64(r) & 1)
                v += (na_rng_u64(r) % 3) - 1;
            for (b = 0; b < w && at + (size_t)b < len; b++)
                buf[at + (size_t)b] = (uint8_t)(v >> (8 * b));
        } else if (op == 3 && len) {                                 /* random byte */
            buf[at] = (uint8_t)na_rng_u64(r);
        } else if (op == 4) {                                        /* truncate */
            len = at;
        } else if (op == 5 && len < cap) {                           /* extend */
            size_t add = 1 + (size_t)(na_rng_u64(r) % 128), i;
            if (add > cap - len)
                add = cap - len;
            for (i = 0; i < add; i++)
                buf[len + i] = (uint8_t)(na_rng_u64(r) % 3 ? 0 : na_rng_u64(r));
            len += add;
        } else if (op == 6 && other_len && len) {                    /* splice from another message */
            size_t from = (size_t)(na_rng_u64(r) % other_len);
            size_t cnt = 1 + (size_t)(na_rng_u64(r) % 64);
            if (cnt > other_len - from) cnt = other_len - from;
            if (cnt > len - at) cnt = len - at;
            memcpy(buf + at, other + from, cnt);
        } else if (op == 7 && len >= NA_WIRE_HDR_SIZE) {             /* make payload_len agree */
            uint64_t pl = len - NA_WIRE_HDR_SIZE;
            int b;
            for (b = 0; b < 8; b++)
                buf[16 + b] = (uint8_t)(pl >> (8 * b));
        }
    }
    return len;
}

/* Write one seed message to DIR/TYPE-N.bin (best effort). */
static void write_seed(const char *dir, unsigned t, unsigned s, const uint8_t *b, size_t len)
{
    char path[4096];
    FILE *f;
    snprintf(path, sizeof(path), "%s/%s-%u.bin", dir, na_wire_type_name(t), s);
    f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "fuzz_wire: cannot write %s\n", path);
        return;
    }
    if (fwrite(b, 1, len, f) != len)
        fprintf(stderr, "fuzz_wire: short write to %s\n", path);
    fclose(f);
}

int main(void)
{
    uint64_t iters = fuzz_env_u64("NA_FUZZ_ITERS", 60000), it;
    uint64_t seed = fuzz_env_u64("NA_FUZZ_SEED", 1);
    enum { N_SEEDS = 3 };
    uint8_t *corpus[NA_WIRE_MSG_COUNT * N_SEEDS];
    size_t corpus_len[NA_WIRE_MSG_COUNT * N_SEEDS], n_corpus = 0, i, cap = 1 << 16;
    uint8_t *work = malloc(cap);
    na_rng_t r;
    unsigned t, s;

    if (!work)
        return 1;
    for (t = 1; t < NA_WIRE_MSG_COUNT; t++) {
        for (s = 0; s < N_SEEDS; s++) {
            na_wire_sample_t sm;
            size_t len = 0;
            uint8_t *b;
            if (na_wire_sample_make(&sm, (na_wire_type_t)t, seed + s) != 0)
                return 1;
            b = na_wire_sample_encode(&sm, &len);
            na_wire_sample_free(&sm);
            if (!b || len > cap / 2) {
                fprintf(stderr, "fuzz_wire: sample %s does not encode\n", na_wire_type_name(t));
                free(b);
                return 1;
            }
            if (getenv("NA_FUZZ_CORPUS_OUT"))                /* seeds for libFuzzer */
                write_seed(getenv("NA_FUZZ_CORPUS_OUT"), t, s, b, len);
            corpus[n_corpus] = b;
            corpus_len[n_corpus++] = len;
            LLVMFuzzerTestOneInput(b, len);                  /* the valid seeds themselves */
        }
    }
    na_rng_seed(&r, seed);
    for (it = 0; it < iters; it++) {
        size_t c = (size_t)(na_rng_u64(&r) % n_corpus), o = (size_t)(na_rng_u64(&r) % n_corpus);
        size_t len = corpus_len[c];
        uint8_t *exact;
        memcpy(work, corpus[c], len);
        len = mutate(&r, work, len, cap, corpus[o], corpus_len[o]);
        exact = malloc(len ? len : 1);                        /* exact size: ASan sees over-reads */
        if (!exact)
            break;
        memcpy(exact, work, len);
        LLVMFuzzerTestOneInput(exact, len);
        free(exact);
    }
    for (i = 0; i < n_corpus; i++)
        free(corpus[i]);
    free(work);
    printf("fuzz_wire: %llu iterations over %zu seed messages (seed %llu): %lu of %lu whole "
           "messages decoded, %lu unexpected results\n", (unsigned long long)iters, n_corpus,
           (unsigned long long)seed, fuzz_ok, fuzz_runs, fuzz_bad);
    return fuzz_bad ? 1 : 0;
}

#endif /* NA_LIBFUZZER */
