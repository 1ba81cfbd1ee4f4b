/* common/fnv.h — FNV-1a (64-bit), the one non-cryptographic hash of the
 * tree: string-keyed hash tables and checksums. Use common/sha256.h where an
 * adversary chooses the input and collisions matter. */
#ifndef NA_FNV_H
#define NA_FNV_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t na_fnv1a64(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    size_t i;

    for (i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

#endif /* NA_FNV_H */
