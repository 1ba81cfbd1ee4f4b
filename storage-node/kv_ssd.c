/* storage-node/kv_ssd.c — SSD tier: io_uring implementation of the I/O
 * interface, the preallocated O_DIRECT slot file and its extent allocator. */
#define _GNU_SOURCE            /* O_DIRECT */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "storage-node/kv_ssd.h"

/* ---------------------------------------------------------------------- */
/* io_uring implementation                                                 */

typedef struct {
    struct io_uring ring;
    int             queued;      /* prepared, not yet submitted */
} na_kv_uring_t;

static na_status_t na_kv_uring_prep(na_kv_io_t *io, int fd, void *buf, size_t len,
                                    uint64_t off, uint64_t tag, int write)
{
    na_kv_uring_t *u = io->priv;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);

    if (sqe == NULL)
        return na_err(NA_ERR_BUSY, "io_uring: submission queue full (depth %d)", io->depth);
    if (write)
        io_uring_prep_write(sqe, fd, buf, (unsigned)len, off);
    else
        io_uring_prep_read(sqe, fd, buf, (unsigned)len, off);
    io_uring_sqe_set_data64(sqe, tag);
    u->queued++;
    return NA_OK;
}

static na_status_t na_kv_uring_prep_read(na_kv_io_t *io, int fd, void *buf, size_t len,
                                         uint64_t off, uint64_t tag)
{
    return na_kv_uring_prep(io, fd, buf, len, off, tag, 0);
}

static na_status_t na_kv_uring_prep_write(na_kv_io_t *io, int fd, const void *buf,
                                          size_t len, uint64_t off, uint64_t tag)
{
    return na_kv_uring_prep(io, fd, (void *)buf, len, off, tag, 1);
}

static na_status_t na_kv_uring_submit(na_kv_io_t *io)
{
    na_kv_uring_t *u = io->priv;
    int r;

    while (u->queued > 0) {
        r = io_uring_submit(&u->ring);
        if (r == -EINTR || r == -EAGAIN)
            continue;
        if (r < 0)
            return na_err(NA_ERR_IO, "io_uring_submit: %s", strerror(-r));
        u->queued -= r;
        if (r == 0)
            break;
    }
    return NA_OK;
}

static na_status_t na_kv_uring_wait(na_kv_io_t *io, int min_wait, na_kv_io_cqe_t *out,
                                    int max, int *n_p)
{
    na_kv_uring_t *u = io->priv;
    struct io_uring_cqe *cqe;
    na_status_t st;
    int n = 0, r;

    st = na_kv_uring_submit(io);
    if (st != NA_OK)
        return st;
    while (n < max) {
        if (n < min_wait)
            r = io_uring_wait_cqe(&u->ring, &cqe);
        else
            r = io_uring_peek_cqe(&u->ring, &cqe);
        if (r == -EINTR)
            continue;
        if (r == -EAGAIN)
            break;
        if (r < 0)
            return na_err(NA_ERR_IO, "io_uring_wait_cqe: %s", strerror(-r));
        out[n].tag = io_uring_cqe_get_data64(cqe);
        out[n].res = cqe->res;
        io_uring_cqe_seen(&u->ring, cqe);
        n++;
    }
    *n_p = n;
    return NA_OK;
}

static void na_kv_uring_destroy(na_kv_io_t *io)
{
    na_kv_uring_t *u = io->priv;
    io_uring_queue_exit(&u->ring);
    free(u);
    free(io);
}

static const na_kv_io_ops_t na_kv_uring_ops = {
    .name       = "io_uring",
    .prep_read  = na_kv_uring_prep_read,
    .prep_write = na_kv_uring_prep_write,
    .submit     = na_kv_uring_submit,
    .wait       = na_kv_uring_wait,
    .destroy    = na_kv_uring_destroy,
};

