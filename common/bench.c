/* common/bench.c — benchmark reports (table + JSON), machine description,
 * median/spread and the STREAM-style copy every bench compares against. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/bench.h"
#include "common/clock.h"
#include "common/grow.h"
#include "common/strbuf.h"

struct na_bench {
    char               name[64];
    char               machine[256];
    double             load0;    /* 1-min load average at create (-1 unknown) */
    na_bench_result_t *res;      /* [n] */
    size_t             n, cap;
    char              *notes;    /* '\n'-separated, owned; NULL if none */
    size_t             notes_len, notes_cap;
};

na_status_t na_bench_create(const char *name, na_bench_t **bench_p)
{
    na_bench_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return na_err(NA_ERR_NOMEM, "bench: out of memory");
    snprintf(b->name, sizeof(b->name), "%s", name);
    na_bench_machine(b->machine, sizeof(b->machine));
    b->load0 = na_bench_loadavg();
    *bench_p = b;
    return NA_OK;
}

void na_bench_destroy(na_bench_t *b)
{
    if (b == NULL)
        return;
    free(b->notes);
    free(b->res);
    free(b);
}

na_status_t na_bench_add(na_bench_t *b, const char *name, double value, const char *unit,
                         double spread, const char *ref_name, double ref_value)
{
    na_bench_result_t *r = na_grow(b->res, &b->cap, b->n + 1, sizeof(*r), 32);

    if (r == NULL)
        return na_err(NA_ERR_NOMEM, "bench: out of memory");
    b->res = r;
    r = &b->res[b->n++];
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "%s", name);
    snprintf(r->unit, sizeof(r->unit), "%s", unit);
    snprintf(r->reference_name, sizeof(r->reference_name), "%s", ref_name ? ref_name : "");
    r->value = value;
    r->spread = spread;
    r->reference_value = ref_value;
    r->ratio = ref_value > 0.0 ? value / ref_value : 0.0;
    return NA_OK;
}

na_status_t na_bench_note(na_bench_t *b, const char *fmt, ...)
{
    char line[512 + 1];                 /* up to 511 bytes of text and its '\n' */
    size_t n;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    n = strlen(line);
    line[n++] = '\n';
    if (na_strbuf_append(&b->notes, &b->notes_len, &b->notes_cap, line, n) != 0)
        return na_err(NA_ERR_NOMEM, "bench: out of memory");
    return NA_OK;
}

size_t na_bench_count(const na_bench_t *b)
{
    return b->n;
}

const na_bench_result_t *na_bench_get(const na_bench_t *b, size_t i)
{
    return i < b->n ? &b->res[i] : NULL;
}

void na_bench_print(const na_bench_t *b, FILE *f)
{
    int wn = 4, wr = 9;
    size_t i;

    for (i = 0; i < b->n; i++) {
        int a = (int)strlen(b->res[i].name), c = (int)strlen(b->res[i].reference_name);
        if (a > wn) wn = a;
        if (c > wr) wr = c;
    }
    fprintf(f, "bench %s on %s\n", b->name, b->machine);
    fprintf(f, "load average (1 min, /proc/loadavg): %.2f at the start, %.2f at the end\n",
            b->load0, na_bench_loadavg());
    fprintf(f, "%-*s %12s %-8s %7s   %-*s %12s %7s\n", wn, "name", "value", "unit", "spread",
            wr, "reference", "ref value", "ratio");
    for (i = 0; i < b->n; i++) {
        const na_bench_result_t *r = &b->res[i];
        char sp[16] = "-";                        /* one run: no spread, not "0.0%" */
        if (r->spread > 0.0)
            snprintf(sp, sizeof(sp), "%.1f%%", 100.0 * r->spread);
        fprintf(f, "%-*s %12.3f %-8s %7s   %-*s ", wn, r->name, r->value, r->unit, sp, wr,
                r->reference_name[0] ? r->reference_name : "-");
        if (r->reference_value > 0.0)
            fprintf(f, "%12.3f %6.1f%%\n", r->reference_value, 100.0 * r->ratio);
        else
            fprintf(f, "%12s %7s\n", "-", "-");
    }
    if (b->notes)
        fprintf(f, "\n%s", b->notes);
}

/* s as a JSON string literal. */
static void na_bench_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

