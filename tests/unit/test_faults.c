/* tests/unit/test_faults.c — the NA_FAULTS reader (common/faults.c): parts,
 * keys, integers, and the one-integer-key parts of the compute and prefix
 * test doubles (na_faults_part_int). */
#include <string.h>

#include "common/faults.h"
#include "tests/testutil.h"

static int count_key(void *arg, const char *key, const char *val, char *err, size_t errlen)
{
    (void)key;
    (void)val;
    (void)err;
    (void)errlen;
    ++*(int *)arg;
    return 0;
}

int main(void)
{
    char err[256];
    unsigned long long u = 0;
    int v = -1, n = 0;

    /* parts: absent, present, unknown, twice */
    NA_CHECK(na_faults_part(NULL, "kv", count_key, &n, err, sizeof(err)) == 0);
    NA_CHECK(na_faults_part("", "kv", count_key, &n, err, sizeof(err)) == 0);
    NA_CHECK(na_faults_part("kv:eio_after=2,x=1;xp:drop=0", "kv", count_key, &n, err,
                            sizeof(err)) == 1 && n == 2);
    NA_CHECK(na_faults_part("nosuch:a=1", "kv", count_key, &n, err, sizeof(err)) == -1);
    NA_CHECK(na_faults_part("kv:a=1;kv:b=2", "kv", count_key, &n, err, sizeof(err)) == -1);
    /* integers: digits only */
    NA_CHECK(na_faults_u64("k", "42", &u, err, sizeof(err)) == 0 && u == 42);
    NA_CHECK(na_faults_u64("k", "-1", &u, err, sizeof(err)) == -1);
    NA_CHECK(na_faults_u64("k", " 1", &u, err, sizeof(err)) == -1);
    NA_CHECK(na_faults_u64("k", "1x", &u, err, sizeof(err)) == -1);
    NA_CHECK(na_faults_u64("k", "99999999999999999999999", &u, err, sizeof(err)) == -1);
    /* one integer key in a range */
    NA_CHECK(na_faults_part_int("compute:op_ms=60", "compute", "op_ms", 0, 60000, &v, err,
                                sizeof(err)) == 1 && v == 60);
    NA_CHECK(na_faults_part_int("compute:op_ms=60000", "compute", "op_ms", 0, 60000, &v, err,
                                sizeof(err)) == 1 && v == 60000);
    v = -1;
    NA_CHECK(na_faults_part_int("kv:eio_after=1", "compute", "op_ms", 0, 60000, &v, err,
                                sizeof(err)) == 0 && v == -1);
    NA_CHECK(na_faults_part_int("compute:op_ms=60001", "compute", "op_ms", 0, 60000, &v, err,
                                sizeof(err)) == -1);
    NA_CHECK_MSG(strstr(err, "op_ms wants 0..60000, not 60001") != NULL, "message: %s", err);
    NA_CHECK(na_faults_part_int("prefix:hash_bits=0", "prefix", "hash_bits", 1, 256, &v, err,
                                sizeof(err)) == -1);
    NA_CHECK_MSG(strstr(err, "hash_bits wants 1..256, not 0") != NULL, "message: %s", err);
    NA_CHECK(na_faults_part_int("prefix:foo=3", "prefix", "hash_bits", 1, 256, &v, err,
                                sizeof(err)) == -1);
    NA_CHECK_MSG(strstr(err, "unknown key \"foo\" (hash_bits)") != NULL, "message: %s", err);
    NA_CHECK(na_faults_part_int("prefix:hash_bits=x", "prefix", "hash_bits", 1, 256, &v, err,
                                sizeof(err)) == -1);
    NA_CHECK(na_faults_part_int("prefix:hash_bits=256", "prefix", "hash_bits", 1, 256, &v, err,
                                sizeof(err)) == 1 && v == 256);
    return na_test_finish();
}
