/* common/bench.c — benchmark reports (table + JSON), machine description,
 * median/spread and the STREAM-style copy every bench compares against. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/bench.h"

struct na_bench {
    char               name[64];
    char               machine[256];
    na_bench_result_t *res;      /* [n] */
    size_t             n, cap;
    char              *notes;    /* '\n'-separated, owned; NULL if none */
};

na_status_t na_bench_create(const char *name, na_bench_t **bench_p)
{
    na_bench_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return na_err(NA_ERR_NOMEM, "bench: out of memory");
    snprintf(b->name, sizeof(b->name), "%s", name);
    na_bench_machine(b->machine, sizeof(b->machine));
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
    na_bench_result_t *r;
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 32;
        na_bench_result_t *p = realloc(b->res, cap * sizeof(*p));
        if (p == NULL)
            return na_err(NA_ERR_NOMEM, "bench: out of memory");
        b->res = p;
        b->cap = cap;
    }
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
    char line[512];
    size_t old = b->notes ? strlen(b->notes) : 0, add;
    char *p;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    add = strlen(line);
    p = realloc(b->notes, old + add + 2);
    if (p == NULL)
        return na_err(NA_ERR_NOMEM, "bench: out of memory");
    memcpy(p + old, line, add);
    p[old + add] = '\n';
    p[old + add + 1] = '\0';
    b->notes = p;
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
    fprintf(f, "%-*s %12s %-8s %7s   %-*s %12s %7s\n", wn, "name", "value", "unit", "spread",
            wr, "reference", "ref value", "ratio");
    for (i = 0; i < b->n; i++) {
        const na_bench_result_t *r = &b->res[i];
        fprintf(f, "%-*s %12.3f %-8s %6.1f%%   %-*s ", wn, r->name, r->value, r->unit,
                100.0 * r->spread, wr, r->reference_name[0] ? r->reference_name : "-");
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
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);

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
    if (l3 > 0)
        snprintf(buf, len, "%s, %ld cores, %.1f GiB memory, L3 %ld MiB", model, cores,
                 mem / (1024.0 * 1024.0 * 1024.0), l3 >> 20);
    else
        snprintf(buf, len, "%s, %ld cores, %.1f GiB memory", model, cores,
                 mem / (1024.0 * 1024.0 * 1024.0));
}

double na_bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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

/* ---- STREAM-style copy ----------------------------------------------------- */
typedef struct {
    double            *a, *c;
    size_t             n;        /* doubles per array */
    int                n_threads;
    int                reps;     /* timed passes (plus one warm-up) */
    pthread_barrier_t  bar;
    pthread_mutex_t    mu;
    pthread_cond_t     cv;
    int                gate;     /* 0: wait, 1: go, -1: abort (under mu) */
    double            *times;    /* [reps], written by thread 0 */
} na_bench_copy_t;

/* Plain loop as in STREAM (regular stores); kept from becoming a memcpy call. */
__attribute__((optimize("no-tree-loop-distribute-patterns")))
static void na_bench_copy_slice(double *restrict c, const double *restrict a, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        c[i] = a[i];
}

static void na_bench_copy_run(na_bench_copy_t *s, int t)
{
    size_t lo = s->n * (size_t)t / (size_t)s->n_threads;
    size_t hi = s->n * (size_t)(t + 1) / (size_t)s->n_threads, i;
    int r;

    for (i = lo; i < hi; i++) {             /* first touch by the thread that copies */
        s->a[i] = 1.0 + (double)(i % 1000) * 1e-3;
        s->c[i] = 0.5;
    }
    for (r = -1; r < s->reps; r++) {
        double t0 = 0.0;
        pthread_barrier_wait(&s->bar);
        if (t == 0)
            t0 = na_bench_now();
        na_bench_copy_slice(s->c + lo, s->a + lo, hi - lo);
        pthread_barrier_wait(&s->bar);
        if (t == 0 && r >= 0)
            s->times[r] = na_bench_now() - t0;
    }
}

/* Worker: wait at the start gate (so a failed pthread_create can abort the
 * others before they reach the barrier), then copy. */
static void *na_bench_copy_thread(void *arg)
{
    na_bench_copy_t *s = ((void **)arg)[0];
    int t = (int)(intptr_t)((void **)arg)[1], gate;

    pthread_mutex_lock(&s->mu);
    while (s->gate == 0)
        pthread_cond_wait(&s->cv, &s->mu);
    gate = s->gate;
    pthread_mutex_unlock(&s->mu);
    if (gate > 0)
        na_bench_copy_run(s, t);
    return NULL;
}

static void na_bench_copy_open_gate(na_bench_copy_t *s, int gate)
{
    pthread_mutex_lock(&s->mu);
    s->gate = gate;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

na_status_t na_bench_stream_copy(int n_threads, size_t array_bytes, int reps,
                                 double *gbs_p, double *spread_p)
{
    na_bench_copy_t s;
    pthread_t *th = NULL;
    void *(*args)[2] = NULL;
    na_status_t st = NA_OK;
    double *gbs;
    int i, started = 0;

    memset(&s, 0, sizeof(s));
    s.n = array_bytes / sizeof(double);
    s.n_threads = n_threads < 1 ? 1 : n_threads;
    s.reps = reps < 1 ? 1 : reps;
    s.a = aligned_alloc(64, s.n * sizeof(double));
    s.c = aligned_alloc(64, s.n * sizeof(double));
    s.times = calloc((size_t)s.reps, sizeof(double));
    th = calloc((size_t)s.n_threads, sizeof(*th));
    args = calloc((size_t)s.n_threads, sizeof(*args));
    if (!s.a || !s.c || !s.times || !th || !args) {
        st = na_err(NA_ERR_NOMEM, "bench: no memory for 2 x %zu MiB copy arrays", array_bytes >> 20);
        goto out_free;
    }
    pthread_barrier_init(&s.bar, NULL, (unsigned)s.n_threads);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    for (i = 1; i < s.n_threads; i++) {
        args[i][0] = &s;
        args[i][1] = (void *)(intptr_t)i;
        if (pthread_create(&th[i], NULL, na_bench_copy_thread, args[i]) != 0) {
            st = na_err(NA_ERR_INTERNAL, "bench: pthread_create failed for copy thread %d", i);
            break;
        }
        started++;
    }
    na_bench_copy_open_gate(&s, st == NA_OK ? 1 : -1);
    if (st == NA_OK)
        na_bench_copy_run(&s, 0);
    for (i = 1; i <= started; i++)
        pthread_join(th[i], NULL);
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    pthread_barrier_destroy(&s.bar);
    if (st != NA_OK)
        goto out_free;
    gbs = s.times;
    for (i = 0; i < s.reps; i++)
        gbs[i] = 2.0 * (double)(s.n * sizeof(double)) / gbs[i] / 1e9;
    *spread_p = na_bench_spread(gbs, s.reps);
    *gbs_p = na_bench_median(gbs, s.reps);

out_free:
    free(args);
    free(th);
    free(s.times);
    free(s.c);
    free(s.a);
    return st;
}
