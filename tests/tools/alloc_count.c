/* tests/tools/alloc_count.c — libna_alloc_count.so, the heap-allocation
 * counter loaded with LD_PRELOAD (see tests/tools/alloc_count.h). Each
 * allocation entry point forwards to glibc's own (__libc_malloc & co., so
 * no dlsym and no allocation of ours); while the window is on it takes the
 * call stack with backtrace() and adds it to the shared table. */
#define _GNU_SOURCE 1
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/tools/alloc_count.h"

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t align, size_t size);

static na_ac_shm_t *g_ac;
static uintptr_t    g_self_lo, g_self_hi;       /* this library's text */
static __thread int g_in __attribute__((tls_model("initial-exec")));

/* dl_iterate_phdr: the executable's (first object) and this library's text. */
static int ac_phdr(struct dl_phdr_info *info, size_t size, void *arg)
{
    int *first = arg, i;
    uintptr_t me = (uintptr_t)&ac_phdr;
    (void)size;

    for (i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        if (*first) {
            g_ac->exe_lo = lo;
            g_ac->exe_hi = hi;
            g_ac->exe_bias = info->dlpi_addr;
        }
        if (me >= lo && me < hi) {
            g_self_lo = lo;
            g_self_hi = hi;
        }
    }
    *first = 0;
    return 0;
}

__attribute__((constructor)) static void ac_attach(void)
{
    const char *path = getenv("NA_ALLOC_FILE");
    void *pcs[4];
    ssize_t n;
    int fd, first = 1;
    na_ac_shm_t *m;

    if (path == NULL || path[0] == '\0')
        return;
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return;
    m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return;
    g_in = 1;
    (void)backtrace(pcs, 4);           /* loads the unwinder now, not in a window */
    g_in = 0;
    g_ac = m;
    dl_iterate_phdr(ac_phdr, &first);
    n = readlink("/proc/self/exe", m->exe, sizeof(m->exe) - 1);
    m->exe[n > 0 ? n : 0] = '\0';
    m->pid = (int32_t)getpid();
    __atomic_store_n(&m->magic, NA_AC_MAGIC, __ATOMIC_RELEASE);
}

/* The stack of one allocation, added to the table. */
static void ac_keep(na_ac_shm_t *m, size_t size)
{
    void *raw[NA_AC_FRAMES + 8];
    uint64_t pc[NA_AC_FRAMES];
    uint32_t n = 0, i, k;
    int got = backtrace(raw, (int)(sizeof(raw) / sizeof(raw[0]))), j;

    for (j = 0; j < got && n < NA_AC_FRAMES; j++) {
        uintptr_t a = (uintptr_t)raw[j];
        if (a >= g_self_lo && a < g_self_hi)
            continue;                    /* our own frames: the hook, the wrapper */
        pc[n++] = (uint64_t)a;
    }
    while (__atomic_exchange_n(&m->lock, 1, __ATOMIC_ACQUIRE))
        ;
    for (i = 0; i < m->n_stacks; i++) {
        na_ac_stack_t *s = &m->st[i];
        if (s->n != n)
            continue;
        for (k = 0; k < n && s->pc[k] == pc[k]; k++)
            ;
        if (k == n)
            break;
    }
    if (i == m->n_stacks && i < NA_AC_STACKS) {
        memcpy(m->st[i].pc, pc, n * sizeof(pc[0]));
        m->st[i].n = n;
        m->n_stacks = i + 1;
    }
    if (i < m->n_stacks) {
        m->st[i].count++;
        m->st[i].bytes += size;
    } else {
        m->lost++;
    }
    __atomic_store_n(&m->lock, 0, __ATOMIC_RELEASE);
}

static void ac_note(size_t size)
{
    na_ac_shm_t *m = g_ac;

    if (m == NULL)
        return;
    __atomic_add_fetch(&m->calls, 1, __ATOMIC_RELAXED);
    if (!__atomic_load_n(&m->on, __ATOMIC_RELAXED))
        return;
    __atomic_add_fetch(&m->total, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&m->bytes, size, __ATOMIC_RELAXED);
    if (g_in) {
        __atomic_add_fetch(&m->lost, 1, __ATOMIC_RELAXED);
        return;
    }
    g_in = 1;
    ac_keep(m, size);
    g_in = 0;
}

void *malloc(size_t size)
{
    ac_note(size);
    return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    ac_note(n * size);
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    if (size > 0)
        ac_note(size);
    return __libc_realloc(p, size);
}

void *memalign(size_t align, size_t size)
{
    ac_note(size);
    return __libc_memalign(align, size);
}

void *aligned_alloc(size_t align, size_t size)
{
    ac_note(size);
    return __libc_memalign(align, size);
}

void *valloc(size_t size)
{
    ac_note(size);
    return __libc_memalign((size_t)sysconf(_SC_PAGESIZE), size);
}

int posix_memalign(void **p, size_t align, size_t size)
{
    void *q;

    if (align < sizeof(void *) || (align & (align - 1)) != 0)
        return EINVAL;
    ac_note(size);
    q = __libc_memalign(align, size);
    if (q == NULL)
        return ENOMEM;
    *p = q;
    return 0;
}
