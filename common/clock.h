/* common/clock.h — the monotonic clock every module times itself with. */
#ifndef NA_CLOCK_H
#define NA_CLOCK_H

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

#endif /* NA_CLOCK_H */
