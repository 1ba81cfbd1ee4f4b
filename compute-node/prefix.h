/* compute-node/prefix.h — prefix reuse on the compute node
 * (docs/prefix-reuse.md):
 *
 *   fingerprint  the model's identity in the prefix hash chain
 *                (common/kvhash.h): SHA-256 of its shape, file size and
 *                samples of the file, cut to 16 bytes;
 *   map          which storage node was sent which prompt blocks (chain
 *                keys), so placement can prefer the node that likely holds
 *                a new prompt's longest prefix (the node's answer decides:
 *                this is a guess, bounded, forgotten when a node is lost).
 *
 * The offload engine takes the fingerprint at create (compute-node/
 * offload.c) and its admission offers it with each prompt (offload_req.c:
 * na_off_prefix_open, na_off_prefix_wait); the remote service places
 * requests with the keys and the map (compute-node/attn_remote*.c).
 * Nothing here knows the engine. */
#ifndef NA_PREFIX_H
#define NA_PREFIX_H

#include <stdint.h>

#include "common/kvhash.h"
#include "common/model.h"
#include "common/status.h"

/* The model's fingerprint (NA_KVHASH_FP bytes). Reads a few MiB of the map
 * at most; cannot fail. */
void na_pfx_fingerprint(const na_model_t *m, uint8_t fp[NA_KVHASH_FP]);

/* Chain keys of the prompt's whole blocks that a node could hold (the last
 * token never: (n_tok - 1) / bt blocks, at most cap) into keys. Returns the
 * count. */
int  na_pfx_keys(const uint8_t fp[NA_KVHASH_FP], int block_tokens, int kv_h0, int kv_h1,
                 na_dtype_t kv_dtype, const int *tokens, int n_tok, na_kvhash_t *keys, int cap);

typedef struct na_pfx_map na_pfx_map_t;

/* A map of at most cap keys (whole map cleared when full). NULL on no memory. */
na_pfx_map_t *na_pfx_map_create(int cap);
void          na_pfx_map_destroy(na_pfx_map_t *m);
/* Leading keys[0..n) noted for node (0..63): how many in a row. */
int           na_pfx_map_longest(const na_pfx_map_t *m, const na_kvhash_t *keys, int n, int node);
/* Note keys[0..n) as sent to node. */
void          na_pfx_map_note(na_pfx_map_t *m, const na_kvhash_t *keys, int n, int node);
/* Node was lost: forget what it held. */
void          na_pfx_map_forget(na_pfx_map_t *m, int node);

#endif /* NA_PREFIX_H */
