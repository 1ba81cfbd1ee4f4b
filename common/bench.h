/* common/bench.h — the report every `nearattn bench ...` prints: results
 * {name, value, unit, reference_name, reference_value, ratio, spread},
 * an aligned table on stdout and, with --json FILE, one JSON document
 *   {"bench": ..., "machine": ..., "load_avg_start": ..., "load_avg_end": ...,
 *    "results": [{...}, ...]}
 * plus the in-run limits benches compare against (STREAM-style copy) and
 * small statistics helpers (median, spread). Timing uses CLOCK_MONOTONIC. */
#ifndef NA_BENCH_H
#define NA_BENCH_H

#include <stddef.h>
#include <stdio.h>

#include "common/status.h"

typedef struct {
    char   name[96];            /* what was measured, e.g. "attn_decode f16 ctx=8192 t=1" */
    double value;               /* the figure */
    char   unit[16];            /* "GB/s", "GFLOP/s", "us", ... */
    char   reference_name[96];  /* the in-run limit or peer it is set against; "" if none */
    double reference_value;     /* same unit as value; 0 if none */
    double ratio;               /* value / reference_value; 0 if none */
    double spread;              /* (max - min) / median over the repeats; 0 if one run
                                   (the table prints "-": no spread to give) */
} na_bench_result_t;

typedef struct na_bench na_bench_t;

/* A report for bench `name` ("kernels", "storage", ...). NA_ERR_NOMEM. */
na_status_t na_bench_create(const char *name, na_bench_t **bench_p);
void        na_bench_destroy(na_bench_t *bench);

/* Append a result (strings are truncated to fit); ratio is computed when
 * reference_value > 0. NA_ERR_NOMEM. ref_name may be NULL. */
na_status_t na_bench_add(na_bench_t *bench, const char *name, double value, const char *unit,
                         double spread, const char *ref_name, double ref_value);
/* Add a free-text note printed under the table and stored as "notes". */
na_status_t na_bench_note(na_bench_t *bench, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

size_t                   na_bench_count(const na_bench_t *bench);
const na_bench_result_t *na_bench_get(const na_bench_t *bench, size_t i);

/* Print the machine line and the aligned table to f. */
void na_bench_print(const na_bench_t *bench, FILE *f);
/* Write the JSON document to path. NA_ERR_IO naming the path on failure. */
na_status_t na_bench_write_json(const na_bench_t *bench, const char *path);

/* One-line description of this machine: CPU model (/proc/cpuinfo), online
 * cores, memory, L3 size. Never fails (unknown parts say "?"). */
void na_bench_machine(char *buf, size_t len);

/* The 1-minute load average (/proc/loadavg), what else ran beside a
 * measurement; -1 when unknown. Every report records it: the table's
 * "load average" line and the JSON's load_avg_start / load_avg_end (at
 * na_bench_create and at print / write). */
double na_bench_loadavg(void);

/* A large buffer for measured data: 2 MiB-aligned and advised for
 * transparent huge pages (MADV_HUGEPAGE; this machine's THP mode is
 * "madvise"), so page walks do not distort bandwidth figures. Release with
 * free(). NULL when out of memory. */
void *na_bench_alloc(size_t bytes);

/* Seconds on CLOCK_MONOTONIC: na_now_s() (common/clock.h). */
double na_bench_now(void);
/* Median of v[n] (sorts v in place); 0 for n == 0. */
double na_bench_median(double *v, int n);
/* (max - min) / median of v[n] (sorts v in place); 0 for n < 2. */
double na_bench_spread(double *v, int n);
/* The p-th percentile (0..100, nearest rank) of v[n] (sorts v in place); 0 for n <= 0. */
double na_bench_percentile(double *v, long n, double p);

/* STREAM-style copy bandwidth c[i] = a[i] over two arrays of array_bytes each
 * (use >> L3), split over n_threads threads; counts 2 x array_bytes per pass
 * (STREAM convention). One warm-up pass, then `reps` timed passes: median
 * GB/s (1e9 bytes/s) in *gbs_p, spread in *spread_p. NA_ERR_NOMEM,
 * NA_ERR_INTERNAL (thread creation). */
na_status_t na_bench_stream_copy(int n_threads, size_t array_bytes, int reps,
                                 double *gbs_p, double *spread_p);
/* The same copy and, in rounds with it on the same arrays and threads, the
 * read bandwidth: each thread reads its slice of the source array (64-bit
 * words summed), counting array_bytes a pass; the reference of a decode's
 * weight read (which writes almost nothing). */
na_status_t na_bench_stream_copy_read(int n_threads, size_t array_bytes, int reps,
                                      double *copy_p, double *copy_spread_p, double *read_p,
                                      double *read_spread_p);

/* The same copy as a persistent object, so a bench can interleave one copy
 * pass with each repeat of what it measures (both then see the same machine
 * load): create (allocates and first-touches the arrays, starts n_threads-1
 * threads; NA_ERR_NOMEM / NA_ERR_INTERNAL), pass (one timed pass, returns
 * GB/s as above, then an untimed read of the source array so the copy's
 * dirty lines are written back before the caller times anything; cannot
 * fail), destroy (joins the threads). */
typedef struct na_bench_copy na_bench_copy_t;
na_status_t na_bench_copy_create(int n_threads, size_t array_bytes, na_bench_copy_t **copy_p);
double      na_bench_copy_pass(na_bench_copy_t *copy);
/* One timed read pass of the source array (as na_bench_stream_copy_read). */
double      na_bench_read_pass(na_bench_copy_t *copy);
void        na_bench_copy_destroy(na_bench_copy_t *copy);

#endif /* NA_BENCH_H */
