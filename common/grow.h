/* common/grow.h — a growing array on the heap: the caller's own (array, cap)
 * fields, grown with na_grow before an append. The capacity doubles (from
 * the caller's first size), so appends cost amortised O(n). */
#ifndef NA_GROW_H
#define NA_GROW_H

#include <stdint.h>
#include <stdlib.h>

/* Room for need (>= 1) elements of elem bytes in arr (cap allocated, NULL
 * when 0): arr itself when *cap >= need, else arr moved to a capacity that
 * doubles from first (or *cap) until it holds need, *cap set to it. NULL
 * when out of memory or the size overflows: then arr and *cap are unchanged
 * (and arr still the caller's). Typical use:
 *     na_item_t *v = na_grow(a->v, &a->cap, a->n + 1, sizeof(*v), 16);
 *     if (v == NULL) return na_err(NA_ERR_NOMEM, ...);
 *     a->v = v;                                                        */
static inline void *na_grow(void *arr, size_t *cap, size_t need, size_t elem, size_t first)
{
    size_t c = *cap ? *cap : first > 0 ? first : 1;

    if (need <= *cap)
        return arr;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return NULL;
        c *= 2;
    }
    if (c > SIZE_MAX / elem || (arr = realloc(arr, c * elem)) == NULL)
        return NULL;
    *cap = c;
    return arr;
}

#endif /* NA_GROW_H */
