/* cli/bench_slot.h — what `bench storage` (cli/bench_storage.c) and `bench
 * storage --engine csd` (cli/bench_csd.c) share: one decode step of one
 * layer on a slot. */
#ifndef NA_CLI_BENCH_SLOT_H
#define NA_CLI_BENCH_SLOT_H

#include "storage-node/slot.h"

/* Decode `layer` on slot s for requests 0..n_req-1 (entries ent[n_req]): q
 * rows of qw floats per request, the same new k / v row for every request,
 * outputs into o (qw per request). NA_OK, or the first failed entry's
 * status and reason, named after who. */
na_status_t na_cli_bench_slot_layer(na_slot_t *s, na_attn_entry_t *ent, int n_req, int layer,
                                    int n_q_heads, int n_kv_heads, const float *q, size_t qw,
                                    const float *k, const float *v, float *o, const char *who);

#endif /* NA_CLI_BENCH_SLOT_H */
