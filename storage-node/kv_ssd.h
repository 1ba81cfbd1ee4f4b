/* storage-node/kv_ssd.h — the SSD tier of a device slot: one preallocated file
 * per slot, opened with O_DIRECT, extents reserved per request, and all I/O
 * through a small asynchronous interface (na_kv_io_t) whose default
 * implementation is io_uring (liburing). A test double wraps the same
 * interface to inject an I/O error or a short read.
 *
 * Alignment: every offset, length and buffer address handed to the I/O
 * interface is a multiple of NA_KV_ALIGN (O_DIRECT). */
#ifndef NA_KV_SSD_H
#define NA_KV_SSD_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define NA_KV_ALIGN      4096u            /* O_DIRECT alignment (bytes) */
#define NA_KV_IO_MAX     (1u << 20)       /* largest single read/write (1 MiB) */

/* ---------------------------------------------------------------------- */
/* I/O interface                                                           */

typedef struct na_kv_io na_kv_io_t;

/* One completion: the tag given at submission and the result (bytes
 * transferred, or -errno). */
typedef struct {
    uint64_t tag;
    int64_t  res;
} na_kv_io_cqe_t;

typedef struct {
    const char *name;
    /* Queue a read / write of len bytes at file offset off (not yet sent to
     * the kernel until submit or wait). NA_ERR_BUSY when the queue is full:
     * reap completions first. */
    na_status_t (*prep_read)(na_kv_io_t *io, int fd, void *buf, size_t len,
                             uint64_t off, uint64_t tag);
    na_status_t (*prep_write)(na_kv_io_t *io, int fd, const void *buf, size_t len,
                              uint64_t off, uint64_t tag);
    /* Send everything queued to the kernel. */
    na_status_t (*submit)(na_kv_io_t *io);
    /* Submit, then reap up to max completions into out, waiting until at
     * least min_wait are available (0 = do not block). *n_p = reaped. */
    na_status_t (*wait)(na_kv_io_t *io, int min_wait, na_kv_io_cqe_t *out,
                        int max, int *n_p);
    void        (*destroy)(na_kv_io_t *io);
} na_kv_io_ops_t;

struct na_kv_io {
    const na_kv_io_ops_t *ops;
    int                   depth;      /* queue depth (entries in flight) */
    void                 *priv;
};

/* Create the io_uring implementation with the given queue depth (>= 1).
 * Fails with NA_ERR_IO (names io_uring_queue_init) if the kernel refuses. */
na_status_t na_kv_io_uring_create(int depth, na_kv_io_t **io_p);

/* Factory used by slots: returns a new I/O instance. The default creates the
 * io_uring implementation; tests install a factory producing a double. */
typedef na_status_t (*na_kv_io_factory_t)(void *arg, int depth, na_kv_io_t **io_p);

static inline void na_kv_io_destroy(na_kv_io_t *io)
{
    if (io != NULL)
        io->ops->destroy(io);
}

/* ---------------------------------------------------------------------- */
/* Slot file and extent allocator                                          */

/* The slot's data file: `size` bytes preallocated with fallocate, opened
 * O_DIRECT. Space is handed out as extents (offset, length) in units of
 * NA_KV_ALIGN with first-fit; freed extents coalesce with their neighbours. */
typedef struct {
    int       fd;
    uint64_t  size;           /* bytes */
    uint64_t  used;           /* bytes in reserved extents */
    int       direct;         /* 1 if opened O_DIRECT */
    char      path[512];
    /* free list: sorted, non-overlapping [off, off+len) */
    struct na_kv_ext { uint64_t off, len; } *free_ext;
    int       n_free;
    int       cap_free;
} na_kv_file_t;

/* Create (truncate) dir/name of `size` bytes (rounded up to NA_KV_ALIGN)
 * with fallocate and open it O_DIRECT, holding an exclusive flock
 * (NA_ERR_BUSY if another slot or process holds the file). If the file system refuses O_DIRECT
 * and allow_buffered is set, open without it and log a warning; otherwise
 * NA_ERR_UNSUPPORTED naming the directory. The file is created O_EXCL,
 * or, when one is there (left by a crash), reused only if it is a plain file
 * of this user with one name; never through a symbolic link (O_NOFOLLOW):
 * NA_ERR_IO saying why otherwise, the file untouched. Owns the fd; pair with
 * na_kv_file_close (which also unlinks the file). */
na_status_t na_kv_file_open(na_kv_file_t *f, const char *dir, const char *name,
                            uint64_t size, int allow_buffered);
void        na_kv_file_close(na_kv_file_t *f);

/* Reserve len bytes (rounded up to NA_KV_ALIGN) contiguous; *off_p on
 * success. NA_ERR_NOSPACE with the free/largest figures when none fits. */
na_status_t na_kv_file_alloc(na_kv_file_t *f, uint64_t len, uint64_t *off_p);
/* Return an extent (as reserved). */
void        na_kv_file_free(na_kv_file_t *f, uint64_t off, uint64_t len);

/* Synchronous helper over an I/O instance: write or read len bytes at off,
 * split into NA_KV_IO_MAX pieces, queue depth io->depth; fails (NA_ERR_IO)
 * on an error or short transfer, naming path and offset. */
na_status_t na_kv_io_rw_sync(na_kv_io_t *io, int fd, int write, void *buf,
                             size_t len, uint64_t off, const char *path);

/* The checksum of an SSD block image: 64 bits over n bytes, four
 * independent multiply-rotate lanes (xxHash64's round) so that it runs near
 * memory speed. A block's sum is taken as it is written to the SSD tier and
 * checked on every read back (na_kv_view_check, kv_store.h). */
uint64_t na_kv_sum(const void *p, size_t n);

/* Allocate / free NA_KV_ALIGN-aligned memory (NULL on failure). */
void *na_kv_aligned_alloc(size_t bytes);
void  na_kv_aligned_free(void *p);

#endif /* NA_KV_SSD_H */
