/* common/faults.c — the NA_FAULTS syntax (common/faults.h). */
#include "common/faults.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole spec names only known parts, each once. */
static int na_faults_check(const char *spec, char *err, size_t errlen)
{
    static const char *const names[] = { "kv", "xp", "csd", "prefix", "compute", NULL };
    unsigned seen = 0;
    const char *s = spec;

    while (s != NULL && *s != '\0') {
        const char *colon, *semi = strchr(s, ';');
        size_t len = semi != NULL ? (size_t)(semi - s) : strlen(s);
        int i;

        while (len > 0 && *s == ' ')
            s++, len--;
        colon = memchr(s, ':', len);
        for (i = 0; colon != NULL && names[i] != NULL; i++)
            if (strlen(names[i]) == (size_t)(colon - s) &&
                strncmp(s, names[i], (size_t)(colon - s)) == 0)
                break;
        if (len > 0 && (colon == NULL || names[i] == NULL)) {
            snprintf(err, errlen, "NA_FAULTS: unknown part \"%.*s\" (parts: kv, xp, csd)", (int)len,
                     s);
            return -1;
        }
        if (len > 0 && (seen & (1u << i))) {
            snprintf(err, errlen, "NA_FAULTS: part \"%s\" given twice", names[i]);
            return -1;
        }
        if (len > 0)
            seen |= 1u << i;
        s = semi != NULL ? semi + 1 : NULL;
    }
    return 0;
}

int na_faults_part(const char *spec, const char *name, na_faults_key_fn fn, void *arg,
                   char *err, size_t errlen)
{
    size_t nl = strlen(name);
    const char *s = spec, *end;

    if (na_faults_check(spec, err, errlen) != 0)
        return -1;

    /* find "NAME:" at the start or after ';' */
    while (s != NULL && *s != '\0') {
        while (*s == ' ')
            s++;
        if (strncmp(s, name, nl) == 0 && s[nl] == ':')
            break;
        s = strchr(s, ';');
        if (s != NULL)
            s++;
    }
    if (s == NULL || *s == '\0')
        return 0;
    s += nl + 1;
    end = strchr(s, ';');
    if (end == NULL)
        end = s + strlen(s);
    while (s < end) {
        char key[32], val[64], sub[200];
        const char *comma = memchr(s, ',', (size_t)(end - s));
        const char *eq = memchr(s, '=', (size_t)(end - s));
        size_t kl, vl;

        if (comma == NULL)
            comma = end;
        if (eq == NULL || eq > comma || (kl = (size_t)(eq - s)) == 0 || kl >= sizeof(key) ||
            (vl = (size_t)(comma - eq - 1)) == 0 || vl >= sizeof(val)) {
            snprintf(err, errlen, "NA_FAULTS %s: expected key=value at \"%.*s\"", name,
                     (int)(comma - s), s);
            return -1;
        }
        memcpy(key, s, kl);
        key[kl] = '\0';
        memcpy(val, eq + 1, vl);
        val[vl] = '\0';
        if (fn(arg, key, val, sub, sizeof(sub)) != 0) {
            snprintf(err, errlen, "NA_FAULTS %s: %s", name, sub);
            return -1;
        }
        s = comma < end ? comma + 1 : end;
    }
    return 1;
}

int na_faults_u64(const char *key, const char *val, unsigned long long *v, char *err,
                  size_t errlen)
{
    char *e;

    errno = 0;
    *v = strtoull(val, &e, 10);
    if (!isdigit((unsigned char)val[0]) || errno != 0 || *e != '\0') {
        snprintf(err, errlen, "%s wants a non-negative integer, not \"%s\"", key, val);
        return -1;
    }
    return 0;
}

typedef struct {
    const char *key;
    int         lo, hi, *v;
} na_faults_int_t;

static int na_faults_int_key(void *arg, const char *key, const char *val, char *err,
                             size_t errlen)
{
    const na_faults_int_t *k = arg;
    unsigned long long v;

    if (strcmp(key, k->key) != 0) {
        snprintf(err, errlen, "unknown key \"%s\" (%s)", key, k->key);
        return -1;
    }
    if (na_faults_u64(key, val, &v, err, errlen) != 0)
        return -1;
    if (v < (unsigned long long)k->lo || v > (unsigned long long)k->hi) {
        snprintf(err, errlen, "%s wants %d..%d, not %llu", key, k->lo, k->hi, v);
        return -1;
    }
    *k->v = (int)v;
    return 0;
}

int na_faults_part_int(const char *spec, const char *name, const char *key, int lo, int hi,
                       int *v, char *err, size_t errlen)
{
    na_faults_int_t k = { key, lo, hi, v };
    return na_faults_part(spec, name, na_faults_int_key, &k, err, errlen);
}
