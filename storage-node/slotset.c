/* storage-node/slotset.c — the slot set (slotset.h): slot construction
 * from the layout, request placement and parts, decode fan-out to the
 * slots' engines and completion reaping. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/faults.h"
#include "common/log.h"
#include "storage-node/kv_ssd.h"
#include "storage-node/slotset.h"

struct na_slotset {
    na_slot_common_t common;
    int              n_slots;
    na_slot_t       *slots[NA_PLACE_MAX_SLOTS];
    na_pcache_t     *pc[NA_PLACE_MAX_SLOTS];   /* prefix cache per slot (NULL: none) */
    na_place_t       place;
    uint64_t         pfx_hit_tokens, pfx_asked_tokens;
    /* decode pools (the owner's thread only): completed batches and chunks
     * kept for the next ones, a prompt chunk's scratch; freed at destroy */
    struct na_slotset_batch *b_free;
    struct na_ss_chunk      *ck_free;
    int                     *before;
    int                      before_cap;
};

/* One add of a batch: engine entries grouped by slot and their owners. */
typedef struct na_ss_chunk {
    na_attn_entry_t    *ae;           /* (n) */
    na_attn_entry_t   **owner;        /* (n) the caller's entry of each */
    int                 n, cap;       /* used, allocated (reused from ck_free) */
    struct na_ss_chunk *next;
} na_ss_chunk_t;

struct na_slotset_batch {
    na_attn_batch_t *eb[NA_PLACE_MAX_SLOTS];   /* per slot, NULL until used */
    na_ss_chunk_t   *chunks;
    int              closed;
    struct na_slotset_batch *next;             /* on b_free */
};

/* ---- construction ------------------------------------------------------- */

na_status_t na_slotset_spec_layout(const na_cfg_t *cfg, const na_cfg_node_t *cn,
                                   na_slotset_spec_t *spec)
{
    na_slot_common_t *c = &spec->common;
    int i, n = cn ? (int)cn->n_devices : cfg->n_slots;

    memset(spec, 0, sizeof(*spec));
    na_slot_common_default(c);
    if (cfg->model.kv_dtype != NA_CFG_KV_F16 && cfg->model.kv_dtype != NA_CFG_KV_BF16 &&
        cfg->model.kv_dtype != NA_CFG_KV_F32)
        return na_err(NA_ERR_UNSUPPORTED, "model.kv_dtype %s is not supported by the storage "
                      "slots (f16, bf16 or f32)", na_dtype_name((na_dtype_t)cfg->model.kv_dtype));
    c->kv.kv_dtype = (na_dtype_t)cfg->model.kv_dtype;
    c->kv.block_tokens = (int)cfg->kv.block_tokens;
    c->kv.spill_interval = (int)cfg->kv.spill_interval;
    c->prefetch_layers = (int)cfg->kv.prefetch_layers;
    c->kv.no_dram_tier = cfg->kv.tier == NA_CFG_TIER_SSD;
    c->no_ssd_tier = cfg->kv.tier == NA_CFG_TIER_DRAM;
    c->kv.allow_buffered = 1;        /* file systems without O_DIRECT still work */
    c->prefix_cache_bytes = n > 0 ? ((uint64_t)cfg->kv.prefix_cache_mb << 20) / (uint64_t)n : 0;
    spec->partition = cfg->parallel.partition == NA_CFG_PARTITION_HEAD ? NA_PART_HEAD
                                                                       : NA_PART_REQUEST;
    if (n > NA_PLACE_MAX_SLOTS)
        return na_err(NA_ERR_RANGE, "%d device slots, at most %d", n, NA_PLACE_MAX_SLOTS);
    for (i = 0; i < n; i++) {
        const na_cfg_node_t *nd = cn ? cn : &cfg->nodes[cfg->slots[i].node];
        const na_cfg_device_t *d = &nd->devices[cn ? i : cfg->slots[i].dev];
        na_slot_dev_t *dev = &spec->devs[i];
        dev->dir = d->path;
        dev->engine = na_cfg_engine_name(d->engine);
        dev->dram_bytes = (uint64_t)d->dram_mb << 20;
        dev->ssd_bytes = (uint64_t)d->ssd_mb << 20;
        dev->threads = (int)(d->threads > 0 ? d->threads : 1);
        dev->csd_device = d->csd_device;
        dev->csd_xclbin = d->xclbin;
        dev->csd_bytes = (uint64_t)d->csd_mb << 20;
        dev->csd_timeout_ms = (int)d->csd_timeout_ms;
        dev->gpu = (int)d->gpu;
        dev->hbm_mb = d->hbm_mb;
    }
    spec->n_devs = n;
    return NA_OK;
}

/* The test double of NA_FAULTS="prefix:hash_bits=N" (docs/fault-injection.md):
 * the prefix caches' keys cut to N bits, so they collide. */
