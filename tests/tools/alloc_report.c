/* tests/tools/alloc_report.c — the test's side of the allocation counter
 * (tests/tools/alloc_count.h): create the shared table, open and close the
 * window, and name the call sites of what was counted from the counted
 * executable's ELF symbol table (.symtab: static functions too, with the
 * source file the compiler recorded for them). */
#define _GNU_SOURCE 1
#include <elf.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/tools/alloc_count.h"

na_ac_shm_t *na_ac_map(const char *path, int create)
{
    int fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0), 0600);
    na_ac_shm_t *m;

    if (fd < 0 || (create && ftruncate(fd, (off_t)sizeof(*m)) != 0)) {
        fprintf(stderr, "alloc counter: cannot create %s\n", path);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        fprintf(stderr, "alloc counter: cannot map %s\n", path);
        return NULL;
    }
    return m;
}

int na_ac_attached(const na_ac_shm_t *m)
{
    return m != NULL && __atomic_load_n(&m->magic, __ATOMIC_ACQUIRE) == NA_AC_MAGIC;
}

void na_ac_window(na_ac_shm_t *m, int on)
{
    __atomic_store_n(&m->on, on, __ATOMIC_SEQ_CST);
}

/* ---- the executable's functions ------------------------------------------- */

typedef struct {
    uint64_t    lo, hi;
    const char *name;
    const char *file;               /* local symbols: the STT_FILE before them */
} ac_fn_t;

typedef struct {
    void    *map;
    size_t   len;
    ac_fn_t *fn;
    size_t   n;
} ac_syms_t;

