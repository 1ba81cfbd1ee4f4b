/* common/strbuf.h — a growing NUL-terminated string on the heap: the
 * caller's own (buf, len, cap) fields, appended to with na_strbuf_append.
 * The capacity doubles (from 64 bytes), so appends cost amortised O(n). */
#ifndef NA_STRBUF_H
#define NA_STRBUF_H

#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

/* Append n bytes of s to *buf (*len bytes now, *cap allocated) and keep it
 * NUL-terminated (*len does not count the NUL). 0, or -1 when out of
 * memory (then nothing changed). */
static inline int na_strbuf_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    char *t = na_grow(*buf, cap, *len + n + 1, 1, 64);

    if (t == NULL)
        return -1;
    *buf = t;
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

#endif /* NA_STRBUF_H */