static na_status_t na_ss_prefix_fault(int *bits)
{
    const char *spec = getenv("NA_FAULTS");
    char err[256];
    int r = na_faults_part_int(spec, "prefix", "hash_bits", 1, 256, bits, err, sizeof(err));

    if (r < 0)
        return na_err(NA_ERR_INVALID, "%s", err);
    if (r > 0)
        fprintf(stderr, "nearattn: TEST DOUBLE: prefix cache keys cut to %d bits "
                "(NA_FAULTS=\"%s\"); not for production\n", *bits, spec);
    return NA_OK;
}

na_status_t na_slotset_create(const na_slotset_spec_t *spec, na_slotset_t **ss_p)
{
    uint64_t cap[NA_PLACE_MAX_SLOTS] = { 0 };
    na_slotset_t *ss;
    na_status_t st;
    int i;

    if (spec->n_devs < 1 || spec->n_devs > NA_PLACE_MAX_SLOTS)
        return na_err(NA_ERR_RANGE, "slot set: %d device slots out of range [1, %d]",
                      spec->n_devs, NA_PLACE_MAX_SLOTS);
    ss = calloc(1, sizeof(*ss));
    if (ss == NULL)
        return na_err(NA_ERR_NOMEM, "slot set: out of memory");
    ss->common = spec->common;
    for (i = 0; i < spec->n_devs; i++) {
        st = na_slot_create(&ss->common, &spec->devs[i], &ss->slots[i]);
        if (st != NA_OK)
            goto err_destroy;
        ss->n_slots++;
        cap[i] = na_slot_capacity(&ss->common, &spec->devs[i]);
        if (ss->common.prefix_cache_bytes > 0) {
            na_pcache_cfg_t pcc = { ss->common.prefix_cache_bytes, ss->common.kv.n_layers,
                                    ss->common.kv.block_tokens, ss->common.prefix_hash_bits };
            if (i == 0 && (st = na_ss_prefix_fault(&pcc.hash_bits)) != NA_OK)
                goto err_destroy;
            ss->common.prefix_hash_bits = pcc.hash_bits;
            st = na_pcache_create(&pcc, &ss->pc[i]);
            if (st != NA_OK)
                goto err_destroy;
        }
    }
    st = na_place_init(&ss->place, spec->partition, ss->n_slots, ss->common.n_kv_heads, cap);
    if (st != NA_OK)
        goto err_destroy;
    *ss_p = ss;
    return NA_OK;

err_destroy:
    na_slotset_destroy(ss);
    return st;
}

void na_slotset_destroy(na_slotset_t *ss)
{
    na_slotset_batch_t *b;
    na_ss_chunk_t *ck;
    int i;

    if (ss == NULL)
        return;
    while ((b = ss->b_free) != NULL) {
        ss->b_free = b->next;
        free(b);
    }
    while ((ck = ss->ck_free) != NULL) {
        ss->ck_free = ck->next;
        free(ck->owner);
        free(ck->ae);
        free(ck);
    }
    free(ss->before);
    for (i = 0; i < ss->n_slots; i++) {
        na_slot_destroy(ss->slots[i]);
        na_pcache_destroy(ss->pc[i]);
    }
    free(ss);
}

int na_slotset_n(const na_slotset_t *ss) { return ss->n_slots; }
na_slot_t *na_slotset_slot(na_slotset_t *ss, int i) { return ss->slots[i]; }
const na_slot_common_t *na_slotset_common(const na_slotset_t *ss) { return &ss->common; }

uint64_t na_slotset_bytes_per_kvh(const na_slotset_t *ss, int max_tokens)
{
    const na_slot_common_t *c = &ss->common;
    return (uint64_t)max_tokens * (uint64_t)c->kv.n_layers * 2u * (uint64_t)c->kv.head_dim *
           (uint64_t)na_dtype_bytes(c->kv.kv_dtype, 1);
}

/* ---- requests ----------------------------------------------------------- */

