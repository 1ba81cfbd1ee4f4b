/* storage-node/attn_fold.h — the storage node's attention arithmetic over
 * the KV blocks of one (request, layer): the one place where a storage node
 * turns blocks into attention, in the canonical order of kernels/kernels.h
 * (NA_ATTN_PART, NA_ATTN_CHUNK). Whatever the blocks' size (block_tokens),
 * tier (DRAM, SSD read into a staging chunk, writeback buffer) or the
 * engine's threads, a query row gets the bits the compute node's own
 * attn_decode and attn_prefill give it (cpu kernels), so a request prefilled
 * again elsewhere continues exactly where it was (issue 22 item 15;
 * tests/unit/test_attn_exact.c).
 *
 * The CPU engine (attn_cpu.c) folds each part of an entry's context with
 * na_attn_fold_rows on its workers and merges the parts in order
 * (na_attn_fold_merge, per row); na_attn_fold_query does both for one query
 * row on the calling thread, na_attn_fold_block for a block of rows (a
 * prompt chunk: each K/V run read once for all of its rows, each row with
 * its own causal limit and decode's bits). Below the engines too: the
 * check of an engine entry against its request's KV (na_attn_entry_check). */
#ifndef NA_ATTN_FOLD_H
#define NA_ATTN_FOLD_H

#include "common/status.h"
#include "kernels/kernels.h"
#include "storage-node/attn_engine.h"
#include "storage-node/kv_store.h"

/* Where block b of a view lies (its DRAM memory, or its bytes in a staging
 * chunk read from the SSD); arg is the caller's. */
typedef const char *na_attn_block_fn(void *arg, int b);

/* The shape of the blocks (the store's). */
typedef struct {
    int        block_tokens;
    int        head_dim;
    na_dtype_t kv_dtype;
    int        n_kvh;       /* KV heads of the request (the view's) */
    int        group;       /* query heads per KV head */
} na_attn_shape_t;

/* A block of query rows at consecutive positions (a prompt chunk): row i
 * sees the first lim0 + i keys (causal). q, st and acc hold n_q rows per KV
 * head, KV-head major: row (h, i, g) (g < group) at ((h*n_q + i)*group + g)
 * (times head_dim for q and acc), so the rows of one KV head are one group
 * of the kernel. na_attn_fold_rows folds rows [i0, i1). */
typedef struct {
    const float    *q;
    na_kattn_stat_t *st;
    float          *acc;
    int             n_q;      /* rows per KV head in the layout */
    int             i0, i1;   /* the rows folded */
    int             lim0;     /* row i sees keys [0, lim0 + i) */
} na_attn_rows_t;

/* Fold tokens [t0, t1) of every KV head into the partials of rows [i0, i1)
 * of r (initialised by the caller with na_kattn_init), each row only up to
 * its limit: per run of the blocks (whole chunks), the rows that see the
 * run whole are one call of ops->attn_partial (each K/V row read once for
 * all of them), and a row whose limit cuts the run gets the run cut there,
 * exactly what decode at that context folds (so every row gets decode's
 * bits: the cpu kernel's result does not depend on how many rows share a
 * call, as its prefill relies on). Rows that see no key of [t0, t1) are not
 * touched. t0 must be a multiple of NA_ATTN_CHUNK and [t0, t1) lie within
 * one part (NA_ATTN_PART from position 0) for the canonical order; the
 * blocks covering [t0, min(t1, lim0 + i1 - 1)) must be readable through
 * base. Runs on the calling thread with kernels k; cannot fail. */
void na_attn_fold_rows(na_kernels_t *k, const na_attn_shape_t *sh, const na_attn_rows_t *r,
                       int t0, int t1, na_attn_block_fn *base, void *arg);

/* One query row (q: n_kvh*group heads) over tokens [t0, t1) of every KV head
 * (na_attn_fold_rows of a single row that sees them all): the partials
 * (st, acc) of its n_kvh * group heads (st: (n_kvh*group), acc:
 * (n_kvh*group*head_dim)), initialised by the caller with na_kattn_init.
 * Cannot fail. */
void na_attn_fold_range(na_kernels_t *k, const na_attn_shape_t *sh, const float *q,
                        int t0, int t1, na_attn_block_fn *base, void *arg,
                        na_kattn_stat_t *st, float *acc);

/* The parts' partials (st, acc) of n_parts parts, part-major ((n_parts,
 * rows) stats, (n_parts, rows*head_dim) sums), merged in part order into
 * part 0 and normalised into o (rows*head_dim). */
void na_attn_fold_merge(float *o, na_kattn_stat_t *st, float *acc, int n_parts, int rows,
                        int head_dim);

/* One query row (q: n_kvh*group heads) against the first ctx tokens of the
 * view (blocks through base), part by part, merged in order and normalised
 * into o: the bits of the cpu backend's attn_decode at context ctx.
 * ctx <= 0 gives o = 0. NA_ERR_NOMEM. */
na_status_t na_attn_fold_query(na_kernels_t *k, const na_attn_shape_t *sh, const float *q,
                               int ctx, na_attn_block_fn *base, void *arg, float *o);

/* Rows of the entry layout (row i at q + i*q_stride, heads h*group + g) into
 * the KV-head-major layout of na_attn_rows_t (qg: n_q*n_kvh*group*head_dim). */
void na_attn_rows_gather(const na_attn_shape_t *sh, int n_q, const float *q, size_t q_stride,
                         float *qg);

/* The parts' partials of a block of n_q rows (part p's rows at st + p *
 * n_kvh*group*n_q, in the layout of na_attn_rows_t; row i has the parts of
 * lim0 + i keys) merged per row in part order (na_attn_fold_merge, through
 * the scratch tst: (n_parts, n_kvh*group), tacc: (n_parts,
 * n_kvh*group*head_dim)) and normalised into o (row i at o + i*o_stride). */
void na_attn_rows_merge(const na_attn_shape_t *sh, int n_q, int lim0, int n_parts,
                        const na_kattn_stat_t *st, const float *acc, na_kattn_stat_t *tst,
                        float *tacc, float *o, size_t o_stride);

/* A block of n_q query rows (row i: q + i*q_stride, n_kvh*group heads) that
 * sees the first lim0 + i keys, on the calling thread: every part read once
 * for all rows (na_attn_fold_rows), merged per row. Row i gets exactly
 * na_attn_fold_query's bits at context lim0 + i (a row of no keys: 0).
 * NA_ERR_NOMEM, NA_ERR_INVALID (lim0 < 0). */
na_status_t na_attn_fold_block(na_kernels_t *k, const na_attn_shape_t *sh, const float *q,
                               size_t q_stride, int n_q, int lim0, na_attn_block_fn *base,
                               void *arg, float *o, size_t o_stride);

/* Check an engine entry against its request's KV before anything is
 * touched (the cpu and csd engines' submit): the request is open and not
 * failed, the layer exists, the entry's heads are the request's KV heads
 * times the engine's group, q/o/k_new/v_new given. On NA_OK *r_p is the
 * request. */
na_status_t na_attn_entry_check(na_kv_store_t *store, const na_attn_engine_cfg_t *cfg,
                                const na_attn_entry_t *en, na_kv_req_t **r_p);

/* Parts of a context of n tokens. */
static inline int na_attn_n_parts(int n)
{
    return n > 0 ? (n + NA_ATTN_PART - 1) / NA_ATTN_PART : 0;
}

#endif /* NA_ATTN_FOLD_H */
