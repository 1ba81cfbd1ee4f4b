/* storage-node/kv_fault.c — the fault-injecting KV I/O double (kv_fault.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/faults.h"
#include "storage-node/kv_fault.h"

#define NA_KV_FAULT_TAGS 64   /* injected errors awaiting their completion */

typedef struct {
    na_kv_io_t    *inner;
    na_kv_fault_t *f;
    uint64_t       tags[NA_KV_FAULT_TAGS];   /* completions to report as -err */
    int            n_tags;
} na_kv_fault_priv_t;

/* Does this operation get a fault? Counts matching operations. */
static int na_kv_fault_hit(na_kv_fault_t *f, int write, size_t len, uint64_t off)
{
    uint64_t n;
    if (f->mode == NA_FAULT_NONE || (write ? !f->on_writes : !f->on_reads))
        return 0;
    if (!(off < f->hi && off + len > f->lo))
        return 0;
    n = __atomic_fetch_add(&f->seen, 1, __ATOMIC_RELAXED);
    if (n < f->after)
        return 0;
    if (f->max > 0 && (uint64_t)__atomic_fetch_add(&f->hits, 1, __ATOMIC_RELAXED) >= f->max)
        return 0;
    if (f->max == 0)
        __atomic_fetch_add(&f->hits, 1, __ATOMIC_RELAXED);
    return 1;
}

static na_status_t na_kv_fault_prep(na_kv_io_t *io, int fd, void *buf, size_t len,
                                    uint64_t off, uint64_t tag, int write)
{
    na_kv_fault_priv_t *p = io->priv;
    na_kv_io_t *in = p->inner;

    if (na_kv_fault_hit(p->f, write, len, off)) {
        if (p->f->mode == NA_FAULT_ERROR) {
            fd = -1;
            if (p->f->err != 0 && p->n_tags < NA_KV_FAULT_TAGS)
                p->tags[p->n_tags++] = tag;
        } else {
            len = len > NA_KV_ALIGN ? len - NA_KV_ALIGN : 0;
        }
    }
    return write ? in->ops->prep_write(in, fd, buf, len, off, tag)
                 : in->ops->prep_read(in, fd, buf, len, off, tag);
}

static na_status_t na_kv_fault_prep_read(na_kv_io_t *io, int fd, void *buf, size_t len,
                                         uint64_t off, uint64_t tag)
{
    return na_kv_fault_prep(io, fd, buf, len, off, tag, 0);
}

static na_status_t na_kv_fault_prep_write(na_kv_io_t *io, int fd, const void *buf, size_t len,
                                          uint64_t off, uint64_t tag)
{
    return na_kv_fault_prep(io, fd, (void *)buf, len, off, tag, 1);
}

static na_status_t na_kv_fault_submit(na_kv_io_t *io)
{
    na_kv_fault_priv_t *p = io->priv;
    return p->inner->ops->submit(p->inner);
}

/* Pass through; a completion of an injected error reports -err. */
static na_status_t na_kv_fault_wait(na_kv_io_t *io, int min_wait, na_kv_io_cqe_t *out,
                                    int max, int *n_p)
{
    na_kv_fault_priv_t *p = io->priv;
    na_status_t st = p->inner->ops->wait(p->inner, min_wait, out, max, n_p);
    int i, j;

    if (st != NA_OK || p->n_tags == 0)
        return st;
    for (i = 0; i < *n_p; i++) {
        for (j = 0; j < p->n_tags; j++) {
            if (p->tags[j] == out[i].tag && out[i].res < 0) {
                out[i].res = -p->f->err;
                p->tags[j] = p->tags[--p->n_tags];
                break;
            }
        }
    }
    return st;
}

static void na_kv_fault_destroy(na_kv_io_t *io)
{
    na_kv_fault_priv_t *p = io->priv;
    na_kv_io_destroy(p->inner);
    free(p);
    free(io);
}

static const na_kv_io_ops_t na_kv_fault_ops = {
    .name       = "fault-double",
    .prep_read  = na_kv_fault_prep_read,
    .prep_write = na_kv_fault_prep_write,
    .submit     = na_kv_fault_submit,
    .wait       = na_kv_fault_wait,
    .destroy    = na_kv_fault_destroy,
};