/* Place (near slot prefer, -1: anywhere) and open the parts. */
static na_status_t na_ss_open(na_slotset_t *ss, na_slotset_req_t *r, uint64_t sid,
                              int max_tokens, int n_kvh, int prefer)
{
    na_status_t st;
    int i;

    memset(r, 0, sizeof(*r));
    r->sid = sid;
    r->bytes_per_kvh = na_slotset_bytes_per_kvh(ss, max_tokens);
    ss->place.n_kv_heads = n_kvh;            /* this request's share of the heads */
    st = na_place_request_near(&ss->place, r->bytes_per_kvh, prefer, r->parts, &r->n_parts);
    if (st == NA_ERR_NOSPACE) {
        char why[256];
        uint64_t best = 0, cap = 0;
        na_place_t empty = ss->place;
        na_place_part_t parts[NA_PLACE_MAX_SLOTS];
        int n;
        const char *key = ss->common.no_ssd_tier ? "dram_mb (kv.tier dram)" : "ssd_mb";

        snprintf(why, sizeof(why), "%s", na_errmsg());
        for (i = 0; i < ss->place.n_slots; i++) {
            uint64_t free_b = ss->place.cap[i] > ss->place.load[i]
                              ? ss->place.cap[i] - ss->place.load[i] : 0;
            if (free_b > best)
                best = free_b;
            if (ss->place.cap[i] > cap)
                cap = ss->place.cap[i];
        }
        /* would it fit this node with nothing else open? If not, waiting for
         * other requests to end cannot help: NA_ERR_RANGE, not NOSPACE */
        memset(empty.load, 0, sizeof(empty.load));
        if (na_place_request(&empty, r->bytes_per_kvh, parts, &n) != NA_OK)
            return na_err(NA_ERR_RANGE, "it needs %.1f MiB of KV (%d tokens), more than the "
                          "KV budget of any slot here (%.1f MiB, storage[].devices[].%s), even "
                          "with no other request open (%s)", (double)(r->bytes_per_kvh *
                          (uint64_t)n_kvh) / 1048576.0, max_tokens, (double)cap / 1048576.0,
                          key, why);
        return na_err(st, "it needs %.1f MiB of KV (%d tokens), the most any slot has free "
                      "is %.1f MiB of its KV budget (%.1f MiB, storage[].devices[].%s; %s)",
                      (double)(r->bytes_per_kvh * (uint64_t)n_kvh) / 1048576.0, max_tokens,
                      (double)best / 1048576.0, (double)cap / 1048576.0, key, why);
    }
    if (st != NA_OK)
        return st;
    for (i = 0; i < r->n_parts; i++) {
        st = na_slot_open(ss->slots[r->parts[i].slot], sid, max_tokens, r->parts[i].n_kvh);
        if (st != NA_OK)
            break;
    }
    if (st == NA_OK)
        return NA_OK;
    while (--i >= 0)
        (void)na_slot_release(ss->slots[r->parts[i].slot], sid);
    na_place_release(&ss->place, r->bytes_per_kvh, r->parts, r->n_parts);
    r->n_parts = 0;
    return st;
}

na_status_t na_slotset_open(na_slotset_t *ss, na_slotset_req_t *r, uint64_t sid,
                            int max_tokens, int n_kvh)
{
    return na_ss_open(ss, r, sid, max_tokens, n_kvh, -1);
}

na_status_t na_slotset_open_near(na_slotset_t *ss, na_slotset_req_t *r, uint64_t sid,
                                 int max_tokens, int n_kvh, const na_slotset_prompt_t *p)
{
    const int bt = ss->common.kv.block_tokens;
    const uint64_t bytes = na_slotset_bytes_per_kvh(ss, max_tokens) * (uint64_t)n_kvh;
    int want = p->n_tok > 0 ? (p->n_tok - 1) / bt : 0, prefer = -1, most = 0, i;
    uint64_t lo = UINT64_MAX;

    for (i = 0; i < ss->n_slots; i++)           /* the least load of a slot that fits */
        if ((ss->place.cap[i] == 0 || ss->place.load[i] + bytes <= ss->place.cap[i]) &&
            ss->place.load[i] < lo)
            lo = ss->place.load[i];
    if (ss->place.mode == NA_PART_REQUEST && want > 0 && lo != UINT64_MAX) {
        na_kv_store_cfg_t kc = *na_kv_store_cfg(na_slot_store(ss->slots[0]));
        na_pcache_ident_t id;
        memset(&id, 0, sizeof(id));
        memcpy(id.fp, p->fp, NA_KVHASH_FP);
        id.kv_h0 = p->kv_h0;
        id.n_kvh = n_kvh;
        id.kv_dtype = (int)ss->common.kv.kv_dtype;
        for (i = 0; i < ss->n_slots; i++) {      /* the longest run among slots in balance */
            int n;
            if (ss->pc[i] == NULL || ss->place.load[i] > lo + 2 * bytes ||
                (ss->place.cap[i] != 0 && ss->place.load[i] + bytes > ss->place.cap[i]))
                continue;
            n = na_pcache_peek(ss->pc[i], &id, na_kv_block_bytes(&kc, n_kvh), p->tokens, want);
            if (n > most) {
                most = n;
                prefer = i;
            }
        }
    }
    return na_ss_open(ss, r, sid, max_tokens, n_kvh, prefer);
}

na_status_t na_slotset_prefill(na_slotset_t *ss, const na_slotset_req_t *r, int layer,
                               const void *k, const void *v, na_dtype_t dtype,
                               size_t row_stride, int n_tok)
{
    const size_t esz = na_dtype_bytes(dtype, 1), hd = (size_t)ss->common.kv.head_dim;
    na_status_t st = NA_OK;
    int i, nkvh = 0;

    for (i = 0; i < r->n_parts; i++)
        nkvh += r->parts[i].n_kvh;
    if (row_stride == 0)
        row_stride = (size_t)nkvh * hd;
    for (i = 0; i < r->n_parts && st == NA_OK; i++) {
        size_t off = (size_t)r->parts[i].kvh0 * hd * esz;
        st = na_slot_prefill(ss->slots[r->parts[i].slot], r->sid, layer,
                             (const uint8_t *)k + off, (const uint8_t *)v + off, dtype,
                             row_stride, n_tok);
    }
    return st;
}

