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
 * na_attn_fold_range on its workers and merges the parts in order
 * (na_attn_fold_merge); na_attn_fold_query does both for one query row on
 * the calling thread (a prefill query on the storage node: the same
 * arithmetic as decode). */
#ifndef NA_ATTN_FOLD_H
#define NA_ATTN_FOLD_H

#include "common/status.h"
#include "kernels/kernels.h"
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

/* Fold tokens [t0, t1) of every KV head into the partials (st, acc) of all
 * n_kvh * group query rows (q: (n_kvh*group*head_dim), st: (n_kvh*group),
 * acc: (n_kvh*group*head_dim), initialised by the caller with
 * na_attn_init). t0 must be a multiple of NA_ATTN_CHUNK and [t0, t1) lie
 * within one part (NA_ATTN_PART from position 0) for the canonical order;
 * the blocks covering [t0, t1) must be readable through base. Runs on the
 * calling thread with kernels k (ops->attn_partial); cannot fail. */
void na_attn_fold_range(na_kernels_t *k, const na_attn_shape_t *sh, const float *q,
                        int t0, int t1, na_attn_block_fn *base, void *arg,
                        na_attn_stat_t *st, float *acc);

/* The parts' partials (st, acc) of n_parts parts, part-major ((n_parts,
 * rows) stats, (n_parts, rows*head_dim) sums), merged in part order into
 * part 0 and normalised into o (rows*head_dim). */
void na_attn_fold_merge(float *o, na_attn_stat_t *st, float *acc, int n_parts, int rows,
                        int head_dim);

/* One query row (q: n_kvh*group heads) against the first ctx tokens of the
 * view (blocks through base), part by part, merged in order and normalised
 * into o: the bits of the cpu backend's attn_decode at context ctx.
 * ctx <= 0 gives o = 0. NA_ERR_NOMEM. */
na_status_t na_attn_fold_query(na_kernels_t *k, const na_attn_shape_t *sh, const float *q,
                               int ctx, na_attn_block_fn *base, void *arg, float *o);

/* Parts of a context of n tokens. */
static inline int na_attn_n_parts(int n)
{
    return n > 0 ? (n + NA_ATTN_PART - 1) / NA_ATTN_PART : 0;
}

#endif /* NA_ATTN_FOLD_H */
