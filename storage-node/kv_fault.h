/* storage-node/kv_fault.h — a fault-injecting test double behind the KV I/O
 * interface (kv_ssd.h). It wraps the real io_uring implementation and, for
 * reads and/or writes overlapping a file range, once `after` matching
 * operations have passed, injects an error (the request is sent to an
 * invalid descriptor and its completion reports -err, or -EBADF when err is
 * 0) or a short transfer (4 KiB less is asked for), at most `max` times
 * (0: no limit). Everything else is passed through.
 *
 * Used two ways: unit tests install na_kv_fault_factory with their own
 * na_kv_fault_t; a real node gets it from na_kv_io_default_create when the
 * environment variable NA_FAULTS has a "kv:" part (docs/fault-injection.md),
 * announced once on stderr as a TEST DOUBLE. */
#ifndef NA_KV_FAULT_H
#define NA_KV_FAULT_H

#include <stdint.h>

#include "storage-node/kv_ssd.h"

enum { NA_FAULT_NONE = 0, NA_FAULT_ERROR = 1, NA_FAULT_SHORT = 2 };

typedef struct {
    int      mode;           /* NA_FAULT_* */
    int      err;            /* errno reported for NA_FAULT_ERROR; 0: EBADF */
    int      on_reads;
    int      on_writes;
    uint64_t lo, hi;         /* file offsets [lo, hi) */
    uint64_t after;          /* matching operations passed through first */
    uint64_t max;            /* injections at most (0: no limit) */
    uint64_t seen;           /* matching operations so far (atomic) */
    int      hits;           /* injections made (atomic) */
} na_kv_fault_t;

/* na_kv_io_factory_t: arg is a na_kv_fault_t shared by every ring it makes
 * (it must outlive them). Fails as na_kv_io_uring_create, or NA_ERR_NOMEM. */
na_status_t na_kv_fault_factory(void *arg, int depth, na_kv_io_t **io_p);

/* Parse the "kv:" part of a NA_FAULTS string ("kv:eio_after=200,max=2;xp:...")
 * into *f (zeroed first). Keys: eio_after=N (reads and writes fail with EIO),
 * short_after=N (reads come back 4 KiB short), enospc_after=N (writes fail
 * with ENOSPC), max=K, lo=BYTES, hi=BYTES. 1 when a kv fault is set, 0 when
 * the string has no kv part, -1 (message in err) on a malformed one. */
int na_kv_fault_parse(const char *spec, na_kv_fault_t *f, char *err, size_t errlen);

/* The I/O every store and engine uses when its config names no factory: the
 * io_uring implementation, wrapped by the double when NA_FAULTS asks for kv
 * faults (parsed once per process; a malformed value fails with
 * NA_ERR_INVALID and a message). */
na_status_t na_kv_io_default_create(int depth, na_kv_io_t **io_p);

#endif /* NA_KV_FAULT_H */