na_status_t na_slotset_prefill_done(na_slotset_t *ss, const na_slotset_req_t *r)
{
    na_status_t st = NA_OK;
    int i;

    for (i = 0; i < r->n_parts && st == NA_OK; i++)
        st = na_slot_prefill_done(ss->slots[r->parts[i].slot], r->sid);
    return st;
}

/* Drop r's references to prefix-cache entries (its store requests are
 * closed, or never held them). */
static void na_ss_pfx_drop(na_slotset_t *ss, na_slotset_req_t *r)
{
    int i, b;

    if (r->pfx != NULL)
        for (i = 0; i < r->n_parts; i++)
            for (b = 0; b < r->n_pfx; b++)
                na_pcache_unref(ss->pc[r->parts[i].slot], r->pfx[(size_t)i * r->n_pfx + b]);
    free(r->pfx);
    r->pfx = NULL;
    r->n_pfx = 0;
}

/* The cache identity of part i of r. */
static void na_ss_ident(const na_slotset_t *ss, const na_slotset_req_t *r, int i,
                        const na_slotset_prompt_t *p, na_pcache_ident_t *id)
{
    memset(id, 0, sizeof(*id));
    memcpy(id->fp, p->fp, NA_KVHASH_FP);
    id->kv_h0 = p->kv_h0 + r->parts[i].kvh0;
    id->n_kvh = r->parts[i].n_kvh;
    id->kv_dtype = (int)ss->common.kv.kv_dtype;
}

int na_slotset_prefix_attach(na_slotset_t *ss, na_slotset_req_t *r, const na_slotset_prompt_t *p)
{
    const int bt = ss->common.kv.block_tokens;
    int want = p->n_tok > 0 ? (p->n_tok - 1) / bt : 0;   /* the last token is computed */
    int got[NA_PLACE_MAX_SLOTS];
    int i, b, l, n = want;

    if (r->n_parts < 1 || r->pfx != NULL || want < 1)
        return 0;
    for (i = 0; i < r->n_parts; i++)
        if (ss->pc[r->parts[i].slot] == NULL)
            return 0;
    ss->pfx_asked_tokens += (uint64_t)want * (uint64_t)bt;
    r->pfx = calloc((size_t)r->n_parts * (size_t)want, sizeof(*r->pfx));
    if (r->pfx == NULL)
        return 0;
    for (i = 0; i < r->n_parts; i++) {
        na_kv_req_t *kr = na_kv_find(na_slot_store(ss->slots[r->parts[i].slot]), r->sid);
        na_pcache_ident_t id;

        na_ss_ident(ss, r, i, p, &id);
        got[i] = kr == NULL ? 0 : na_pcache_lookup(ss->pc[r->parts[i].slot], &id,
                                                   na_kv_req_block_bytes(kr), p->tokens, want,
                                                   r->pfx + (size_t)i * want);
        if (got[i] < n)
            n = got[i];
    }
    /* every part must have the run: keep the shortest, packed with stride n */
    for (i = 0; i < r->n_parts; i++) {
        for (b = n; b < got[i]; b++)
            na_pcache_unref(ss->pc[r->parts[i].slot], r->pfx[(size_t)i * want + b]);
        if (i > 0)
            memmove(r->pfx + (size_t)i * n, r->pfx + (size_t)i * want, (size_t)n * sizeof(*r->pfx));
    }
    r->n_pfx = n;
    if (n == 0) {
        free(r->pfx);
        r->pfx = NULL;
        return 0;
    }
    for (i = 0; i < r->n_parts; i++) {
        na_kv_store_t *kst = na_slot_store(ss->slots[r->parts[i].slot]);
        na_kv_req_t *kr = na_kv_find(kst, r->sid);
        for (b = 0; b < n; b++)
            for (l = 0; l < ss->common.kv.n_layers; l++)
                if (na_kv_attach(kst, kr, l, na_pcache_mem(r->pfx[(size_t)i * n + b], l)) != NA_OK)
                    return -1;      /* the caller releases r (which drops the references) */
    }
    ss->pfx_hit_tokens += (uint64_t)n * (uint64_t)bt;
    return n * bt;
}