na_status_t na_kv_io_uring_create(int depth, na_kv_io_t **io_p)
{
    na_kv_io_t *io;
    na_kv_uring_t *u;
    int r;

    if (depth < 1 || depth > 4096)
        return na_err(NA_ERR_RANGE, "io_uring: queue depth %d out of range [1, 4096]", depth);
    io = calloc(1, sizeof(*io));
    if (io == NULL)
        return na_err(NA_ERR_NOMEM, "io_uring: out of memory");
    u = calloc(1, sizeof(*u));
    if (u == NULL)
        goto err_free_io;
    r = io_uring_queue_init((unsigned)depth, &u->ring, 0);
    if (r < 0) {
        na_err(NA_ERR_IO, "io_uring_queue_init(%d): %s", depth, strerror(-r));
        free(u);
        free(io);
        return NA_ERR_IO;
    }
    io->ops = &na_kv_uring_ops;
    io->depth = depth;
    io->priv = u;
    *io_p = io;
    return NA_OK;

err_free_io:
    free(io);
    return na_err(NA_ERR_NOMEM, "io_uring: out of memory");
}

/* ---------------------------------------------------------------------- */
/* Block checksum                                                          */

#define NA_KV_P1 0x9E3779B185EBCA87ull
#define NA_KV_P2 0xC2B2AE3D27D4EB4Full
#define NA_KV_P3 0x165667B19E3779F9ull

static inline uint64_t na_kv_rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t na_kv_round(uint64_t acc, uint64_t w)
{
    return na_kv_rotl(acc + w * NA_KV_P2, 31) * NA_KV_P1;
}

uint64_t na_kv_sum(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t a0 = NA_KV_P1 + NA_KV_P2, a1 = NA_KV_P2, a2 = 0, a3 = 0 - NA_KV_P1, h, w[4];
    size_t i = 0;

    for (; i + 32 <= n; i += 32) {
        memcpy(w, s + i, 32);
        a0 = na_kv_round(a0, w[0]);
        a1 = na_kv_round(a1, w[1]);
        a2 = na_kv_round(a2, w[2]);
        a3 = na_kv_round(a3, w[3]);
    }
    h = na_kv_rotl(a0, 1) + na_kv_rotl(a1, 7) + na_kv_rotl(a2, 12) + na_kv_rotl(a3, 18);
    h = (h ^ na_kv_round(0, a0)) * NA_KV_P1 + NA_KV_P3;
    h = (h ^ na_kv_round(0, a1)) * NA_KV_P1 + NA_KV_P3;
    h = (h ^ na_kv_round(0, a2)) * NA_KV_P1 + NA_KV_P3;
    h = (h ^ na_kv_round(0, a3)) * NA_KV_P1 + NA_KV_P3;
    h += (uint64_t)n;
    for (; i < n; i++)
        h = na_kv_rotl(h ^ (s[i] * NA_KV_P3), 11) * NA_KV_P1;
    h ^= h >> 33;
    h *= NA_KV_P2;
    h ^= h >> 29;
    h *= NA_KV_P3;
    h ^= h >> 32;
    return h;
}

/* ---------------------------------------------------------------------- */
/* Aligned memory                                                          */

void *na_kv_aligned_alloc(size_t bytes)
{
    void *p = NULL;
    if (bytes == 0)
        bytes = NA_KV_ALIGN;
    bytes = (bytes + NA_KV_ALIGN - 1) / NA_KV_ALIGN * NA_KV_ALIGN;
    if (posix_memalign(&p, NA_KV_ALIGN, bytes) != 0)
        return NULL;
    return p;
}

void na_kv_aligned_free(void *p)
{
    free(p);
}

/* ---------------------------------------------------------------------- */
/* Slot file                                                               */

static uint64_t na_kv_round_up(uint64_t v)
{
    return (v + NA_KV_ALIGN - 1) / NA_KV_ALIGN * NA_KV_ALIGN;
}

/* Open path for the SSD tier (extra: O_DIRECT or 0): created afresh
 * (O_EXCL), or one left by an earlier run of ours (a crash) opened again;
 * never through a symbolic link (O_NOFOLLOW), and only a plain file of ours
 * with one name, so that a link planted in the directory cannot make the
 * truncate and preallocate below land on some other file. -1 with errno
 * set, or with *why set to the reason the file was refused (errno 0). */
