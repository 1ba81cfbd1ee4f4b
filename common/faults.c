/* common/faults.c — the NA_FAULTS syntax (common/faults.h). */
#include "common/faults.h"

#include <stdio.h>
#include <string.h>

int na_faults_part(const char *spec, const char *name, na_faults_key_fn fn, void *arg,
                   char *err, size_t errlen)
{
    size_t nl = strlen(name);
    const char *s = spec, *end;

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
