/* tests/unit/test_clock.c — common/clock.h: a timed wait on a condition made
 * by na_cond_init_mono with a na_cond_deadline deadline lasts its interval on
 * CLOCK_MONOTONIC (a condition left on CLOCK_REALTIME would take the
 * monotonic deadline as long past and return at once), and deadlines carry
 * microseconds into seconds. */
#include <errno.h>
#include <pthread.h>

#include "common/clock.h"
#include "tests/testutil.h"

int main(void)
{
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv;
    struct timespec ts, now;
    uint64_t t0, dt;
    int rc;

    /* the deadline: now + us, normalised */
    clock_gettime(CLOCK_MONOTONIC, &now);
    ts = na_cond_deadline(2500000u);
    NA_CHECK(ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000L);
    dt = (uint64_t)(ts.tv_sec - now.tv_sec) * 1000000000ull + (uint64_t)ts.tv_nsec -
         (uint64_t)now.tv_nsec;
    NA_CHECK(dt >= 2500000000ull && dt < 3500000000ull);
    ts = na_cond_deadline(999999u);
    NA_CHECK(ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000L);

    /* nobody signals: the wait times out after 100 ms, not at once */
    NA_CHECK(na_cond_init_mono(&cv) == 0);
    pthread_mutex_lock(&mu);
    t0 = na_now_ns();
    ts = na_cond_deadline(100000u);
    do
        rc = pthread_cond_timedwait(&cv, &mu, &ts);
    while (rc == 0);                    /* a spurious wake-up: wait again */
    dt = na_now_ns() - t0;
    pthread_mutex_unlock(&mu);
    NA_CHECK(rc == ETIMEDOUT);
    NA_CHECK_MSG(dt >= 95000000ull, "the 100 ms wait took %.1f ms", 1e-6 * (double)dt);
    pthread_cond_destroy(&cv);
    return na_test_finish();
}
