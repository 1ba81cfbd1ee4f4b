/* storage-node/placement.c — which slot(s), and which KV head ranges, own a
 * request (Lamina §5.2: request-level vs head-level partition), balancing
 * the bytes placed on each slot. */
#include <string.h>
#include <strings.h>

#include "storage-node/slot.h"

int na_partition_parse(const char *s)
{
    if (s == NULL)
        return -1;
    if (!strcasecmp(s, "request"))
        return NA_PART_REQUEST;
    if (!strcasecmp(s, "head"))
        return NA_PART_HEAD;
    return -1;
}

na_status_t na_place_init(na_place_t *p, na_partition_t mode, int n_slots, int n_kv_heads,
                          const uint64_t *cap)
{
    int i;

    if (mode != NA_PART_REQUEST && mode != NA_PART_HEAD)
        return na_err(NA_ERR_INVALID, "placement: unknown partition %d", (int)mode);
    if (n_slots < 1 || n_slots > NA_PLACE_MAX_SLOTS)
        return na_err(NA_ERR_RANGE, "placement: %d slots out of range [1, %d]",
                      n_slots, NA_PLACE_MAX_SLOTS);
    if (n_kv_heads < 1)
        return na_err(NA_ERR_RANGE, "placement: n_kv_heads = %d < 1", n_kv_heads);
    memset(p, 0, sizeof(*p));
    p->mode = mode;
    p->n_slots = n_slots;
    p->n_kv_heads = n_kv_heads;
    for (i = 0; i < n_slots; i++)
        p->cap[i] = cap ? cap[i] : 0;
    return NA_OK;
}

static int na_place_fits(const na_place_t *p, int s, uint64_t bytes)
{
    return p->cap[s] == 0 || p->load[s] + bytes <= p->cap[s];
}

/* Least-loaded slot not yet in used[] that fits bytes (ties: lowest index). */
static int na_place_pick(const na_place_t *p, const int *used, uint64_t bytes)
{
    int s, best = -1;
    for (s = 0; s < p->n_slots; s++) {
        if (used[s] || !na_place_fits(p, s, bytes))
            continue;
        if (best < 0 || p->load[s] < p->load[best])
            best = s;
    }
    return best;
}

na_status_t na_place_request(na_place_t *p, uint64_t bytes_per_kvh,
                             na_place_part_t *parts, int *n_parts_p)
{
    int used[NA_PLACE_MAX_SLOTS] = { 0 };
    int n, i, h0 = 0;

    if (p->mode == NA_PART_REQUEST) {
        uint64_t bytes = bytes_per_kvh * (uint64_t)p->n_kv_heads;
        int s = na_place_pick(p, used, bytes);
        if (s < 0)
            return na_err(NA_ERR_NOSPACE, "placement: no slot has room for %llu bytes of KV",
                          (unsigned long long)bytes);
        parts[0].slot = s;
        parts[0].kvh0 = 0;
        parts[0].n_kvh = p->n_kv_heads;
        p->load[s] += bytes;
        *n_parts_p = 1;
        return NA_OK;
    }
    n = p->n_slots < p->n_kv_heads ? p->n_slots : p->n_kv_heads;
    for (i = 0; i < n; i++) {
        /* heads split as evenly as possible: the first (n_kv_heads % n) get one more */
        int nh = p->n_kv_heads / n + (i < p->n_kv_heads % n ? 1 : 0);
        uint64_t bytes = bytes_per_kvh * (uint64_t)nh;
        int s = na_place_pick(p, used, bytes);
        if (s < 0) {
            na_place_release(p, bytes_per_kvh, parts, i);
            return na_err(NA_ERR_NOSPACE, "placement: no slot has room for %d KV heads "
                          "(%llu bytes)", nh, (unsigned long long)bytes);
        }
        used[s] = 1;
        parts[i].slot = s;
        parts[i].kvh0 = h0;
        parts[i].n_kvh = nh;
        p->load[s] += bytes;
        h0 += nh;
    }
    *n_parts_p = n;
    return NA_OK;
}

na_status_t na_place_request_near(na_place_t *p, uint64_t bytes_per_kvh, int prefer,
                                  na_place_part_t *parts, int *n_parts_p)
{
    int used[NA_PLACE_MAX_SLOTS] = { 0 };
    uint64_t bytes = bytes_per_kvh * (uint64_t)p->n_kv_heads;
    int lo;

    if (p->mode != NA_PART_REQUEST || prefer < 0 || prefer >= p->n_slots ||
        !na_place_fits(p, prefer, bytes))
        return na_place_request(p, bytes_per_kvh, parts, n_parts_p);
    lo = na_place_pick(p, used, bytes);
    if (lo >= 0 && p->load[prefer] > p->load[lo] + 2 * bytes)
        return na_place_request(p, bytes_per_kvh, parts, n_parts_p);   /* out of balance */
    parts[0].slot = prefer;
    parts[0].kvh0 = 0;
    parts[0].n_kvh = p->n_kv_heads;
    p->load[prefer] += bytes;
    *n_parts_p = 1;
    return NA_OK;
}

void na_place_release(na_place_t *p, uint64_t bytes_per_kvh,
                      const na_place_part_t *parts, int n_parts)
{
    int i;
    for (i = 0; i < n_parts; i++) {
        uint64_t bytes = bytes_per_kvh * (uint64_t)parts[i].n_kvh;
        int s = parts[i].slot;
        p->load[s] = bytes > p->load[s] ? 0 : p->load[s] - bytes;
    }
}
