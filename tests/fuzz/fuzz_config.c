/* tests/fuzz/fuzz_config.c — hostile YAML for the layout loader
 * (common/config.c): a deterministic, seeded mutation run.
 *
 * Seeds are the layouts in cluster-configs/ and the bad cases in
 * tests/data/config/ (their secret path rewritten to a copy of the
 * development secret in a temporary directory). Each iteration applies a few
 * mutations — random bytes, YAML-significant tokens (anchors, aliases, flow
 * brackets, "${", document markers, huge numbers, invalid UTF-8), deletions,
 * splices of another seed — writes the result to a file and loads it. Every
 * load must either succeed (then the plan is printed to /dev/null and the
 * layout destroyed) or fail with a one-line message that starts with
 * "FILE:LINE:COL: " and a status other than NA_ERR_INTERNAL / NA_ERR_NOMEM.
 * Crashes and leaks are caught by the sanitizer build.
 *
 * NA_FUZZ_ITERS (default 3000) and NA_FUZZ_SEED (default 1) set the run. */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "tests/testutil.h"

#define MAX_SEEDS 96
#define MAX_DOC   (64 * 1024)

typedef struct {
    char  *data;
    size_t len;
} seed_t;

static seed_t seeds[MAX_SEEDS];
static int n_seeds;

/* Replace every occurrence of `from` in s by `to` (to no longer than from). */
static void shrink_replace(char *s, size_t *len, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to);
    char *p;

    while ((p = strstr(s, from)) != NULL) {
        memcpy(p, to, tl);
        memmove(p + tl, p + fl, *len - (size_t)(p - s) - fl + 1);
        *len -= fl - tl;
    }
}

/* Add every *.yaml of dir as a seed. */
static void add_seeds(const char *dir)
{
    char path[4096];
    struct dirent *e;
    DIR *d = opendir(dir);

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL && n_seeds < MAX_SEEDS) {
        size_t l = strlen(e->d_name), got;
        FILE *f;
        char *buf;

        if (l < 6 || strcmp(e->d_name + l - 5, ".yaml") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        f = fopen(path, "rb");
        if (f == NULL)
            continue;
        buf = calloc(1, MAX_DOC + 1);
        got = buf != NULL ? fread(buf, 1, MAX_DOC / 2, f) : 0;
        fclose(f);
        if (buf == NULL)
            continue;
        buf[got] = '\0';
        shrink_replace(buf, &got, "../../../cluster-configs/dev.secret", "dev.secret");
        seeds[n_seeds].data = buf;
        seeds[n_seeds++].len = got;
    }
    closedir(d);
}

static const char *const tokens[] = {
    "*a", "&a ", "*s", "{", "}", "[", "]", ": ", "- ", "\n  ", "\n", "${", "${X:-", "}",
    "\"", "'", "0", "-1", "99999999999999999999", "\xff", "\xc3", "#", "---\n", "...\n",
    "<<: ", "~", "!!int ", "? ", "|\n  ", "\t", "port: ", "devices: ", "&s ", "1e400",
};

/* Apply 1..4 random edits to m (length *len, capacity MAX_DOC). */
static void mutate(na_rng_t *r, char *m, size_t *len)
{
    int k = 1 + (int)(na_rng_u64(r) % 4), j;

    for (j = 0; j < k; j++) {
        size_t pos = *len ? (size_t)(na_rng_u64(r) % *len) : 0;
        int op = (int)(na_rng_u64(r) % 4);

        if (op == 0 && *len > 0) {
            m[pos] = (char)(na_rng_u64(r) & 0xff);
        } else if (op == 1) {
            const char *t = tokens[na_rng_u64(r) % (sizeof(tokens) / sizeof(tokens[0]))];
            size_t tl = strlen(t);
            if (*len + tl < MAX_DOC) {
                memmove(m + pos + tl, m + pos, *len - pos);
                memcpy(m + pos, t, tl);
                *len += tl;
            }
        } else if (op == 2 && *len > 1) {
            size_t l = na_rng_u64(r) % 16;
            if (pos + l > *len)
                l = *len - pos;
            memmove(m + pos, m + pos + l, *len - pos - l);
            *len -= l;
        } else if (n_seeds > 0) {
            /* splice: a slice of another seed replaces the tail */
            const seed_t *o = &seeds[na_rng_u64(r) % (unsigned)n_seeds];
            size_t from = o->len ? (size_t)(na_rng_u64(r) % o->len) : 0;
            size_t l = o->len - from;
            if (pos + l > MAX_DOC)
                l = MAX_DOC - pos;
            memcpy(m + pos, o->data + from, l);
            *len = pos + l;
        }
    }
}

