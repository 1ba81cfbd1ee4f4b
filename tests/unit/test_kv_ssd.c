/* tests/unit/test_kv_ssd.c — the SSD tier (storage-node/kv_ssd.c): the
 * preallocated O_DIRECT file, its extent allocator, io_uring transfers, and
 * faults injected by the test double behind the I/O interface. */
#define _GNU_SOURCE            /* O_DIRECT (kv_fault_io.h) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage-node/kv_ssd.h"
#include "storage-node/mkdir.h"
#include "tests/testutil.h"
#include "tests/unit/kv_fault_io.h"

static void test_alloc(na_kv_file_t *f)
{
    uint64_t a, b, c, d;

    NA_CHECK_OK(na_kv_file_alloc(f, 100, &a));            /* rounds to 4 KiB */
    NA_CHECK_OK(na_kv_file_alloc(f, 8192, &b));
    NA_CHECK_OK(na_kv_file_alloc(f, 4096, &c));
    NA_CHECK(a == 0 && b == 4096 && c == 12288);
    NA_CHECK(f->used == 16384);
    na_kv_file_free(f, b, 8192);                          /* hole in the middle */
    NA_CHECK_OK(na_kv_file_alloc(f, 4096, &d));
    NA_CHECK(d == 4096);                                  /* first fit */
    na_kv_file_free(f, d, 4096);
    na_kv_file_free(f, a, 100);
    na_kv_file_free(f, c, 4096);                          /* all coalesce */
    NA_CHECK(f->used == 0);
    NA_CHECK(f->n_free == 1 && f->free_ext[0].off == 0 && f->free_ext[0].len == f->size);
    NA_CHECK(na_kv_file_alloc(f, f->size + 4096, &a) == NA_ERR_NOSPACE);
    NA_CHECK(strstr(na_errmsg(), "full") != NULL);
    NA_CHECK_OK(na_kv_file_alloc(f, f->size, &a));        /* exactly all of it */
    NA_CHECK(na_kv_file_alloc(f, 4096, &b) == NA_ERR_NOSPACE);
    na_kv_file_free(f, a, f->size);
    NA_CHECK(f->used == 0 && f->n_free == 1);
}

static void test_rw(na_kv_file_t *f)
{
    const size_t len = 3u * NA_KV_IO_MAX + 5 * NA_KV_ALIGN;   /* several pieces */
    unsigned char *w = na_kv_aligned_alloc(len), *r = na_kv_aligned_alloc(len);
    na_kv_io_t *io;
    na_kv_fault_t fault;
    size_t i;

    for (i = 0; i < len; i++)
        w[i] = (unsigned char)(i * 131u + 7u);
    NA_CHECK_OK(na_kv_io_uring_create(8, &io));
    NA_CHECK_OK(na_kv_io_rw_sync(io, f->fd, 1, w, len, 8 * NA_KV_ALIGN, f->path));
    memset(r, 0, len);
    NA_CHECK_OK(na_kv_io_rw_sync(io, f->fd, 0, r, len, 8 * NA_KV_ALIGN, f->path));
    NA_CHECK(memcmp(w, r, len) == 0);
    na_kv_io_destroy(io);

    /* the double: an error, then a short read, only where asked */
    memset(&fault, 0, sizeof(fault));
    NA_CHECK_OK(na_kv_fault_factory(&fault, 8, &io));
    fault.on_reads = 1;
    fault.lo = 8 * NA_KV_ALIGN + NA_KV_IO_MAX;
    fault.hi = fault.lo + 1;
    fault.mode = NA_FAULT_ERROR;
    NA_CHECK(na_kv_io_rw_sync(io, f->fd, 0, r, len, 8 * NA_KV_ALIGN, f->path) == NA_ERR_IO);
    NA_CHECK(strstr(na_errmsg(), "read") != NULL);
    fault.mode = NA_FAULT_SHORT;
    NA_CHECK(na_kv_io_rw_sync(io, f->fd, 0, r, len, 8 * NA_KV_ALIGN, f->path) == NA_ERR_IO);
    NA_CHECK(strstr(na_errmsg(), "short") != NULL);
    NA_CHECK(fault.hits == 2);
    /* outside the range all is well; writes are untouched */
    NA_CHECK_OK(na_kv_io_rw_sync(io, f->fd, 0, r, NA_KV_IO_MAX, 8 * NA_KV_ALIGN, f->path));
    NA_CHECK_OK(na_kv_io_rw_sync(io, f->fd, 1, w, len, 8 * NA_KV_ALIGN, f->path));
    fault.on_writes = 1;
    NA_CHECK(na_kv_io_rw_sync(io, f->fd, 1, w, len, 8 * NA_KV_ALIGN, f->path) == NA_ERR_IO);
    na_kv_io_destroy(io);

    /* NA_FAULTS's kv part: ENOSPC from the second write on, once */
    {
        char err[256];
        NA_CHECK(na_kv_fault_parse("xp:drop=1", &fault, err, sizeof(err)) == 0);
        NA_CHECK(na_kv_fault_parse("kv:eio_after=x", &fault, err, sizeof(err)) == -1);
        NA_CHECK(strstr(err, "eio_after") != NULL);
        NA_CHECK(na_kv_fault_parse("kv:max=1", &fault, err, sizeof(err)) == -1);
        NA_CHECK(na_kv_fault_parse("xp:drop=1; kv:enospc_after=1,max=1", &fault, err,
                                   sizeof(err)) == 1);
        NA_CHECK_OK(na_kv_fault_factory(&fault, 8, &io));
        NA_CHECK_OK(na_kv_io_rw_sync(io, f->fd, 1, w, NA_KV_ALIGN, 8 * NA_KV_ALIGN, f->path));
        NA_CHECK_OK(na_kv_io_rw_sync(io, f->fd, 0, r, NA_KV_ALIGN, 8 * NA_KV_ALIGN, f->path));
        NA_CHECK(na_kv_io_rw_sync(io, f->fd, 1, w, NA_KV_ALIGN, 8 * NA_KV_ALIGN, f->path) == NA_ERR_IO);
        NA_CHECK_MSG(strstr(na_errmsg(), "No space") != NULL, "%s", na_errmsg());
        NA_CHECK_OK(na_kv_io_rw_sync(io, f->fd, 1, w, NA_KV_ALIGN, 8 * NA_KV_ALIGN, f->path));
        NA_CHECK(fault.hits >= 1);
        na_kv_io_destroy(io);
    }
    na_kv_aligned_free(w);
    na_kv_aligned_free(r);
}

