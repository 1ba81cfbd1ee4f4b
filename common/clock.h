/* common/clock.h — the monotonic clock every module times itself with. */
#ifndef NA_CLOCK_H
#define NA_CLOCK_H

#include <time.h>

/* Seconds on CLOCK_MONOTONIC (arbitrary origin). Cannot fail. */
static inline double na_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif /* NA_CLOCK_H */