static int ac_fn_cmp(const void *a, const void *b)
{
    const ac_fn_t *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Read the function symbols of the ELF file exe (.symtab, else .dynsym). */
static int ac_syms_load(const char *exe, ac_syms_t *s)
{
    const Elf64_Ehdr *eh;
    const Elf64_Shdr *sh, *sym = NULL;
    struct stat sb;
    const char *file = NULL;
    int fd = open(exe, O_RDONLY | O_CLOEXEC), i;
    size_t k, nsym;

    memset(s, 0, sizeof(*s));
    if (fd < 0 || fstat(fd, &sb) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    s->len = (size_t)sb.st_size;
    s->map = mmap(NULL, s->len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (s->map == MAP_FAILED || s->len < sizeof(*eh))
        return -1;
    eh = s->map;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shoff + (size_t)eh->e_shnum * sizeof(*sh) > s->len)
        return -1;
    sh = (const Elf64_Shdr *)((const char *)s->map + eh->e_shoff);
    for (i = 0; i < eh->e_shnum; i++)
        if (sh[i].sh_type == SHT_SYMTAB || (sym == NULL && sh[i].sh_type == SHT_DYNSYM))
            sym = &sh[i];
    if (sym == NULL || sym->sh_link >= eh->e_shnum ||
        sym->sh_offset + sym->sh_size > s->len)
        return -1;
    nsym = sym->sh_size / sizeof(Elf64_Sym);
    s->fn = calloc(nsym + 1, sizeof(*s->fn));
    if (s->fn == NULL)
        return -1;
    for (k = 0; k < nsym; k++) {
        const Elf64_Sym *y = (const Elf64_Sym *)((const char *)s->map + sym->sh_offset) + k;
        const char *str = (const char *)s->map + sh[sym->sh_link].sh_offset;
        int type = ELF64_ST_TYPE(y->st_info);
        if (type == STT_FILE) {
            file = str + y->st_name;
            continue;
        }
        if ((type != STT_FUNC && type != STT_GNU_IFUNC) || y->st_value == 0 || y->st_size == 0)
            continue;
        s->fn[s->n].lo = y->st_value;
        s->fn[s->n].hi = y->st_value + y->st_size;
        s->fn[s->n].name = str + y->st_name;
        s->fn[s->n].file = ELF64_ST_BIND(y->st_info) == STB_LOCAL ? file : NULL;
        s->n++;
    }
    qsort(s->fn, s->n, sizeof(*s->fn), ac_fn_cmp);
    return 0;
}

static const ac_fn_t *ac_syms_find(const ac_syms_t *s, uint64_t a)
{
    size_t lo = 0, hi = s->n;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->fn[mid].lo <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || a >= s->fn[lo - 1].hi)
        return NULL;
    return &s->fn[lo - 1];
}

static void ac_syms_free(ac_syms_t *s)
{
    free(s->fn);
    if (s->map != NULL && s->map != MAP_FAILED)
        munmap(s->map, s->len);
}

/* ---- sites ---------------------------------------------------------------- */

static int ac_prefix(const char *name, const char *const *pre)
{
    for (; *pre != NULL; pre++)
        if (!strncmp(name, *pre, strlen(*pre)))
            return 1;
    return 0;
}

/* Helpers a caller's allocation passes through (log lines, errors, the
 * wire codec): the site is their caller. */
static int ac_helper(const ac_fn_t *f)
{
    static const char *const pre[] = { "na_log", "na_err", "na_wire_", "na_status", NULL };
    return ac_prefix(f->name, pre);
}

/* The transport and the session layer (rdma/). */
static int ac_rdma(const ac_fn_t *f)
{
    static const char *const pre[] = { "na_xp_", "xp_", "na_ses_", "ses_", "na_peer_", NULL };
    if (f->file != NULL && (!strncmp(f->file, "xp_", 3) || !strncmp(f->file, "session", 7) ||
                            !strncmp(f->file, "ses_", 4)))
        return 1;
    return ac_prefix(f->name, pre);
}

typedef struct {
    char     site[360];
    uint64_t count, bytes;
    int      rdma;
} ac_site_t;

static int ac_site_cmp(const void *a, const void *b)
{
    const ac_site_t *x = a, *y = b;
    return x->count < y->count ? 1 : x->count > y->count ? -1 : strcmp(x->site, y->site);
}

/* Name stack st: the decisive frame (with the ELF address of its call:
 * `addr2line -e EXE ADDR` names the line in a build with -g) and two
 * callers; 1 if it is rdma's. */
static int ac_site_name(const na_ac_shm_t *m, const ac_syms_t *s, const na_ac_stack_t *st,
                        char *out, size_t cap)
{
    const ac_fn_t *f[NA_AC_FRAMES];
    uint64_t at[NA_AC_FRAMES];
    uint32_t i, n = 0, d;
    size_t len = 0;
    int rdma;

    for (i = 0; i < st->n; i++) {
        uint64_t pc = st->pc[i];
        const ac_fn_t *fn;
        if (pc < m->exe_lo || pc >= m->exe_hi)
            continue;                          /* libc, UCX, ...: not ours */
        fn = ac_syms_find(s, pc - m->exe_bias - 1);
        if (fn != NULL && (n == 0 || f[n - 1] != fn)) {
            at[n] = pc - m->exe_bias - 1;
            f[n++] = fn;
        }
    }
    if (n == 0) {
        snprintf(out, cap, "(no frame in the executable)");
        return 0;
    }
    for (d = 0; d + 1 < n && ac_helper(f[d]); d++)
        ;
    rdma = ac_rdma(f[d]);
    for (i = d; i < n && i < d + 3; i++) {
        int w = snprintf(out + len, cap - len, "%s%s%s%s%s", i > d ? " <- " : "", f[i]->name,
                         f[i]->file ? " (" : "", f[i]->file ? f[i]->file : "",
                         f[i]->file ? ")" : "");
        if (w < 0 || (size_t)w >= cap - len)
            break;
        len += (size_t)w;
    }
    if (d > 0 && len + 16 < cap) {
        int w = snprintf(out + len, cap - len, " [via %s]", f[0]->name);
        len += w > 0 ? (size_t)w : 0;
    }
    if (len + 24 < cap)
        snprintf(out + len, cap - len, " @%#llx", (unsigned long long)at[d]);
    return rdma;
}

long na_ac_fn_count(const na_ac_shm_t *m, const char *fn)
{
    const char *const fns[] = { fn, NULL };
    return na_ac_fn_count_any(m, fns);
}

/* 1 if name is one of fns (NULL-terminated). */
static int ac_name_in(const char *name, const char *const *fns)
{
    for (; *fns != NULL; fns++)
        if (!strcmp(name, *fns))
            return 1;
    return 0;
}

long na_ac_fn_count_any(const na_ac_shm_t *m, const char *const *fns)
{
    ac_syms_t syms;
    long n = 0;
    uint32_t i, k;

    if (!na_ac_attached(m) || ac_syms_load(m->exe, &syms) != 0)
        return -1;
    for (i = 0; i < m->n_stacks; i++) {
        const na_ac_stack_t *st = &m->st[i];
        for (k = 0; k < st->n; k++) {
            const ac_fn_t *f;
            if (st->pc[k] < m->exe_lo || st->pc[k] >= m->exe_hi)
                continue;
            f = ac_syms_find(&syms, st->pc[k] - m->exe_bias - 1);
            if (f != NULL && ac_name_in(f->name, fns)) {
                n += (long)st->count;
                break;
            }
        }
    }
    ac_syms_free(&syms);
    return n;
}

long na_ac_report(const na_ac_shm_t *m, const char *who, double round_trips, FILE *f)
{
    ac_syms_t syms;
    ac_site_t *site;
    uint32_t i, j, n_site = 0;
    long rdma = 0;
    double per = round_trips > 0 ? round_trips : 1;

    if (!na_ac_attached(m)) {
        fprintf(f, "%s: the allocation counter never attached\n", who);
        return -1;
    }
    if (ac_syms_load(m->exe, &syms) != 0)
        fprintf(f, "%s: no symbols in %s: sites unnamed\n", who, m->exe);
    site = calloc(m->n_stacks + 1, sizeof(*site));
    if (site == NULL) {
        ac_syms_free(&syms);
        return -1;
    }
    for (i = 0; i < m->n_stacks; i++) {
        char name[sizeof(site->site)];
        int r = ac_site_name(m, &syms, &m->st[i], name, sizeof(name));
        for (j = 0; j < n_site && strcmp(site[j].site, name); j++)
            ;
        if (j == n_site) {
            snprintf(site[j].site, sizeof(site[j].site), "%s", name);
            site[j].rdma = r;
            n_site++;
        }
        site[j].count += m->st[i].count;
        site[j].bytes += m->st[i].bytes;
        if (r)
            rdma += (long)m->st[i].count;
    }
    qsort(site, n_site, sizeof(*site), ac_site_cmp);
    fprintf(f, "%s (pid %d): %llu allocations (%llu bytes) in the window, %.2f per round trip "
            "over %.0f round trips; transport/session %ld",
            who, (int)m->pid, (unsigned long long)m->total, (unsigned long long)m->bytes,
            (double)m->total / per, per, rdma);
    if (m->lost > 0)
        fprintf(f, "; %llu without a stack", (unsigned long long)m->lost);
    fprintf(f, "\n");
    for (j = 0; j < n_site; j++)
        fprintf(f, "  %8llu  %7.2f/rt  %s%s\n", (unsigned long long)site[j].count,
                (double)site[j].count / per, site[j].rdma ? "[rdma] " : "", site[j].site);
    free(site);
    ac_syms_free(&syms);
    return rdma;
}