/* A kv.dat someone planted (a symbolic link, a hard link to another file)
 * is refused and what it points at is left as it was. */
static void test_planted(const char *dir)
{
    static const char victim_text[] = "not a KV file: must survive\n";
    char victim[600], sub[600], kv[700];
    na_kv_file_t f;
    size_t n = 0;
    char *back;

    snprintf(victim, sizeof(victim), "%s/victim", dir);
    snprintf(sub, sizeof(sub), "%s/planted", dir);
    snprintf(kv, sizeof(kv), "%s/kv.dat", sub);
    NA_CHECK(mkdir(sub, 0700) == 0);
    NA_CHECK(na_test_write_file(victim, victim_text, sizeof(victim_text) - 1) == 0);
    NA_CHECK(symlink(victim, kv) == 0);
    NA_CHECK(na_kv_file_open(&f, sub, "kv.dat", 1u << 20, 1) == NA_ERR_IO);
    NA_CHECK_MSG(strstr(na_errmsg(), "symbolic link") != NULL, "%s", na_errmsg());
    NA_CHECK(unlink(kv) == 0);
    NA_CHECK(link(victim, kv) == 0);
    NA_CHECK(na_kv_file_open(&f, sub, "kv.dat", 1u << 20, 1) == NA_ERR_IO);
    NA_CHECK_MSG(strstr(na_errmsg(), "hard link") != NULL, "%s", na_errmsg());
    NA_CHECK(unlink(kv) == 0);
    NA_CHECK(mkdir(kv, 0700) == 0);
    NA_CHECK(na_kv_file_open(&f, sub, "kv.dat", 1u << 20, 1) == NA_ERR_IO);
    NA_CHECK(rmdir(kv) == 0);
    back = na_test_read_file(victim, &n);
    NA_CHECK(back != NULL && n == sizeof(victim_text) - 1 && memcmp(back, victim_text, n) == 0);
    free(back);
    /* one left by an earlier run of ours (a crash) is taken again */
    NA_CHECK(na_test_write_file(kv, "old", 3) == 0);
    NA_CHECK_OK(na_kv_file_open(&f, sub, "kv.dat", 1u << 20, 1));
    NA_CHECK(f.size == (1u << 20));
    na_kv_file_close(&f);
}

/* na_mkdir_p: creates what is missing, and refuses a directory someone else
 * could write in or swap. */