void na_slotset_prefix_publish(na_slotset_t *ss, na_slotset_req_t *r, const na_slotset_prompt_t *p)
{
    const int bt = ss->common.kv.block_tokens, nl = ss->common.kv.n_layers;
    const void **mem;
    void **buf;
    int i, b, l;

    mem = malloc(sizeof(*mem) * (size_t)nl);
    buf = calloc((size_t)nl, sizeof(*buf));
    if (mem == NULL || buf == NULL) {
        free(mem);
        free(buf);
        return;
    }
    for (i = 0; i < r->n_parts; i++) {
        na_pcache_t *pc = ss->pc[r->parts[i].slot];
        na_kv_req_t *kr = na_kv_find(na_slot_store(ss->slots[r->parts[i].slot]), r->sid);
        na_pcache_ent_t *prev = NULL, *e;
        int n_full = p->n_tok / bt, own_prev = 0;
        na_pcache_ident_t id;

        if (pc == NULL || kr == NULL || na_kv_req_check(kr) != NA_OK)
            continue;
        for (l = 0; l < nl; l++)
            if (na_kv_req_tokens(kr, l) / bt < n_full)
                n_full = na_kv_req_tokens(kr, l) / bt;
        na_ss_ident(ss, r, i, p, &id);
        if (r->n_pfx > 0)
            prev = r->pfx[(size_t)i * r->n_pfx + r->n_pfx - 1];
        for (b = r->n_pfx; b < n_full; b++) {
            na_kv_store_t *kst = na_slot_store(ss->slots[r->parts[i].slot]);
            for (l = 0; l < nl; l++) {
                if ((mem[l] = na_kv_block_mem(kr, l, b)) != NULL)
                    continue;
                /* on the SSD tier only: read back, checked against its sum */
                if (buf[l] == NULL &&
                    (buf[l] = na_kv_aligned_alloc(na_kv_req_block_bytes(kr))) == NULL)
                    break;
                if (na_kv_block_read(kst, kr, l, b, buf[l]) != NA_OK) {
                    na_log_warn("prefix cache: %s; the prompt's blocks from %d on are not kept",
                                na_errmsg(), b);
                    break;
                }
                mem[l] = buf[l];
            }
            if (l < nl ||
                na_pcache_insert(pc, &id, na_kv_req_block_bytes(kr), prev, b,
                                 p->tokens + (size_t)b * bt, mem, &e) != NA_OK)
                break;
            if (own_prev)
                na_pcache_unref(pc, prev);    /* its child holds it now */
            prev = e;
            own_prev = 1;
        }
        if (own_prev)
            na_pcache_unref(pc, prev);
        for (l = 0; l < nl; l++) {     /* the block size may differ between parts */
            na_kv_aligned_free(buf[l]);
            buf[l] = NULL;
        }
    }
    free(mem);
    free(buf);
}

na_status_t na_slotset_prefix_read(const na_slotset_t *ss, const na_slotset_req_t *r, int layer,
                                   int n_tok, void *k, void *v, na_dtype_t dtype)
{
    const na_slot_common_t *c = &ss->common;
    const int bt = c->kv.block_tokens, hd = c->kv.head_dim;
    const size_t es = na_dtype_bytes(c->kv.kv_dtype, 1), oes = na_dtype_bytes(dtype, 1);
    const size_t half = (size_t)bt * (size_t)hd * es;
    int i, nkv = 0, t, h, x;

    if (n_tok < 0 || n_tok > r->n_pfx * bt || layer < 0 || layer >= c->kv.n_layers)
        return na_err(NA_ERR_RANGE, "prefix read: %d rows of layer %d, the request holds %d "
                      "from the prefix caches", n_tok, layer, r->n_pfx * bt);
    if (dtype != c->kv.kv_dtype && dtype != NA_DTYPE_F32)
        return na_err(NA_ERR_UNSUPPORTED, "prefix read: rows in %s (the KV is %s; f32 or it)",
                      na_dtype_name(dtype), na_dtype_name(c->kv.kv_dtype));
    for (i = 0; i < r->n_parts; i++)
        nkv += r->parts[i].n_kvh;
    for (i = 0; i < r->n_parts; i++)
        for (t = 0; t < n_tok; t++) {
            const uint8_t *mem = na_pcache_mem(r->pfx[(size_t)i * r->n_pfx + t / bt], layer);
            for (h = 0; h < r->parts[i].n_kvh; h++) {
                const uint8_t *ks = mem + (size_t)h * 2 * half + (size_t)(t % bt) * hd * es;
                size_t o = ((size_t)t * nkv + (size_t)(r->parts[i].kvh0 + h)) * hd;
                if (dtype == c->kv.kv_dtype) {
                    memcpy((uint8_t *)k + o * oes, ks, (size_t)hd * es);
                    memcpy((uint8_t *)v + o * oes, ks + half, (size_t)hd * es);
                    continue;
                }
                for (x = 0; x < hd; x++) {      /* to f32 */
                    uint16_t kh, vh;
                    if (c->kv.kv_dtype == NA_DTYPE_F32) {
                        memcpy((float *)k + o + x, ks + (size_t)x * 4, 4);
                        memcpy((float *)v + o + x, ks + half + (size_t)x * 4, 4);
                        continue;
                    }
                    memcpy(&kh, ks + (size_t)x * 2, 2);
                    memcpy(&vh, ks + half + (size_t)x * 2, 2);
                    ((float *)k)[o + x] = c->kv.kv_dtype == NA_DTYPE_F16 ? na_f16_to_f32(kh)
                                                                      : na_bf16_to_f32(kh);
                    ((float *)v)[o + x] = c->kv.kv_dtype == NA_DTYPE_F16 ? na_f16_to_f32(vh)
                                                                      : na_bf16_to_f32(vh);
                }
            }
        }
    return NA_OK;
}

