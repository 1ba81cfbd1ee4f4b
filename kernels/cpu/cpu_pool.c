/* kernels/cpu/cpu_pool.c — the small persistent thread pool of one cpu
 * backend instance (no global state): n_threads - 1 workers wait between
 * jobs; the caller of na_cpu_pool_run works on the job too, so n_threads
 * threads run it. Tasks are claimed with an atomic counter, so uneven tasks
 * balance themselves.
 *
 * Waiting is spin-then-sleep: a worker polls the job generation for about
 * NA_CPU_POOL_SPIN pause instructions (tens of microseconds) before it sleeps
 * on the condition variable, and the caller polls the count of running
 * workers the same way before it sleeps. Decode runs ~7 matmuls per layer
 * back to back, each a job: waking a sleeping thread through a futex costs
 * tens of microseconds on these VMs, per job. `nearattn bench e2e --peers
 * --shapes 15m,110m --dtypes q8_0,f32 --threads-list 2 --reps 1`, 4
 * alternated runs, tg64 tok/s sleeping at once / spinning first: 15M q8_0
 * 988-1172 / 2635-2818, 110M q8_0 181-213 / 227-243, 110M f32 74-81 /
 * 82-97, 15M f32 474-642 / 538-822 (noisy either way). The
 * sleeping side is the usual lost-wake-up pattern made safe by sequentially
 * consistent atomics: a side that announces it sleeps (sleepers, waiting)
 * then re-checks the condition; the other side changes the condition, then
 * looks for sleepers and signals under the mutex. */
#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

#define NA_CPU_POOL_SPIN 4000    /* pause instructions before sleeping (~50-100 us) */

struct na_cpu_pool {
    int             n_threads;
    int             n_workers;  /* started workers */
    pthread_t      *workers;    /* [n_threads - 1] */
    pthread_mutex_t mu;
    pthread_cond_t  cv_job;     /* a new job (gen changed) or stop */
    pthread_cond_t  cv_done;    /* running fell to 0 */
    atomic_ulong    gen;        /* job generation: fn, ctx, n_tasks, next are set before it */
    atomic_int      running;    /* workers still inside the current job */
    atomic_int      rest;       /* 1: no job soon (na_cpu_pool_rest): sleep, do not spin */
    atomic_int      stop;
    atomic_int      sleepers;   /* workers asleep (or about to be) on cv_job */
    atomic_int      waiting;    /* the caller asleep (or about to be) on cv_done */
    na_cpu_task_fn  fn;         /* current job */
    void           *ctx;
    int             n_tasks;
    atomic_int      next;       /* next unclaimed task */
};

/* Claim and run tasks of the current job until none is left. */
static void na_cpu_pool_work(na_cpu_pool_t *p, na_cpu_task_fn fn, void *ctx, int n_tasks)
{
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= n_tasks)
            break;
        fn(ctx, t, n_tasks);
    }
}

/* Wait until the job generation differs from seen (or stop): spin, then sleep. */
static unsigned long na_cpu_pool_wait_job(na_cpu_pool_t *p, unsigned long seen)
{
    unsigned long g;
    int i;

    for (i = 0; i < NA_CPU_POOL_SPIN && !atomic_load(&p->rest); i++) {
        g = atomic_load(&p->gen);
        if (g != seen || atomic_load(&p->stop))
            return g;
        _mm_pause();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv_job, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *na_cpu_pool_main(void *arg)
{
    na_cpu_pool_t *p = arg;
    unsigned long seen = 0;

    for (;;) {
        seen = na_cpu_pool_wait_job(p, seen);
        if (atomic_load(&p->stop))
            break;
        na_cpu_pool_work(p, p->fn, p->ctx, p->n_tasks);
        if (atomic_fetch_sub(&p->running, 1) == 1 && atomic_load(&p->waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

na_status_t na_cpu_pool_create(int n_threads, na_cpu_pool_t **pool_p)
{
    na_cpu_pool_t *p;
    int i, rc;

    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return na_err(NA_ERR_NOMEM, "kernels cpu: out of memory for the thread pool");
    p->n_threads = n_threads < 1 ? 1 : n_threads;
    atomic_init(&p->next, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->running, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->waiting, 0);
    if (p->n_threads > 1) {
        p->workers = calloc((size_t)p->n_threads - 1, sizeof(pthread_t));
        if (p->workers == NULL) {
            free(p);
            return na_err(NA_ERR_NOMEM, "kernels cpu: out of memory for the thread pool");
        }
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_job, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    for (i = 0; i < p->n_threads - 1; i++) {
        rc = pthread_create(&p->workers[i], NULL, na_cpu_pool_main, p);
        if (rc != 0) {
            na_cpu_pool_destroy(p);
            return na_err(NA_ERR_INTERNAL, "kernels cpu: pthread_create: %s", strerror(rc));
        }
        p->n_workers++;
    }
    *pool_p = p;
    return NA_OK;
}

void na_cpu_pool_destroy(na_cpu_pool_t *p)
{
    int i;
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv_job);
    pthread_mutex_unlock(&p->mu);
    for (i = 0; i < p->n_workers; i++)
        pthread_join(p->workers[i], NULL);
    pthread_cond_destroy(&p->cv_done);
    pthread_cond_destroy(&p->cv_job);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

void na_cpu_pool_run(na_cpu_pool_t *p, na_cpu_task_fn fn, void *ctx, int n_tasks)
{
    int t, i;

    if (n_tasks <= 0)
        return;
    if (p->n_workers == 0 || n_tasks == 1) {
        for (t = 0; t < n_tasks; t++)
            fn(ctx, t, n_tasks);
        return;
    }
    /* every worker is between jobs here (the last run waited for all) */
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    atomic_store(&p->running, p->n_workers);
    atomic_store(&p->rest, 0);
    atomic_fetch_add(&p->gen, 1);          /* publishes the job (seq_cst) */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_job);
        pthread_mutex_unlock(&p->mu);
    }

    na_cpu_pool_work(p, fn, ctx, n_tasks);

    for (i = 0; i < NA_CPU_POOL_SPIN && atomic_load(&p->running) > 0; i++)
        _mm_pause();
    if (atomic_load(&p->running) > 0) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->waiting, 1);
        while (atomic_load(&p->running) > 0)
            pthread_cond_wait(&p->cv_done, &p->mu);
        atomic_store(&p->waiting, 0);
        pthread_mutex_unlock(&p->mu);
    }
}

void na_cpu_pool_rest(na_cpu_pool_t *pool)
{
    if (pool != NULL)
        atomic_store(&pool->rest, 1);
}
