/* tests/testutil.c — see testutil.h. */
#define _GNU_SOURCE
#include "testutil.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/dtype.h"

int na_test_failures;
int na_test_checks;

int na_test_finish(void)
{
    printf("%d checks, %d failed\n", na_test_checks, na_test_failures);
    return na_test_failures == 0 && na_test_checks > 0 ? 0 : 1;
}

void na_rng_seed(na_rng_t *r, uint64_t seed)
{
    r->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (r->s == 0)
        r->s = 1;
}

uint64_t na_rng_u64(na_rng_t *r)
{
    uint64_t x = r->s;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

float na_rng_uniform(na_rng_t *r)
{
    return (float)(na_rng_u64(r) >> 40) / (float)(1ull << 24);
}

float na_rng_normal(na_rng_t *r)
{
    float u1 = na_rng_uniform(r) + 1e-7f, u2 = na_rng_uniform(r);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

void na_rng_fill(na_rng_t *r, float *x, size_t n, float lo, float hi)
{
    size_t i;
    for (i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * na_rng_uniform(r);
}

void na_rng_fill_dtype(na_rng_t *r, void *p, int dt, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        float f = na_rng_uniform(r) * 2.0f - 1.0f;
        if (dt == NA_DTYPE_F16)
            ((uint16_t *)p)[i] = na_f32_to_f16(f);
        else if (dt == NA_DTYPE_BF16)
            ((uint16_t *)p)[i] = na_f32_to_bf16(f);
        else
            ((float *)p)[i] = f;
    }
}

void *na_test_rand_dtype(na_rng_t *r, int dt, size_t n)
{
    void *p = na_test_xmalloc(na_dtype_bytes((na_dtype_t)dt, n));

    na_rng_fill_dtype(r, p, dt, n);
    return p;
}

void *na_test_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);

    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

int na_test_first_diff(const float *a, const float *b, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float)) != 0)
            return (int)i;
    return -1;
}

double na_close_ratio(const float *a, const float *b, size_t n, double atol, double rtol)
{
    double worst = 0.0;
    size_t i;
    for (i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double lim = atol + rtol * fabs((double)b[i]);
        double q = d / lim;
        if (isnan(a[i]) || isnan(b[i]))
            q = INFINITY;
        if (q > worst)
            worst = q;
    }
    return worst;
}

int na_test_tmpdir(char *buf, size_t len)
{
    const char *t = getenv("TMPDIR");
    snprintf(buf, len, "%s/nearattn-test-XXXXXX", t && t[0] ? t : "/tmp");
    return mkdtemp(buf) ? 0 : -1;
}

static int na_test_rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

void na_test_rmtree(const char *path)
{
    nftw(path, na_test_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

const char *na_test_shared_model(const char *name)
{
    static char buf[4096];
    const char *d = getenv("NA_SHARED_DIR");
    snprintf(buf, sizeof(buf), "%s/models/%s", d && d[0] ? d : "../shared", name);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

char *na_test_read_file(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;

    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) != NULL) {
        if (fread(buf, 1, (size_t)n, f) == (size_t)n) {
            buf[n] = '\0';
            *len_p = (size_t)n;
        } else {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    return buf;
}

int na_test_write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok;

    if (f == NULL)
        return -1;
    ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

int na_test_prompt(uint64_t *state, int *toks, int n, int vocab)
{
    int j;

    toks[0] = 1;
    for (j = 1; j < n; j++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        toks[j] = 3 + (int)((*state >> 33) % (uint64_t)(vocab - 3));
    }
    return n;
}

int na_test_same_ints(const int *a, int na, const int *b, int nb)
{
    return na == nb && (na == 0 || !memcmp(a, b, (size_t)na * sizeof(int)));
}