void na_slotset_prefix_stats(const na_slotset_t *ss, na_slotset_prefix_stats_t *out)
{
    int i;

    memset(out, 0, sizeof(*out));
    for (i = 0; i < ss->n_slots; i++) {
        na_pcache_stats_t x;
        if (ss->pc[i] == NULL)
            continue;
        na_pcache_stats(ss->pc[i], &x);
        out->cache.lookups += x.lookups;
        out->cache.hit_blocks += x.hit_blocks;
        out->cache.miss_blocks += x.miss_blocks;
        out->cache.inserted += x.inserted;
        out->cache.evicted += x.evicted;
        out->cache.collisions += x.collisions;
        out->cache.bad_sums += x.bad_sums;
        out->cache.entries += x.entries;
        out->cache.bytes += x.bytes;
        out->cache.budget += x.budget;
    }
    out->hit_tokens = ss->pfx_hit_tokens;
    out->asked_tokens = ss->pfx_asked_tokens;
}

na_status_t na_slotset_release(na_slotset_t *ss, na_slotset_req_t *r)
{
    na_status_t st = NA_OK, st2;
    int i;

    for (i = 0; i < r->n_parts; i++) {
        st2 = na_slot_release(ss->slots[r->parts[i].slot], r->sid);
        if (st2 != NA_OK && st == NA_OK)
            st = st2;
    }
    na_ss_pfx_drop(ss, r);
    na_place_release(&ss->place, r->bytes_per_kvh, r->parts, r->n_parts);
    r->n_parts = 0;
    return st;
}

int na_slotset_tokens(na_slotset_t *ss, const na_slotset_req_t *r, int layer)
{
    na_kv_req_t *kr;

    if (r->n_parts < 1)
        return -1;
    kr = na_kv_find(na_slot_store(ss->slots[r->parts[0].slot]), r->sid);
    return kr ? na_kv_req_tokens(kr, layer) : -1;
}

na_status_t na_slotset_poll(na_slotset_t *ss)
{
    na_status_t st = NA_OK, st2;
    int i;

    for (i = 0; i < ss->n_slots; i++) {
        st2 = na_slot_poll(ss->slots[i]);
        if (st2 != NA_OK && st == NA_OK)
            st = st2;
    }
    return st;
}

/* ---- decode ------------------------------------------------------------- */

na_status_t na_slotset_batch_begin(na_slotset_t *ss, na_slotset_batch_t **b_p)
{
    na_slotset_batch_t *b = ss->b_free;

    if (b != NULL)
        ss->b_free = b->next;
    else if ((b = malloc(sizeof(*b))) == NULL)
        return na_err(NA_ERR_NOMEM, "slot set: out of memory for a batch");
    memset(b, 0, sizeof(*b));
    *b_p = b;
    return NA_OK;
}

/* A chunk of total entries (ae zeroed) from the free list or new; NULL out
 * of memory (the chunk is kept on the free list). */
static na_ss_chunk_t *na_ss_chunk_get(na_slotset_t *ss, int total)
{
    na_ss_chunk_t *ck = ss->ck_free;

    if (ck != NULL)
        ss->ck_free = ck->next;
    else if ((ck = calloc(1, sizeof(*ck))) == NULL)
        return NULL;
    if (total > ck->cap) {
        int c = total < 2 * ck->cap ? 2 * ck->cap : total;
        void *a = realloc(ck->ae, sizeof(*ck->ae) * (size_t)c);
        if (a != NULL) {
            ck->ae = a;
            a = realloc(ck->owner, sizeof(*ck->owner) * (size_t)c);
        }
        if (a == NULL) {
            ck->next = ss->ck_free;
            ss->ck_free = ck;
            return NULL;
        }
        ck->owner = a;
        ck->cap = c;
    }
    memset(ck->ae, 0, sizeof(*ck->ae) * (size_t)total);
    memset(ck->owner, 0, sizeof(*ck->owner) * (size_t)total);
    ck->n = total;
    ck->next = NULL;
    return ck;
}

/* Fail engine entries [x0, x1) of ck with st (message in na_errmsg()). */
static void na_ss_fail(na_ss_chunk_t *ck, int x0, int x1, na_status_t st)
{
    int x;
    for (x = x0; x < x1; x++)
        if (ck->ae[x].status == NA_OK) {
            ck->ae[x].status = st;
            snprintf(ck->ae[x].reason, sizeof(ck->ae[x].reason), "%s", na_errmsg());
        }
}

/* A prompt chunk (entry e of n_q > 1 queries): append its n_q K/V rows of
 * `layer` on every part of r (as a prefill: bulk, flushed by prefill_done)
 * and say in *before_p how many tokens the layer held before. Fails e
 * (status, reason) and returns its status when a part refuses. */
