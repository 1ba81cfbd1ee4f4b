/* compute-node/storage_dir.h — how a compute node finds its storage nodes,
 * including those that join a running cluster (`nearattn node`,
 * docs/cluster.md "Joining a running cluster").
 *
 * The directory holds one entry per storage node of the layout file, each
 * connected (a session peer, used through compute-node/storage_client.h) or
 * not. na_sc_dir_refresh():
 *   - re-reads the layout when the file changed (modification time, size or
 *     inode: an editor's rename counts) and adds the storage nodes that are
 *     new; a layout that does not load is logged and retried at the next
 *     change, entries are never removed;
 *   - tries to connect to every entry that is not connected, at most once per
 *     retry_ms per entry (a refused connect to a node that is down returns at
 *     once; a silent host costs up to the transport's timeout).
 * Call it when placing a new request (and from time to time). Requests are
 * never moved: a node that joins takes new requests.
 * The remote attention service (attn_remote.c) uses only the re-read
 * (na_sc_dir_reload) and connects on its own session.
 *
 * Not thread-safe; the transport's owner thread calls it. */
#ifndef NA_STORAGE_DIR_H
#define NA_STORAGE_DIR_H

#include "compute-node/storage_client.h"

typedef struct na_sc_dir na_sc_dir_t;

/* Load the layout at path (storage nodes only matter) and make a directory
 * as peers of ses (borrowed). Connects nothing yet. retry_ms 0 = 1000. */
na_status_t na_sc_dir_create(na_ses_t *ses, const char *path, unsigned retry_ms,
                             na_sc_dir_t **dir_p);
/* Close every connection and free. NULL is a no-op. */
void        na_sc_dir_destroy(na_sc_dir_t *dir);

/* Re-read the layout if it changed, connect what is due. Returns how many
 * entries became connected in this call (>= 0). Never fails: problems are
 * logged and retried. */
int         na_sc_dir_refresh(na_sc_dir_t *dir);

/* Only the re-read of na_sc_dir_refresh, connecting nothing: for a caller
 * with its own connections (compute-node/attn_remote.c). Returns the number
 * of entries; those added by this call are at the end. Never fails. */
int         na_sc_dir_reload(na_sc_dir_t *dir);
/* Where entry i listens: its host, the port in *port_p. */
const char *na_sc_dir_host(const na_sc_dir_t *dir, int i, int *port_p);

/* Entries, in the order they became known (layout order, then additions). */
int         na_sc_dir_count(const na_sc_dir_t *dir);
const char *na_sc_dir_name(const na_sc_dir_t *dir, int i);
/* The connection of entry i, NULL while not connected. */
na_peer_t  *na_sc_dir_conn(na_sc_dir_t *dir, int i);
/* The caller saw entry i fail (NA_ERR_PEER): close it; it is retried. */
void        na_sc_dir_lost(na_sc_dir_t *dir, int i);

#endif /* NA_STORAGE_DIR_H */