na_status_t na_bench_write_json(const na_bench_t *b, const char *path)
{
    FILE *f = fopen(path, "w");
    size_t i;
    int bad;

    if (f == NULL)
        return na_err(NA_ERR_IO, "bench: cannot write %s: %s", path, strerror(errno));
    fputs("{\"bench\": ", f);
    na_bench_json_str(f, b->name);
    fputs(", \"machine\": ", f);
    na_bench_json_str(f, b->machine);
    fprintf(f, ", \"load_avg_start\": %.2f, \"load_avg_end\": %.2f", b->load0,
            na_bench_loadavg());
    fputs(", \"results\": [", f);
    for (i = 0; i < b->n; i++) {
        const na_bench_result_t *r = &b->res[i];
        fputs(i ? ",\n  {\"name\": " : "\n  {\"name\": ", f);
        na_bench_json_str(f, r->name);
        fprintf(f, ", \"value\": %.6g, \"unit\": ", r->value);
        na_bench_json_str(f, r->unit);
        fputs(", \"reference_name\": ", f);
        na_bench_json_str(f, r->reference_name);
        fprintf(f, ", \"reference_value\": %.6g, \"ratio\": %.6g, \"spread\": %.6g}",
                r->reference_value, r->ratio, r->spread);
    }
    fputs("\n], \"notes\": ", f);
    na_bench_json_str(f, b->notes ? b->notes : "");
    fputs("}\n", f);
    bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return na_err(NA_ERR_IO, "bench: write %s failed", path);
    return NA_OK;
}

void na_bench_machine(char *buf, size_t len)
{
    char line[512], model[256] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    long l3 = -1;

    if (f != NULL) {
        while (fgets(line, sizeof(line), f)) {
            if (!strncmp(line, "model name", 10)) {
                char *c = strchr(line, ':');
                if (c != NULL) {
                    c++;
                    while (*c == ' ' || *c == '\t')
                        c++;
                    c[strcspn(c, "\n")] = '\0';
                    snprintf(model, sizeof(model), "%s", c);
                }
                break;
            }
        }
        fclose(f);
    }
    f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");   /* e.g. "32768K" */
    if (f != NULL) {
        if (fgets(line, sizeof(line), f) && line[0] >= '0' && line[0] <= '9')
            l3 = strtol(line, NULL, 10) >> 10;
        fclose(f);
    }
    if (l3 > 0)
        snprintf(buf, len, "%s, %ld cores, %.1f GiB memory, L3 %ld MiB", model, cores,
                 mem / (1024.0 * 1024.0 * 1024.0), l3);
    else
        snprintf(buf, len, "%s, %ld cores, %.1f GiB memory", model, cores,
                 mem / (1024.0 * 1024.0 * 1024.0));
}

double na_bench_loadavg(void)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double la = -1.0;

    if (f != NULL) {
        if (fscanf(f, "%lf", &la) != 1)
            la = -1.0;
        fclose(f);
    }
    return la;
}

void *na_bench_alloc(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    size_t len = (bytes + huge - 1) / huge * huge;
    void *p = NULL;

    if (len == 0 || posix_memalign(&p, huge, len) != 0)
        return NULL;
    (void)madvise(p, len, MADV_HUGEPAGE);        /* advice only: failure is harmless */
    return p;
}

double na_bench_now(void)
{
    return na_now_s();
}

