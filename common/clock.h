/* common/clock.h — the monotonic clock every module times itself with. */
#ifndef NA_CLOCK_H
#define NA_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC (arbitrary origin). Cannot fail. */
static inline uint64_t na_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Seconds on CLOCK_MONOTONIC (arbitrary origin). Cannot fail. */
static inline double na_now_s(void)
{
    return 1e-9 * (double)na_now_ns();
}

/* Initialise a condition variable whose timed waits count on CLOCK_MONOTONIC,
 * so that setting the wall clock neither stretches nor cuts them. Every
 * condition variable given to pthread_cond_timedwait is made here, with its
 * deadline from na_cond_deadline(). Returns pthread_cond_init's result. */
static inline int na_cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    int rc;

    if ((rc = pthread_condattr_init(&a)) != 0)
        return rc;
    rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

/* The absolute CLOCK_MONOTONIC time us microseconds from now, for
 * pthread_cond_timedwait on a condition made by na_cond_init_mono(). */
static inline struct timespec na_cond_deadline(uint64_t us)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(us / 1000000u);
    ts.tv_nsec += (long)(us % 1000000u) * 1000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    return ts;
}

#endif /* NA_CLOCK_H */
