/* rdma/ses_fault.c — the session layer's fault double (rdma/ses_fault.h).
 * Keys of the "xp" part: drop, corrupt, truncate, dup = probabilities per
 * message; delay_ms = sleep before each message (delay = its probability,
 * default 1); stall_ms = one sleep of the whole sender (a stalled peer) at
 * message `after`; after = messages passed untouched first; max = injections
 * at most (0: no limit); seed = the pseudo-random stream; fail = the send
 * itself fails (as when the UCX endpoint failed); to = only messages to the
 * peer of that name are counted and touched. A message's fate depends only
 * on seed and its number, whatever the threads. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/faults.h"
#include "common/log.h"
#include "common/status.h"
#include "rdma/ses_fault.h"

int na_ses_faults_on;

static struct {
    double   p_drop, p_corrupt, p_truncate, p_dup, p_delay, p_fail;
    char     to[64];                    /* "": every peer */
    unsigned delay_ms, stall_ms;
    uint64_t after, max, seed;
    uint64_t n, hits;                   /* messages seen, injections (atomic) */
    int      state;                     /* 0 off, 1 on, -1 malformed */
    char     err[256];
} ses_f = { .p_delay = 1.0, .seed = 1 };

static pthread_once_t ses_f_once = PTHREAD_ONCE_INIT;

static int ses_fault_key(void *arg, const char *key, const char *val, char *err, size_t errlen)
{
    static const char *const probs[] = { "drop", "corrupt", "truncate", "dup", "delay", "fail" };
    double *const pp[] = { &ses_f.p_drop, &ses_f.p_corrupt, &ses_f.p_truncate, &ses_f.p_dup,
                           &ses_f.p_delay, &ses_f.p_fail };
    char *e;
    size_t i;

    (void)arg;
    errno = 0;
    if (strcmp(key, "to") == 0) {
        if (val[0] == '\0' || strlen(val) >= sizeof(ses_f.to)) {
            snprintf(err, errlen, "to wants a peer name of 1..%zu characters",
                     sizeof(ses_f.to) - 1);
            return -1;
        }
        snprintf(ses_f.to, sizeof(ses_f.to), "%s", val);
        return 0;
    }
    for (i = 0; i < sizeof(probs) / sizeof(probs[0]); i++) {
        if (strcmp(key, probs[i]) == 0) {
            double v = strtod(val, &e);
            if (errno != 0 || *e != '\0' || !(v >= 0.0 && v <= 1.0)) {
                snprintf(err, errlen, "%s wants a probability in [0, 1], not \"%s\"", key, val);
                return -1;
            }
            *pp[i] = v;
            return 0;
        }
    }
    {
        unsigned long long v;
        if (na_faults_u64(key, val, &v, err, errlen) != 0)
            return -1;
        if (strcmp(key, "delay_ms") == 0 && v <= 60000)
            ses_f.delay_ms = (unsigned)v;
        else if (strcmp(key, "stall_ms") == 0 && v <= 600000)
            ses_f.stall_ms = (unsigned)v;
        else if (strcmp(key, "after") == 0)
            ses_f.after = v;
        else if (strcmp(key, "max") == 0)
            ses_f.max = v;
        else if (strcmp(key, "seed") == 0)
            ses_f.seed = v;
        else {
            snprintf(err, errlen, "unknown or out-of-range key \"%s\" (drop, corrupt, truncate, "
                     "dup, fail, delay, delay_ms, stall_ms, after, max, seed, to)", key);
            return -1;
        }
    }
    return 0;
}

static void ses_fault_load(void)
{
    const char *spec = getenv("NA_FAULTS");

    ses_f.state = na_faults_part(spec, "xp", ses_fault_key, NULL, ses_f.err, sizeof(ses_f.err));
    if (ses_f.state > 0) {
        fprintf(stderr, "nearattn: TEST DOUBLE: transport faults injected (NA_FAULTS=\"%s\"); "
                "not for production\n", spec);
        na_ses_faults_on = 1;
    }
}

na_status_t na_ses_fault_init(void)
{
    pthread_once(&ses_f_once, ses_fault_load);
    if (ses_f.state < 0)
        return na_err(NA_ERR_INVALID, "%s", ses_f.err);
    return NA_OK;
}

/* splitmix64: a uniform [0, 1) draw for message n. */
static double ses_fault_draw(uint64_t n)
{
    uint64_t z = ses_f.seed * 0x9e3779b97f4a7c15ull + n + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

static void ses_fault_sleep(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

na_ses_fault_t na_ses_fault_pick(const char *who, const char *tname, const char *peer)
{
    static const char *const names[] = { "", "dropped", "corrupted", "truncated", "duplicated",
                                         "failed the send of" };
    uint64_t n;
    na_ses_fault_t f = NA_SES_FAULT_NONE;
    double u;

    if (ses_f.to[0] != '\0' && (peer == NULL || strcmp(peer, ses_f.to) != 0))
        return NA_SES_FAULT_NONE;
    n = __atomic_fetch_add(&ses_f.n, 1, __ATOMIC_RELAXED);
    if (n < ses_f.after)
        return NA_SES_FAULT_NONE;
    if (n == ses_f.after && ses_f.stall_ms > 0) {
        fprintf(stderr, "nearattn: TEST DOUBLE: %s stalls %u ms before sending %s to %s\n",
                who, ses_f.stall_ms, tname, peer);
        ses_fault_sleep(ses_f.stall_ms);
    }
    if (ses_f.delay_ms > 0 && ses_fault_draw(~n) < ses_f.p_delay)
        ses_fault_sleep(ses_f.delay_ms);
    u = ses_fault_draw(n);
    if (u < ses_f.p_drop)
        f = NA_SES_FAULT_DROP;
    else if ((u -= ses_f.p_drop) < ses_f.p_corrupt)
        f = NA_SES_FAULT_CORRUPT;
    else if ((u -= ses_f.p_corrupt) < ses_f.p_truncate)
        f = NA_SES_FAULT_TRUNCATE;
    else if ((u -= ses_f.p_truncate) < ses_f.p_dup)
        f = NA_SES_FAULT_DUP;
    else if ((u -= ses_f.p_dup) < ses_f.p_fail)
        f = NA_SES_FAULT_FAIL;
    if (f == NA_SES_FAULT_NONE)
        return f;
    if (ses_f.max > 0 && __atomic_fetch_add(&ses_f.hits, 1, __ATOMIC_RELAXED) >= ses_f.max)
        return NA_SES_FAULT_NONE;
    fprintf(stderr, "nearattn: TEST DOUBLE: %s %s message %llu (%s to %s)\n", who, names[f],
            (unsigned long long)n, tname, peer);
    return f;
}
