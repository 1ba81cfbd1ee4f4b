/* tests/tools/alloc_count.h — the heap-allocation counter of the tests.
 *
 * libna_alloc_count.so (tests/tools/alloc_count.c) is loaded into a process
 * with LD_PRELOAD and NA_ALLOC_FILE naming a file of sizeof(na_ac_shm_t)
 * bytes (zeros). It replaces malloc, calloc, realloc, posix_memalign,
 * aligned_alloc, memalign and valloc with counting forwarders to glibc's
 * own. While the file's `on` word is non-zero every allocation in any thread
 * is counted and its call stack (return addresses) kept, one entry per
 * distinct stack, in the file: the process that turns `on` on and off (the
 * test) reads the counts of every process mapped on that file, while they
 * run. Without NA_ALLOC_FILE the library only forwards.
 *
 * tests/tools/alloc_report.c turns the stacks into call sites: the frames
 * in the counted executable are named from its ELF symbol table (static
 * functions with their source file), and each stack is given to the module
 * of its innermost frame in our code (rdma, storage-node, ...). */
#ifndef NA_TESTS_ALLOC_COUNT_H
#define NA_TESTS_ALLOC_COUNT_H

#include <stdint.h>

#define NA_AC_MAGIC   0x316361616e61ull   /* "naac1" */
#define NA_AC_FRAMES  24                  /* return addresses kept per stack */
#define NA_AC_STACKS  2048                /* distinct stacks kept */

typedef struct {
    uint64_t count;                /* allocations with this stack */
    uint64_t bytes;
    uint32_t n;                    /* frames in pc[] */
    uint32_t pad;
    uint64_t pc[NA_AC_FRAMES];     /* innermost first (the allocator's caller) */
} na_ac_stack_t;

typedef struct {
    uint64_t magic;                /* set by the library when it attached */
    volatile int32_t on;           /* the window: counting while non-zero */
    int32_t  pid;                  /* the process that attached */
    volatile uint64_t calls;       /* every allocation since attach (window or not) */
    volatile uint64_t total;       /* allocations in windows */
    volatile uint64_t bytes;
    volatile uint64_t lost;        /* counted, stack not kept (table full, nested) */
    volatile int32_t lock;
    uint32_t n_stacks;
    uint64_t exe_lo, exe_hi;       /* the executable's mapped text, this process */
    uint64_t exe_bias;             /* its load bias (ELF address = pc - bias) */
    char     exe[512];             /* /proc/self/exe of the process */
    na_ac_stack_t st[NA_AC_STACKS];
} na_ac_shm_t;

/* ---- tests/tools/alloc_report.c (the test's side) ------------------------ */
#include <stdio.h>

/* Map the table at path, created zeroed when create is 1 (NULL on failure,
 * message on stderr). It stays mapped for the life of the process. */
na_ac_shm_t *na_ac_map(const char *path, int create);
/* 1 once a process with the library attached to the table. */
int          na_ac_attached(const na_ac_shm_t *m);
/* Open (on = 1) or close (0) the counting window. */
void         na_ac_window(na_ac_shm_t *m, int on);
/* Print what the window counted in the process of table m, site by site
 * (count, per round trip, the innermost function of our code that is not a
 * log/error/wire helper, with two callers), `who` naming the process, and
 * return how many of the allocations were the transport's or the session
 * layer's (rdma/: na_xp_*, xp_*, na_ses_*, ses_*, na_peer_*). */
/* Allocations of the window whose stack passes through function fn of the
 * executable (by its symbol name); -1 without symbols. */
long         na_ac_fn_count(const na_ac_shm_t *m, const char *fn);
/* Allocations whose stack passes through any of fns (NULL-terminated), each
 * stack counted once; -1 without symbols. */
long         na_ac_fn_count_any(const na_ac_shm_t *m, const char *const *fns);
long         na_ac_report(const na_ac_shm_t *m, const char *who, double round_trips, FILE *f);

#endif /* NA_TESTS_ALLOC_COUNT_H */