na_status_t na_kv_fault_factory(void *arg, int depth, na_kv_io_t **io_p)
{
    na_kv_io_t *io = calloc(1, sizeof(*io));
    na_kv_fault_priv_t *p = calloc(1, sizeof(*p));
    na_status_t st;

    if (io == NULL || p == NULL) {
        st = NA_ERR_NOMEM;
        goto err_free;
    }
    st = na_kv_io_uring_create(depth, &p->inner);
    if (st != NA_OK)
        goto err_free;
    p->f = arg;
    io->ops = &na_kv_fault_ops;
    io->depth = depth;
    io->priv = p;
    *io_p = io;
    return NA_OK;

err_free:
    free(io);
    free(p);
    return st;
}

/* One key of the "kv" part (na_faults_key_fn). */
static int na_kv_fault_key(void *arg, const char *key, const char *val, char *err, size_t errlen)
{
    na_kv_fault_t *f = arg;
    unsigned long long v;

    if (na_faults_u64(key, val, &v, err, errlen) != 0)
        return -1;
    if (strcmp(key, "eio_after") == 0) {
        f->mode = NA_FAULT_ERROR, f->err = EIO, f->on_reads = f->on_writes = 1, f->after = v;
    } else if (strcmp(key, "short_after") == 0) {
        f->mode = NA_FAULT_SHORT, f->on_reads = 1, f->on_writes = 0, f->after = v;
    } else if (strcmp(key, "enospc_after") == 0) {
        f->mode = NA_FAULT_ERROR, f->err = ENOSPC, f->on_reads = 0, f->on_writes = 1, f->after = v;
    } else if (strcmp(key, "max") == 0) {
        f->max = v;
    } else if (strcmp(key, "lo") == 0) {
        f->lo = v;
    } else if (strcmp(key, "hi") == 0) {
        f->hi = v;
    } else {
        snprintf(err, errlen, "unknown key \"%s\" (eio_after, short_after, enospc_after, "
                 "max, lo, hi)", key);
        return -1;
    }
    return 0;
}

int na_kv_fault_parse(const char *spec, na_kv_fault_t *f, char *err, size_t errlen)
{
    int r;

    memset(f, 0, sizeof(*f));
    f->hi = UINT64_MAX;
    r = na_faults_part(spec, "kv", na_kv_fault_key, f, err, errlen);
    if (r > 0 && f->lo >= f->hi) {
        snprintf(err, errlen, "NA_FAULTS kv: lo (%llu) must be below hi (%llu)",
                 (unsigned long long)f->lo, (unsigned long long)f->hi);
        return -1;
    }
    if (r > 0 && f->mode == NA_FAULT_NONE) {
        snprintf(err, errlen, "NA_FAULTS kv: names no fault (eio_after, short_after, enospc_after)");
        return -1;
    }
    return r;
}

static pthread_once_t na_kv_fault_once = PTHREAD_ONCE_INIT;
static na_kv_fault_t  na_kv_fault_env;
static int            na_kv_fault_env_state;   /* 0 off, 1 on, -1 malformed */

static void na_kv_fault_env_load(void)
{
    const char *spec = getenv("NA_FAULTS");
    char err[256];

    if (spec == NULL || *spec == '\0')
        return;
    na_kv_fault_env_state = na_kv_fault_parse(spec, &na_kv_fault_env, err, sizeof(err));
    if (na_kv_fault_env_state < 0)
        fprintf(stderr, "nearattn: %s\n", err);
    else if (na_kv_fault_env_state > 0)
        fprintf(stderr, "nearattn: TEST DOUBLE: KV I/O faults injected (NA_FAULTS=\"%s\"); "
                "not for production\n", spec);
}

na_status_t na_kv_io_default_create(int depth, na_kv_io_t **io_p)
{
    pthread_once(&na_kv_fault_once, na_kv_fault_env_load);
    if (na_kv_fault_env_state < 0)
        return NA_ERR_INVALID;
    if (na_kv_fault_env_state > 0)
        return na_kv_fault_factory(&na_kv_fault_env, depth, io_p);
    return na_kv_io_uring_create(depth, io_p);
}