static int na_kv_file_open_fd(const char *path, int extra, const char **why)
{
    const int flags = O_RDWR | O_NOFOLLOW | O_CLOEXEC | extra;
    struct stat sb;
    int fd;

    *why = NULL;
    fd = open(path, flags | O_CREAT | O_EXCL, 0600);
    if (fd >= 0 || errno != EEXIST)
        return fd;
    fd = open(path, flags);
    if (fd < 0) {
        if (errno == ELOOP)
            *why = "is a symbolic link";
        return -1;
    }
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISREG(sb.st_mode))
        *why = "is not a regular file";
    else if (sb.st_uid != geteuid())
        *why = "is owned by another user";
    else if (sb.st_nlink != 1)
        *why = "has another name (a hard link)";
    if (*why != NULL) {
        close(fd);
        errno = 0;
        return -1;
    }
    return fd;
}

na_status_t na_kv_file_open(na_kv_file_t *f, const char *dir, const char *name,
                            uint64_t size, int allow_buffered)
{
    const char *why;
    int fd, r;

    memset(f, 0, sizeof(*f));
    f->fd = -1;
    size = na_kv_round_up(size);
    if (size == 0)
        return na_err(NA_ERR_INVALID, "kv file: size 0");
    if ((size_t)snprintf(f->path, sizeof(f->path), "%s/%s", dir, name) >= sizeof(f->path))
        return na_err(NA_ERR_RANGE, "kv file: path too long: %s/%s", dir, name);
    fd = na_kv_file_open_fd(f->path, O_DIRECT, &why);
    f->direct = 1;
    if (fd < 0 && why == NULL && errno == EINVAL) {
        if (!allow_buffered)
            return na_err(NA_ERR_UNSUPPORTED, "kv file %s: the file system refuses O_DIRECT "
                          "(tmpfs?); put the KV directory on a real disk", f->path);
        na_log_warn("kv file %s: O_DIRECT refused, falling back to buffered I/O", f->path);
        fd = na_kv_file_open_fd(f->path, 0, &why);
        f->direct = 0;
    }
    if (fd < 0 && why != NULL)
        return na_err(NA_ERR_IO, "kv file %s %s: refused (a node truncates its KV file; "
                      "remove it if it is yours)", f->path, why);
    if (fd < 0)
        return na_err(NA_ERR_IO, "open(%s): %s", f->path, strerror(errno));
    /* one slot per file: a second slot on the same directory must not
     * truncate the first one's KV */
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        return na_err(e == EWOULDBLOCK ? NA_ERR_BUSY : NA_ERR_IO,
                      "kv file %s: %s", f->path, e == EWOULDBLOCK
                      ? "in use by another slot or process (one KV directory per device slot)"
                      : strerror(e));
    }
    if (ftruncate(fd, 0) != 0) {
        close(fd);
        return na_err(NA_ERR_IO, "ftruncate(%s): %s", f->path, strerror(errno));
    }
    r = posix_fallocate(fd, 0, (off_t)size);
    if (r != 0) {
        close(fd);
        unlink(f->path);
        return na_err(r == ENOSPC ? NA_ERR_NOSPACE : NA_ERR_IO,
                      "fallocate(%s, %llu bytes): %s", f->path,
                      (unsigned long long)size, strerror(r));
    }
    f->free_ext = malloc(sizeof(*f->free_ext) * 16);
    if (f->free_ext == NULL) {
        close(fd);
        unlink(f->path);
        return na_err(NA_ERR_NOMEM, "kv file: out of memory");
    }
    f->cap_free = 16;
    f->n_free = 1;
    f->free_ext[0].off = 0;
    f->free_ext[0].len = size;
    f->fd = fd;
    f->size = size;
    return NA_OK;
}

void na_kv_file_close(na_kv_file_t *f)
{
    if (f->fd >= 0) {
        close(f->fd);
        unlink(f->path);
    }
    free(f->free_ext);
    memset(f, 0, sizeof(*f));
    f->fd = -1;
}