static int na_bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double na_bench_median(double *v, int n)
{
    if (n <= 0)
        return 0.0;
    qsort(v, (size_t)n, sizeof(double), na_bench_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double na_bench_spread(double *v, int n)
{
    double med;
    if (n < 2)
        return 0.0;
    med = na_bench_median(v, n);
    return med != 0.0 ? (v[n - 1] - v[0]) / med : 0.0;
}

double na_bench_percentile(double *v, long n, double p)
{
    long k;
    if (n <= 0)
        return 0.0;
    qsort(v, (size_t)n, sizeof(double), na_bench_cmp);
    k = (long)(p / 100.0 * (double)n + 0.999999) - 1;     /* nearest rank: ceil(p n) - 1 */
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

/* ---- STREAM-style copy ----------------------------------------------------- */
/* What thread t of a copy object owns: its argument, its handle (t > 0) and
 * its read-pass sum (kept so that no read is left out, never used). */
typedef struct {
    struct na_bench_copy *s;
    int                   t;
    pthread_t             th;
    volatile uint64_t     sum;
} na_bench_copy_th_t;

struct na_bench_copy {
    double            *a, *c;
    size_t             n;        /* doubles per array */
    int                n_threads;
    na_bench_copy_th_t *per;    /* [n_threads]: per[0] is the caller's (no th) */
    int                started;  /* workers started */
    pthread_barrier_t  bar;      /* n_threads: start and end of each pass */
    pthread_mutex_t    mu;
    pthread_cond_t     cv;
    int                gate;     /* 0: wait, 1: go, -1: abort (under mu) */
    int                stop;     /* set by destroy before the last start barrier */
    int                read;     /* this pass: 1 read a only (na_bench_read_pass), 0 copy */
};

/* Plain loop as in STREAM (regular stores); kept from becoming a memcpy call
 * (gcc: no loop-distribution into library calls; clang: no memcpy builtin). */
#if defined(__clang__)
__attribute__((no_builtin("memcpy")))
#else
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
static void na_bench_copy_slice(double *restrict c, const double *restrict a, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        c[i] = a[i];
}

/* A read pass over a[n] as 64-bit words summed in four chains (integer
 * adds: vectorised without reassociating floating point), the sum kept. */
static uint64_t na_bench_read_slice(const double *a, size_t n)
{
    const uint64_t *w = (const uint64_t *)(const void *)a;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i;
    for (i = 0; i + 4 <= n; i += 4) {
        s0 += w[i];
        s1 += w[i + 1];
        s2 += w[i + 2];
        s3 += w[i + 3];
    }
    for (; i < n; i++)
        s0 += w[i];
    return s0 + s1 + s2 + s3;
}

static void na_bench_copy_range(const na_bench_copy_t *s, int t, size_t *lo, size_t *hi)
{
    *lo = s->n * (size_t)t / (size_t)s->n_threads;
    *hi = s->n * (size_t)(t + 1) / (size_t)s->n_threads;
}

/* First touch by the thread that will copy the slice. */
static void na_bench_copy_init_slice(na_bench_copy_t *s, int t)
{
    size_t lo, hi, i;
    na_bench_copy_range(s, t, &lo, &hi);
    for (i = lo; i < hi; i++) {
        s->a[i] = 1.0 + (double)(i % 1000) * 1e-3;
        s->c[i] = 0.5;
    }
}

/* Worker t: wait at the gate (a failed pthread_create aborts the others
 * before they reach the barrier), then one slice copy per pass until stop. */
static void *na_bench_copy_thread(void *arg)
{
    na_bench_copy_t *s = ((na_bench_copy_th_t *)arg)->s;
    int t = ((na_bench_copy_th_t *)arg)->t, gate;
    size_t lo, hi;

    pthread_mutex_lock(&s->mu);
    while (s->gate == 0)
        pthread_cond_wait(&s->cv, &s->mu);
    gate = s->gate;
    pthread_mutex_unlock(&s->mu);
    if (gate < 0)
        return NULL;
    na_bench_copy_init_slice(s, t);
    na_bench_copy_range(s, t, &lo, &hi);
    for (;;) {
        pthread_barrier_wait(&s->bar);
        if (s->stop)
            break;
        if (s->read)
            s->per[t].sum = na_bench_read_slice(s->a + lo, hi - lo);
        else
            na_bench_copy_slice(s->c + lo, s->a + lo, hi - lo);
        pthread_barrier_wait(&s->bar);
    }
    return NULL;
}

static void na_bench_copy_open_gate(na_bench_copy_t *s, int gate)
{
    pthread_mutex_lock(&s->mu);
    s->gate = gate;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* The started workers joined (they have left their loop), then the
 * synchronisation objects destroyed: create's failure path and destroy. */
static void na_bench_copy_join(na_bench_copy_t *s)
{
    int i;
    for (i = 1; i <= s->started; i++)
        pthread_join(s->per[i].th, NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    pthread_barrier_destroy(&s->bar);
}

/* Every allocation of s (any may be NULL), then s. */
static void na_bench_copy_free(na_bench_copy_t *s)
{
    free(s->per);
    free(s->c);
    free(s->a);
    free(s);
}

na_status_t na_bench_copy_create(int n_threads, size_t array_bytes, na_bench_copy_t **copy_p)
{
    na_bench_copy_t *s = calloc(1, sizeof(*s));
    na_status_t st = NA_OK;
    int i;

    if (s == NULL)
        return na_err(NA_ERR_NOMEM, "bench: out of memory");
    s->n = array_bytes / sizeof(double);
    s->n_threads = n_threads < 1 ? 1 : n_threads;
    s->a = na_bench_alloc(s->n * sizeof(double));
    s->c = na_bench_alloc(s->n * sizeof(double));
    s->per = calloc((size_t)s->n_threads, sizeof(*s->per));
    if (!s->a || !s->c || !s->per) {
        st = na_err(NA_ERR_NOMEM, "bench: no memory for 2 x %zu MiB copy arrays",
                    array_bytes >> 20);
        goto err_free;
    }
    pthread_barrier_init(&s->bar, NULL, (unsigned)s->n_threads);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    for (i = 1; i < s->n_threads; i++) {
        s->per[i].s = s;
        s->per[i].t = i;
        if (pthread_create(&s->per[i].th, NULL, na_bench_copy_thread, &s->per[i]) != 0) {
            st = na_err(NA_ERR_INTERNAL, "bench: pthread_create failed for copy thread %d", i);
            break;
        }
        s->started++;
    }
    na_bench_copy_open_gate(s, st == NA_OK ? 1 : -1);
    if (st != NA_OK)
        goto err_join;
    na_bench_copy_init_slice(s, 0);
    *copy_p = s;
    return NA_OK;

err_join:
    na_bench_copy_join(s);
err_free:
    na_bench_copy_free(s);
    return st;
}

/* Sum of a[n]: an untimed read sweep. */
static double na_bench_read_sweep(const double *a, size_t n)
{
    double s0 = 0.0, s1 = 0.0;
    size_t i;
    for (i = 0; i + 1 < n; i += 2) {
        s0 += a[i];
        s1 += a[i + 1];
    }
    return s0 + s1;
}

double na_bench_copy_pass(na_bench_copy_t *s)
{
    volatile double sink;
    size_t lo, hi;
    double t0, gbs;

    na_bench_copy_range(s, 0, &lo, &hi);
    s->read = 0;                        /* seen by the workers after the barrier */
    pthread_barrier_wait(&s->bar);
    t0 = na_bench_now();
    na_bench_copy_slice(s->c + lo, s->a + lo, hi - lo);
    pthread_barrier_wait(&s->bar);
    gbs = 2.0 * (double)(s->n * sizeof(double)) / (na_bench_now() - t0) / 1e9;
    /* The copy leaves the caches full of dirty lines of c, whose write-back
     * would eat into whatever is timed next: push them out now by reading a. */
    sink = na_bench_read_sweep(s->a, s->n);
    (void)sink;
    return gbs;
}

double na_bench_read_pass(na_bench_copy_t *s)
{
    size_t lo, hi;
    double t0;

    na_bench_copy_range(s, 0, &lo, &hi);
    s->read = 1;                        /* seen by the workers after the barrier */
    pthread_barrier_wait(&s->bar);
    t0 = na_bench_now();
    s->per[0].sum = na_bench_read_slice(s->a + lo, hi - lo);
    pthread_barrier_wait(&s->bar);
    return (double)(s->n * sizeof(double)) / (na_bench_now() - t0) / 1e9;
}

void na_bench_copy_destroy(na_bench_copy_t *s)
{
    if (s == NULL)
        return;
    s->stop = 1;                     /* read by workers after the barrier below */
    pthread_barrier_wait(&s->bar);
    na_bench_copy_join(s);
    na_bench_copy_free(s);
}

/* The copy (copy_p, copy_spread_p) and, when read_p is not NULL, the read
 * pass of one copy object: one warm-up pass of each, then reps timed rounds
 * (a round: a copy pass, then a read pass, so both see the same load). */
static na_status_t na_bench_stream(int n_threads, size_t array_bytes, int reps, double *copy_p,
                                   double *copy_spread_p, double *read_p, double *read_spread_p)
{
    na_bench_copy_t *c;
    double *gbs;
    na_status_t st;
    int r;

    reps = reps < 1 ? 1 : reps;
    gbs = calloc(2 * (size_t)reps, sizeof(double));     /* copy passes, then read passes */
    if (gbs == NULL)
        return na_err(NA_ERR_NOMEM, "bench: out of memory");
    st = na_bench_copy_create(n_threads, array_bytes, &c);
    if (st != NA_OK) {
        free(gbs);
        return st;
    }
    (void)na_bench_copy_pass(c);                                    /* warm-up */
    if (read_p != NULL)
        (void)na_bench_read_pass(c);
    for (r = 0; r < reps; r++) {
        gbs[r] = na_bench_copy_pass(c);
        if (read_p != NULL)
            gbs[reps + r] = na_bench_read_pass(c);
    }
    na_bench_copy_destroy(c);
    *copy_spread_p = na_bench_spread(gbs, reps);
    *copy_p = na_bench_median(gbs, reps);
    if (read_p != NULL) {
        *read_spread_p = na_bench_spread(gbs + reps, reps);
        *read_p = na_bench_median(gbs + reps, reps);
    }
    free(gbs);
    return NA_OK;
}

na_status_t na_bench_stream_copy(int n_threads, size_t array_bytes, int reps,
                                 double *gbs_p, double *spread_p)
{
    return na_bench_stream(n_threads, array_bytes, reps, gbs_p, spread_p, NULL, NULL);
}

na_status_t na_bench_stream_copy_read(int n_threads, size_t array_bytes, int reps,
                                      double *copy_p, double *copy_spread_p, double *read_p,
                                      double *read_spread_p)
{
    return na_bench_stream(n_threads, array_bytes, reps, copy_p, copy_spread_p, read_p,
                           read_spread_p);
}
