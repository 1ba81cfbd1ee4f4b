/* kernels/cpu/cpu_pool.c — the small persistent thread pool of one cpu
 * backend instance (no global state): n_threads - 1 workers sleep on a
 * condition variable between jobs; the caller of na_cpu_pool_run works on
 * the job too, so n_threads threads run it. Tasks are claimed with an atomic
 * counter, so uneven tasks balance themselves. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

struct na_cpu_pool {
    int             n_threads;
    int             n_workers;  /* started workers */
    pthread_t      *workers;    /* [n_threads - 1] */
    pthread_mutex_t mu;
    pthread_cond_t  cv_job;     /* a new job (gen changed) or stop */
    pthread_cond_t  cv_done;    /* running fell to 0 */
    unsigned long   gen;        /* job generation, under mu */
    int             running;    /* workers still inside the current job, under mu */
    int             stop;       /* under mu */
    na_cpu_task_fn  fn;         /* current job, written under mu */
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

static void *na_cpu_pool_main(void *arg)
{
    na_cpu_pool_t *p = arg;
    unsigned long seen = 0;

    pthread_mutex_lock(&p->mu);
    for (;;) {
        na_cpu_task_fn fn;
        void *ctx;
        int n_tasks;

        while (!p->stop && p->gen == seen)
            pthread_cond_wait(&p->cv_job, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        fn = p->fn;
        ctx = p->ctx;
        n_tasks = p->n_tasks;
        pthread_mutex_unlock(&p->mu);

        na_cpu_pool_work(p, fn, ctx, n_tasks);

        pthread_mutex_lock(&p->mu);
        if (--p->running == 0)
            pthread_cond_signal(&p->cv_done);
    }
    pthread_mutex_unlock(&p->mu);
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
    p->stop = 1;
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
    int t;

    if (n_tasks <= 0)
        return;
    if (p->n_workers == 0 || n_tasks == 1) {
        for (t = 0; t < n_tasks; t++)
            fn(ctx, t, n_tasks);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->running = p->n_workers;
    p->gen++;
    pthread_cond_broadcast(&p->cv_job);
    pthread_mutex_unlock(&p->mu);

    na_cpu_pool_work(p, fn, ctx, n_tasks);

    pthread_mutex_lock(&p->mu);
    while (p->running > 0)
        pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