na_status_t na_kv_file_alloc(na_kv_file_t *f, uint64_t len, uint64_t *off_p)
{
    uint64_t largest = 0;
    int i;

    len = na_kv_round_up(len);
    for (i = 0; i < f->n_free; i++) {
        if (f->free_ext[i].len >= len) {
            *off_p = f->free_ext[i].off;
            f->free_ext[i].off += len;
            f->free_ext[i].len -= len;
            if (f->free_ext[i].len == 0) {
                memmove(&f->free_ext[i], &f->free_ext[i + 1],
                        sizeof(*f->free_ext) * (size_t)(f->n_free - i - 1));
                f->n_free--;
            }
            f->used += len;
            return NA_OK;
        }
        if (f->free_ext[i].len > largest)
            largest = f->free_ext[i].len;
    }
    return na_err(NA_ERR_NOSPACE, "SSD tier %s full: need %llu bytes, %llu free of %llu "
                  "(largest free extent %llu)", f->path, (unsigned long long)len,
                  (unsigned long long)(f->size - f->used), (unsigned long long)f->size,
                  (unsigned long long)largest);
}

void na_kv_file_free(na_kv_file_t *f, uint64_t off, uint64_t len)
{
    int i, j;

    len = na_kv_round_up(len);
    for (i = 0; i < f->n_free && f->free_ext[i].off < off; i++)
        ;
    /* merge with the previous and/or next free extent where adjacent */
    if (i > 0 && f->free_ext[i - 1].off + f->free_ext[i - 1].len == off) {
        f->free_ext[i - 1].len += len;
        if (i < f->n_free && off + len == f->free_ext[i].off) {
            f->free_ext[i - 1].len += f->free_ext[i].len;
            memmove(&f->free_ext[i], &f->free_ext[i + 1],
                    sizeof(*f->free_ext) * (size_t)(f->n_free - i - 1));
            f->n_free--;
        }
    } else if (i < f->n_free && off + len == f->free_ext[i].off) {
        f->free_ext[i].off = off;
        f->free_ext[i].len += len;
    } else {
        if (f->n_free == f->cap_free) {
            struct na_kv_ext *n = realloc(f->free_ext, sizeof(*n) * (size_t)f->cap_free * 2);
            if (n == NULL) {
                /* leak the extent rather than corrupt the list */
                na_log_error("kv file %s: out of memory, %llu bytes lost", f->path,
                             (unsigned long long)len);
                f->used -= len;
                return;
            }
            f->free_ext = n;
            f->cap_free *= 2;
        }
        for (j = f->n_free; j > i; j--)
            f->free_ext[j] = f->free_ext[j - 1];
        f->free_ext[i].off = off;
        f->free_ext[i].len = len;
        f->n_free++;
    }
    f->used -= len;
}

/* ---------------------------------------------------------------------- */
/* Synchronous transfers                                                   */

na_status_t na_kv_io_rw_sync(na_kv_io_t *io, int fd, int write, void *buf,
                             size_t len, uint64_t off, const char *path)
{
    na_kv_io_cqe_t cqe[64];
    size_t done = 0;
    int inflight = 0, n, i;
    na_status_t st, first = NA_OK;
    int max_q = io->depth < 64 ? io->depth : 64;

    while (done < len || inflight > 0) {
        while (done < len && inflight < max_q && first == NA_OK) {
            size_t piece = len - done < NA_KV_IO_MAX ? len - done : NA_KV_IO_MAX;
            uint64_t tag = ((uint64_t)piece << 40) | (uint64_t)(done / NA_KV_ALIGN);
            if (write)
                st = io->ops->prep_write(io, fd, (char *)buf + done, piece, off + done, tag);
            else
                st = io->ops->prep_read(io, fd, (char *)buf + done, piece, off + done, tag);
            if (st != NA_OK)
                return st;
            done += piece;
            inflight++;
        }
        if (inflight == 0)
            break;
        st = io->ops->wait(io, 1, cqe, max_q, &n);
        if (st != NA_OK)
            return st;
        for (i = 0; i < n; i++) {
            int64_t want = (int64_t)(cqe[i].tag >> 40);
            uint64_t at = off + (cqe[i].tag & ((1ull << 40) - 1)) * NA_KV_ALIGN;
            inflight--;
            if (cqe[i].res != want && first == NA_OK)
                first = na_err(NA_ERR_IO, "%s %s at offset %llu: %s", write ? "write" : "read",
                               path, (unsigned long long)at,
                               cqe[i].res < 0 ? strerror((int)-cqe[i].res) : "short transfer");
        }
    }
    return first;
}
