/* tests/unit/kv_fault_io.h — helpers of the storage-node tests: a
 * temporary directory where O_DIRECT works, and a test double behind the KV
 * I/O interface (storage-node/kv_ssd.h): it wraps the real io_uring
 * implementation and,
 * for reads and/or writes overlapping a file range, injects an I/O error
 * (the request is sent to an invalid descriptor, so the kernel answers
 * -EBADF) or a short transfer (4 KiB less is asked for). Everything else is
 * passed through to the real ring. */
#ifndef NA_TEST_KV_FAULT_IO_H
#define NA_TEST_KV_FAULT_IO_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "storage-node/kv_ssd.h"
#include "tests/testutil.h"

/* Does dir accept O_DIRECT files? */
static int na_kv_test_direct_ok(const char *dir)
{
    char p[600];
    int fd;
    snprintf(p, sizeof(p), "%s/.direct-probe", dir);
    fd = open(p, O_RDWR | O_CREAT | O_DIRECT, 0600);
    if (fd < 0)
        return 0;
    close(fd);
    unlink(p);
    return 1;
}

/* Make a fresh temporary directory on a file system that takes O_DIRECT:
 * $TMPDIR (or /tmp), else under the current directory (the build tree).
 * 0 on success; -1 (message printed) when none does: the caller skips. */
static inline int na_kv_test_dir(char *buf, size_t len)
{
    if (na_test_tmpdir(buf, len) == 0) {
        if (na_kv_test_direct_ok(buf))
            return 0;
        fprintf(stderr, "%s refuses O_DIRECT (tmpfs?); trying the build directory\n", buf);
        na_test_rmtree(buf);
    }
    snprintf(buf, len, "./nearattn-test-XXXXXX");
    if (mkdtemp(buf) == NULL)
        return -1;
    if (na_kv_test_direct_ok(buf))
        return 0;
    fprintf(stderr, "%s refuses O_DIRECT too\n", buf);
    na_test_rmtree(buf);
    return -1;
}

enum { NA_FAULT_NONE = 0, NA_FAULT_ERROR = 1, NA_FAULT_SHORT = 2 };

typedef struct {
    int      mode;           /* NA_FAULT_* */
    int      on_reads;
    int      on_writes;
    uint64_t lo, hi;         /* file offsets [lo, hi) */
    int      hits;           /* injections made (not thread-safe: one ring per user) */
} na_fault_t;

typedef struct {
    na_kv_io_t *inner;
    na_fault_t *f;
} na_fault_priv_t;

static int na_fault_hit(na_fault_t *f, int write, size_t len, uint64_t off)
{
    if (f->mode == NA_FAULT_NONE || (write ? !f->on_writes : !f->on_reads))
        return 0;
    return off < f->hi && off + len > f->lo;
}

static na_status_t na_fault_prep(na_kv_io_t *io, int fd, void *buf, size_t len,
                                 uint64_t off, uint64_t tag, int write)
{
    na_fault_priv_t *p = io->priv;
    na_kv_io_t *in = p->inner;

    if (na_fault_hit(p->f, write, len, off)) {
        __atomic_fetch_add(&p->f->hits, 1, __ATOMIC_RELAXED);
        if (p->f->mode == NA_FAULT_ERROR)
            fd = -1;
        else
            len = len > NA_KV_ALIGN ? len - NA_KV_ALIGN : 0;
    }
    return write ? in->ops->prep_write(in, fd, buf, len, off, tag)
                 : in->ops->prep_read(in, fd, buf, len, off, tag);
}

static na_status_t na_fault_prep_read(na_kv_io_t *io, int fd, void *buf, size_t len,
                                      uint64_t off, uint64_t tag)
{
    return na_fault_prep(io, fd, buf, len, off, tag, 0);
}

static na_status_t na_fault_prep_write(na_kv_io_t *io, int fd, const void *buf, size_t len,
                                       uint64_t off, uint64_t tag)
{
    return na_fault_prep(io, fd, (void *)buf, len, off, tag, 1);
}

static na_status_t na_fault_submit(na_kv_io_t *io)
{
    na_fault_priv_t *p = io->priv;
    return p->inner->ops->submit(p->inner);
}

static na_status_t na_fault_wait(na_kv_io_t *io, int min_wait, na_kv_io_cqe_t *out,
                                 int max, int *n_p)
{
    na_fault_priv_t *p = io->priv;
    return p->inner->ops->wait(p->inner, min_wait, out, max, n_p);
}

static void na_fault_destroy(na_kv_io_t *io)
{
    na_fault_priv_t *p = io->priv;
    na_kv_io_destroy(p->inner);
    free(p);
    free(io);
}

static const na_kv_io_ops_t na_fault_ops = {
    .name       = "fault-double",
    .prep_read  = na_fault_prep_read,
    .prep_write = na_fault_prep_write,
    .submit     = na_fault_submit,
    .wait       = na_fault_wait,
    .destroy    = na_fault_destroy,
};

/* na_kv_io_factory_t: arg is a na_fault_t shared by every ring it makes. */
static inline na_status_t na_fault_factory(void *arg, int depth, na_kv_io_t **io_p)
{
    na_kv_io_t *io = calloc(1, sizeof(*io));
    na_fault_priv_t *p = calloc(1, sizeof(*p));
    na_status_t st;

    if (io == NULL || p == NULL) {
        free(io);
        free(p);
        return NA_ERR_NOMEM;
    }
    st = na_kv_io_uring_create(depth, &p->inner);
    if (st != NA_OK) {
        free(io);
        free(p);
        return st;
    }
    p->f = arg;
    io->ops = &na_fault_ops;
    io->depth = depth;
    io->priv = p;
    *io_p = io;
    return NA_OK;
}

#endif /* NA_TEST_KV_FAULT_IO_H */