static na_status_t na_ss_chunk_append(na_slotset_t *ss, const na_slotset_req_t *r,
                                      na_attn_entry_t *e, int *before_p)
{
    na_status_t st;

    *before_p = na_slotset_tokens(ss, r, e->layer);
    if (*before_p < 0)
        st = na_err(NA_ERR_IO, "request %llu: its KV was lost on this node",
                    (unsigned long long)e->req);
    else if (e->k_new == NULL || e->v_new == NULL)
        st = na_err(NA_ERR_INVALID, "request %llu: a prompt chunk without K or V rows",
                    (unsigned long long)e->req);
    else
        st = na_slotset_prefill(ss, r, e->layer, e->k_new, e->v_new, NA_DTYPE_F32, 0, e->n_q);
    if (st != NA_OK) {
        e->status = st;
        snprintf(e->reason, sizeof(e->reason), "%s", na_errmsg());
    }
    return st;
}

/* The next engine entry of part pp's slot in ck, for the caller's entry e
 * of store request sid: the heads the part holds (the node's range under
 * head partition, not the model's) of e's q and o from float row_off on
 * (a query row of a prompt chunk). */
static na_attn_entry_t *na_ss_entry(na_ss_chunk_t *ck, int *fill, na_attn_entry_t *e,
                                    uint64_t sid, const na_place_part_t *pp, int grp, int hd,
                                    size_t row_off)
{
    const int x = fill[pp->slot]++;
    const size_t h0 = row_off + (size_t)pp->kvh0 * grp * hd;
    na_attn_entry_t *a = &ck->ae[x];

    ck->owner[x] = e;
    a->req = sid;
    a->layer = e->layer;
    a->n_kv_heads = pp->n_kvh;
    a->n_q_heads = pp->n_kvh * grp;
    a->q = e->q + h0;
    a->o = e->o + h0;
    return a;
}

/* na_slotset_batch_add; close: they are b's last entries, b is closed too
 * (the engines get them with submit_close). */
static na_status_t na_ss_add(na_slotset_t *ss, na_slotset_batch_t *b,
                             const na_slotset_req_t *const *req, na_attn_entry_t *entries, int n,
                             int close)
{
    const int hd = ss->common.kv.head_dim, grp = ss->common.n_heads / ss->common.n_kv_heads;
    int count[NA_PLACE_MAX_SLOTS] = { 0 }, base[NA_PLACE_MAX_SLOTS], fill[NA_PLACE_MAX_SLOTS];
    na_ss_chunk_t *ck;
    int i, j, s, t, total = 0;
    int *before = NULL;

    for (i = 0; i < n; i++)
        if (entries[i].n_q > 1)
            break;
    if (i < n) {
        if (n > ss->before_cap) {
            int *nb = realloc(ss->before, sizeof(int) * (size_t)n);
            if (nb == NULL && close)
                na_slotset_batch_close(ss, b);
            if (nb == NULL)
                return na_err(NA_ERR_NOMEM, "slot set: out of memory for %d attention "
                              "entries", n);
            ss->before = nb;
            ss->before_cap = n;
        }
        before = ss->before;
        memset(before, 0, sizeof(int) * (size_t)n);
    }
    for (i = 0; i < n; i++) {
        int mult = entries[i].n_q > 1 ? entries[i].n_q : 1;
        entries[i].status = NA_OK;
        entries[i].reason[0] = '\0';
        /* a prompt chunk: its rows first, then one query per engine entry,
         * each over the tokens up to its own position (causal) */
        if (mult > 1 && na_ss_chunk_append(ss, req[i], &entries[i], &before[i]) != NA_OK)
            continue;
        for (j = 0; j < req[i]->n_parts; j++) {
            const int sl = req[i]->parts[j].slot;
            count[sl] += na_attn_engine_blocks(na_slot_engine(ss->slots[sl])) ? 1 : mult;
        }
    }
    for (s = 0; s < ss->n_slots; s++) {
        base[s] = fill[s] = total;
        total += count[s];
    }
    if (total == 0) {
        if (close)
            na_slotset_batch_close(ss, b);
        return NA_OK;
    }
    ck = na_ss_chunk_get(ss, total);
    if (ck == NULL) {
        if (close)
            na_slotset_batch_close(ss, b);
        return na_err(NA_ERR_NOMEM, "slot set: out of memory for %d attention entries", total);
    }
    ck->next = b->chunks;
    b->chunks = ck;
    for (i = 0; i < n; i++) {
        const na_attn_entry_t *e = &entries[i];
        if (e->status != NA_OK)
            continue;                 /* a chunk whose rows were refused */
        for (j = 0; j < req[i]->n_parts; j++) {
            const na_place_part_t *pp = &req[i]->parts[j];
            na_attn_entry_t *a;
            if (e->n_q > 1 && na_attn_engine_blocks(na_slot_engine(ss->slots[pp->slot]))) {
                /* the chunk's rows as one block (the engine reads each K/V
                 * run once for all of them; row t sees tokens
                 * 0..before+t) */
                a = na_ss_entry(ck, fill, &entries[i], req[i]->sid, pp, grp, hd, 0);
                a->n_q = e->n_q;
                a->q_stride = (size_t)e->n_q_heads * hd;
                a->n_ctx = 0;          /* all: it also reads the next layer ahead */
                continue;
            }
            if (e->n_q > 1) {
                /* an engine of one query per entry (csd, cuda): one entry
                 * per query */
                const size_t qrow = (size_t)e->n_q_heads * hd;
                for (t = 0; t < e->n_q; t++) {
                    a = na_ss_entry(ck, fill, &entries[i], req[i]->sid, pp, grp, hd,
                                    (size_t)t * qrow);
                    /* rows appended: query t sees tokens 0..before+t; the last
                     * one sees them all (n_ctx 0: it also reads the next
                     * layer ahead) */
                    a->n_ctx = t + 1 < e->n_q ? before[i] + t + 1 : 0;
                }
                continue;
            }
            a = na_ss_entry(ck, fill, &entries[i], req[i]->sid, pp, grp, hd, 0);
            a->k_new = e->k_new ? e->k_new + (size_t)pp->kvh0 * hd : NULL;
            a->v_new = e->v_new ? e->v_new + (size_t)pp->kvh0 * hd : NULL;
            a->n_ctx = e->n_ctx;
        }
    }
    /* every slot's share starts before any is reaped: the engines run side
     * by side, and beside the owner's loop */
    for (s = 0; s < ss->n_slots; s++) {
        na_attn_engine_t *eng = na_slot_engine(ss->slots[s]);
        na_status_t st = NA_OK;
        if (count[s] == 0) {
            if (close && b->eb[s] != NULL)          /* earlier entries only */
                (void)na_attn_batch_close(eng, b->eb[s]);
            continue;
        }
        if (b->eb[s] == NULL)
            st = na_attn_batch_begin(eng, &b->eb[s]);
        if (st == NA_OK && close)
            st = na_attn_submit_close(eng, b->eb[s], &ck->ae[base[s]], count[s]);
        else if (st == NA_OK)
            st = na_attn_submit(eng, b->eb[s], &ck->ae[base[s]], count[s]);
        if (st != NA_OK)
            na_ss_fail(ck, base[s], base[s] + count[s], st);
    }
    b->closed |= close;
    return NA_OK;
}