static void test_mkdir(const char *dir)
{
    char p[700], q[700], link_p[700];
    struct stat sb;

    snprintf(p, sizeof(p), "%s/m/a/b", dir);
    NA_CHECK_OK(na_mkdir_p(p, 0700));
    NA_CHECK(stat(p, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 077) == 0);
    NA_CHECK_OK(na_mkdir_p(p, 0700));                     /* there already: fine */
    snprintf(q, sizeof(q), "%s/m/a/b/", dir);
    NA_CHECK_OK(na_mkdir_p(q, 0700));
    NA_CHECK(na_mkdir_p(p, 0777) == NA_ERR_INVALID);

    NA_CHECK(chmod(p, 0770) == 0);                        /* the directory: g+w */
    NA_CHECK(na_mkdir_p(p, 0700) == NA_ERR_IO);
    NA_CHECK_MSG(strstr(na_errmsg(), "writable by its group") != NULL, "%s", na_errmsg());
    NA_CHECK(chmod(p, 0700) == 0);

    snprintf(q, sizeof(q), "%s/m/a", dir);                /* a parent: o+w, not sticky */
    NA_CHECK(chmod(q, 0777) == 0);
    NA_CHECK(na_mkdir_p(p, 0700) == NA_ERR_IO);
    NA_CHECK_MSG(strstr(na_errmsg(), "sticky") != NULL, "%s", na_errmsg());
    NA_CHECK(chmod(q, 01777) == 0);                       /* sticky, like /tmp: fine */
    NA_CHECK_OK(na_mkdir_p(p, 0700));
    NA_CHECK(chmod(q, 0700) == 0);

    snprintf(link_p, sizeof(link_p), "%s/m/l", dir);      /* our own link: followed */
    NA_CHECK(symlink(p, link_p) == 0);
    NA_CHECK_OK(na_mkdir_p(link_p, 0700));
    snprintf(q, sizeof(q), "%s/m/l/c", dir);
    NA_CHECK_OK(na_mkdir_p(q, 0700));

    snprintf(q, sizeof(q), "%s/m/f", dir);                /* not a directory */
    NA_CHECK(na_test_write_file(q, "x", 1) == 0);
    NA_CHECK(na_mkdir_p(q, 0700) == NA_ERR_IO);

    if (geteuid() == 0) {
        /* another user's directory, or link, where ours would go: the
         * /tmp/nearattn-$USER someone made first */
        NA_CHECK(chown(p, 65534, 65534) == 0);
        NA_CHECK(na_mkdir_p(p, 0700) == NA_ERR_IO);
        NA_CHECK_MSG(strstr(na_errmsg(), "owned by uid 65534") != NULL, "%s", na_errmsg());
        snprintf(q, sizeof(q), "%s/m/a/b/c", dir);
        NA_CHECK(na_mkdir_p(q, 0700) == NA_ERR_IO);       /* as a parent too */
        NA_CHECK(chown(p, 0, 0) == 0);
        NA_CHECK(lchown(link_p, 65534, 65534) == 0);
        NA_CHECK(na_mkdir_p(link_p, 0700) == NA_ERR_IO);
        NA_CHECK_MSG(strstr(na_errmsg(), "symbolic link owned by uid 65534") != NULL, "%s",
                     na_errmsg());
    } else {
        NA_CHECK(na_mkdir_p("/usr", 0700) == NA_ERR_IO);  /* root's, not ours */
        NA_CHECK_MSG(strstr(na_errmsg(), "owned by uid 0") != NULL, "%s", na_errmsg());
    }
}

int main(void)
{
    char dir[512];
    na_kv_file_t f;
    na_kv_io_t *io;
    na_status_t st;

    if (na_kv_test_dir(dir, sizeof(dir)) != 0)
        NA_SKIP("no temporary directory on a file system that takes O_DIRECT");
    NA_CHECK(na_kv_io_uring_create(0, &io) == NA_ERR_RANGE);
    st = na_kv_file_open(&f, dir, "kv.dat", 16u << 20, 0);
    if (st == NA_ERR_UNSUPPORTED) {
        na_test_rmtree(dir);
        NA_SKIP("%s", na_errmsg());
    }
    NA_CHECK_OK(st);
    if (st == NA_OK) {
        na_kv_file_t f2;
        NA_CHECK(f.direct == 1 && f.size == (16u << 20));
        NA_CHECK(na_kv_file_open(&f2, dir, "kv.dat", 4096, 0) == NA_ERR_BUSY);  /* in use */
        NA_CHECK(strstr(na_errmsg(), "in use") != NULL);
        test_alloc(&f);
        test_rw(&f);
        na_kv_file_close(&f);
    }
    test_planted(dir);
    test_mkdir(dir);
    NA_CHECK(na_kv_file_open(&f, "/nonexistent-dir-of-nearattn", "kv.dat", 4096, 0) == NA_ERR_IO);
    NA_CHECK(strstr(na_errmsg(), "nonexistent-dir-of-nearattn") != NULL);
    na_test_rmtree(dir);
    return na_test_finish();
}