/* The message must start with "path:LINE:COL: ". */
static int well_formed(const char *msg, const char *path)
{
    size_t pl = strlen(path);
    const char *p = msg + pl;

    if (strncmp(msg, path, pl) != 0 || *p++ != ':' || !isdigit((unsigned char)*p))
        return 0;
    while (isdigit((unsigned char)*p))
        p++;
    if (*p++ != ':' || !isdigit((unsigned char)*p))
        return 0;
    while (isdigit((unsigned char)*p))
        p++;
    return p[0] == ':' && p[1] == ' ' && strchr(msg, '\n') == NULL;
}

int main(void)
{
    const char *src = getenv("NA_SOURCE_DIR");
    const char *it_env = getenv("NA_FUZZ_ITERS"), *seed_env = getenv("NA_FUZZ_SEED");
    long iters = it_env ? atol(it_env) : 3000, i, loaded = 0;
    char tmp[1024], dir[4200], path[1200], kv[1200], secret[1200];
    static char m[MAX_DOC + 1];
    na_rng_t r;
    FILE *devnull;
    int s;

    if (src == NULL || src[0] == '\0')
        src = ".";
    NA_CHECK(na_test_tmpdir(tmp, sizeof(tmp)) == 0);
    snprintf(dir, sizeof(dir), "%s/cluster-configs", src);
    add_seeds(dir);
    snprintf(dir, sizeof(dir), "%s/tests/data/config", src);
    add_seeds(dir);
    if (n_seeds == 0)
        NA_SKIP("no seed layouts under %s", src);

    /* the secrets the seeds name, next to the mutants */
    snprintf(secret, sizeof(secret), "%s/dev.secret", tmp);
    devnull = fopen(secret, "w");
    NA_CHECK(devnull != NULL);
    if (devnull != NULL) {
        fputs(NA_CFG_DEV_SECRET_MARK "-fuzz-0123456789\n", devnull);
        fclose(devnull);
    }
    snprintf(kv, sizeof(kv), "%s/kv", tmp);
    setenv("NA_KV_DIR", kv, 1);
    snprintf(path, sizeof(path), "%s/mutant.yaml", tmp);
    devnull = fopen("/dev/null", "w");
    na_rng_seed(&r, seed_env ? strtoull(seed_env, NULL, 10) : 1);

    for (i = 0; i < iters; i++) {
        const seed_t *sd = &seeds[na_rng_u64(&r) % (unsigned)n_seeds];
        size_t len = sd->len;
        na_cfg_t *cfg = NULL;
        na_status_t st;
        FILE *f;

        memcpy(m, sd->data, len);
        mutate(&r, m, &len);
        f = fopen(path, "wb");
        if (f == NULL)
            break;
        fwrite(m, 1, len, f);
        fclose(f);
        st = na_cfg_load(path, &cfg);
        if (st == NA_OK) {
            loaded++;
            na_cfg_print_plan(cfg, devnull);
            na_cfg_destroy(cfg);
            continue;
        }
        NA_CHECK_MSG(cfg == NULL, "iteration %ld: output set on failure", i);
        NA_CHECK_MSG(st != NA_ERR_INTERNAL && st != NA_ERR_NOMEM, "iteration %ld: %s: %s", i,
                     na_status_string(st), na_errmsg());
        NA_CHECK_MSG(well_formed(na_errmsg(), path), "iteration %ld: message '%s'", i,
                     na_errmsg());
    }
    fprintf(stderr, "%ld mutants from %d seeds, %ld loaded\n", i, n_seeds, loaded);
    if (devnull != NULL)
        fclose(devnull);
    for (s = 0; s < n_seeds; s++)
        free(seeds[s].data);
    na_test_rmtree(tmp);
    return na_test_finish();
}