na_status_t na_slotset_batch_add(na_slotset_t *ss, na_slotset_batch_t *b,
                                 const na_slotset_req_t *const *req, na_attn_entry_t *entries,
                                 int n)
{
    return na_ss_add(ss, b, req, entries, n, 0);
}

na_status_t na_slotset_batch_add_close(na_slotset_t *ss, na_slotset_batch_t *b,
                                       const na_slotset_req_t *const *req,
                                       na_attn_entry_t *entries, int n)
{
    return na_ss_add(ss, b, req, entries, n, 1);
}

void na_slotset_batch_close(na_slotset_t *ss, na_slotset_batch_t *b)
{
    int s;

    if (b->closed)
        return;
    b->closed = 1;
    for (s = 0; s < ss->n_slots; s++)
        if (b->eb[s] != NULL)
            (void)na_attn_batch_close(na_slot_engine(ss->slots[s]), b->eb[s]);
}

/* All engine batches of b completed: failures onto the owners, b and its
 * chunks back onto the free lists. */
static void na_ss_batch_free(na_slotset_t *ss, na_slotset_batch_t *b)
{
    na_ss_chunk_t *ck;
    int x;

    while ((ck = b->chunks) != NULL) {
        b->chunks = ck->next;
        for (x = 0; x < ck->n; x++) {
            na_attn_entry_t *o = ck->owner[x];
            if (ck->ae[x].status != NA_OK && o->status == NA_OK) {
                o->status = ck->ae[x].status;
                snprintf(o->reason, sizeof(o->reason), "%s", ck->ae[x].reason[0]
                         ? ck->ae[x].reason : na_status_string(ck->ae[x].status));
            }
        }
        ck->next = ss->ck_free;
        ss->ck_free = ck;
    }
    b->next = ss->b_free;
    ss->b_free = b;
}

int na_slotset_batch_test(na_slotset_t *ss, na_slotset_batch_t *b, int wait_us)
{
    int s, done;

    if (!b->closed)
        return 0;
    for (s = 0; s < ss->n_slots; s++) {
        if (b->eb[s] == NULL)
            continue;
        (void)na_attn_batch_test(na_slot_engine(ss->slots[s]), b->eb[s], 0, &done);
        if (!done && wait_us > 0) {      /* wait on the first one still running */
            (void)na_attn_batch_test(na_slot_engine(ss->slots[s]), b->eb[s], wait_us, &done);
            wait_us = 0;
        }
        if (!done)
            return 0;
        b->eb[s] = NULL;
    }
    na_ss_batch_free(ss, b);
    return 1;
}

void na_slotset_batch_wait(na_slotset_t *ss, na_slotset_batch_t *b)
{
    int s;

    na_slotset_batch_close(ss, b);
    for (s = 0; s < ss->n_slots; s++)
        if (b->eb[s] != NULL)
            (void)na_attn_batch_wait(na_slot_engine(ss->slots[s]), b->eb[s]);
    na_ss_batch_free(ss, b);
}
