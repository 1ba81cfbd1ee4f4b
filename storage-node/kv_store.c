/* storage-node/kv_store.c — request table, open/close, row appends and
 * views of the KV store of one device slot (layout: kv_store.h). */
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#ifdef __F16C__
#include <immintrin.h>
#endif

#include "common/grow.h"
#include "common/log.h"
#include "storage-node/kv_fault.h"
#include "storage-node/kv_internal.h"

size_t na_kv_block_bytes(const na_kv_store_cfg_t *cfg, int n_kvh)
{
    size_t b = (size_t)n_kvh * 2u * (size_t)cfg->block_tokens * (size_t)cfg->head_dim *
               na_dtype_bytes(cfg->kv_dtype, 1);
    return (b + NA_KV_ALIGN - 1) / NA_KV_ALIGN * NA_KV_ALIGN;
}

const na_kv_store_cfg_t *na_kv_store_cfg(const na_kv_store_t *s)
{
    return &s->cfg;
}

static na_status_t na_kv_cfg_check(const na_kv_store_cfg_t *c)
{
    if (c->n_layers < 1 || c->n_layers > NA_KV_MAX_LAYERS)
        return na_err(NA_ERR_RANGE, "kv store: n_layers = %d out of range [1, %d]",
                      c->n_layers, NA_KV_MAX_LAYERS);
    if (c->head_dim < 1 || c->head_dim > 1024)
        return na_err(NA_ERR_RANGE, "kv store: head_dim = %d out of range [1, 1024]", c->head_dim);
    if (c->block_tokens < 1 || c->block_tokens > 65536)
        return na_err(NA_ERR_RANGE, "kv store: block_tokens = %d out of range [1, 65536]",
                      c->block_tokens);
    if (c->kv_dtype != NA_DTYPE_F16 && c->kv_dtype != NA_DTYPE_BF16 && c->kv_dtype != NA_DTYPE_F32)
        return na_err(NA_ERR_UNSUPPORTED, "kv store: kv_dtype %s not supported (f16, bf16, f32)",
                      na_dtype_name(c->kv_dtype));
    if (c->spill_interval < 1 || c->spill_interval > 4096)
        return na_err(NA_ERR_RANGE, "kv store: spill_interval = %d out of range [1, 4096]",
                      c->spill_interval);
    if (c->io_depth < 1 || c->io_depth > 1024)
        return na_err(NA_ERR_RANGE, "kv store: io_depth = %d out of range [1, 1024]", c->io_depth);
    if (c->ssd_bytes > 0 && (c->dir == NULL || c->dir[0] == '\0'))
        return na_err(NA_ERR_INVALID, "kv store: an SSD tier needs a directory");
    return NA_OK;
}

na_status_t na_kv_store_create(const na_kv_store_cfg_t *cfg, na_kv_store_t **s_p)
{
    na_kv_store_t *s;
    na_status_t st;

    st = na_kv_cfg_check(cfg);
    if (st != NA_OK)
        return st;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return na_err(NA_ERR_NOMEM, "kv store: out of memory");
    s->cfg = *cfg;
    s->file.fd = -1;
    if (cfg->dir != NULL)
        snprintf(s->dir, sizeof(s->dir), "%s", cfg->dir);
    s->cfg.dir = s->dir;
    s->cfg.file_name = NULL;
    s->next_seq = 1;
    if (cfg->ssd_bytes > 0) {
        st = na_kv_file_open(&s->file, s->dir, cfg->file_name ? cfg->file_name : "kv.dat",
                             cfg->ssd_bytes, cfg->allow_buffered);
        if (st != NA_OK)
            goto err_free_store;
        s->has_ssd = 1;
        st = cfg->io_factory ? cfg->io_factory(cfg->io_arg, cfg->io_depth, &s->io)
                             : na_kv_io_default_create(cfg->io_depth, &s->io);
        if (st != NA_OK)
            goto err_close_file;
    }
    s->st.dram_budget = cfg->dram_bytes;
    s->st.ssd_size = s->has_ssd ? s->file.size : 0;
    *s_p = s;
    return NA_OK;

err_close_file:
    na_kv_file_close(&s->file);
err_free_store:
    free(s);
    return st;
}

static void na_kv_req_free_mem(na_kv_store_t *s, na_kv_req_t *r)
{
    int l, b;

    if (r->layers != NULL) {
        for (l = 0; l < s->cfg.n_layers; l++) {
            na_kv_layer_t *L = &r->layers[l];
            if (L->blocks == NULL)
                continue;
            for (b = 0; b < r->max_blocks; b++)
                if (L->blocks[b].mem != NULL && !L->blocks[b].shared)
                    na_kv_dram_block_put(s, L->blocks[b].mem, r->block_bytes);
            free(L->blocks);
        }
        free(r->layers);
    }
    na_kv_aligned_free(r->hdr_buf);
    free(r);
}

/* ---- the due list: decode spills left for the loop's next poll --------------
 * The append lists a (request, layer) whose decode steps reached
 * kv.spill_interval; writeback.c's na_kv_poll makes those spills after the
 * step's answer went out, so a decode step's round trip runs nothing of
 * writeback.c. 0, or -1 when it cannot be listed (out of memory: the caller
 * spills now). */
static int na_kv_spill_later(na_kv_store_t *s, na_kv_req_t *r, int layer)
{
    na_kv_due_t *nd;

    if (r->layers[layer].due)
        return 0;
    if ((nd = na_grow(s->due, &s->due_cap, (size_t)s->n_due + 1, sizeof(*nd), 64)) == NULL)
        return -1;
    s->due = nd;
    s->due[s->n_due].r = r;
    s->due[s->n_due].layer = layer;
    s->n_due++;
    r->layers[layer].due = 1;
    return 0;
}

/* Forget r's listed spills (r is going away). */
static void na_kv_spill_forget(na_kv_store_t *s, const na_kv_req_t *r)
{
    int i;

    for (i = 0; i < s->n_due;) {
        if (s->due[i].r == r) {
            s->n_due--;
            s->due[i] = s->due[s->n_due];     /* the last one takes its place */
        } else {
            i++;
        }
    }
}

static void na_kv_req_drop(na_kv_store_t *s, na_kv_req_t *r)
{
    na_kv_req_t **pp = &s->hash[r->id % NA_KV_HASH];

    while (*pp != NULL && *pp != r)
        pp = &(*pp)->next;
    if (*pp == r)
        *pp = r->next;
    na_kv_spill_forget(s, r);
    if (r->has_ext)
        na_kv_file_free(&s->file, r->ext_off, r->ext_len);
    na_kv_dram_unreserve(s, r->dram_reserved + r->dram_tier);
    s->st.n_requests--;
    na_kv_req_free_mem(s, r);
}

void na_kv_store_destroy(na_kv_store_t *s)
{
    int h;

    if (s == NULL)
        return;
    if (s->has_ssd)
        (void)na_kv_poll(s, 1);
    for (h = 0; h < NA_KV_HASH; h++)
        while (s->hash[h] != NULL)
            na_kv_req_drop(s, s->hash[h]);
    na_kv_dram_trim(s);
    na_kv_wr_pool_destroy(s);
    free(s->due);
    while (s->vbuf_free != NULL) {
        na_kv_vbuf_t *vb = s->vbuf_free;
        s->vbuf_free = vb->next;
        free(vb);
    }
    na_kv_io_destroy(s->io);
    if (s->has_ssd)
        na_kv_file_close(&s->file);
    free(s);
}

na_kv_req_t *na_kv_find(na_kv_store_t *s, uint64_t id)
{
    na_kv_req_t *r;
    for (r = s->hash[id % NA_KV_HASH]; r != NULL; r = r->next)
        if (r->id == id)
            return r;
    return NULL;
}

na_status_t na_kv_req_check(na_kv_req_t *r) { return na_kv_req_state(r); }
uint64_t na_kv_req_id(const na_kv_req_t *r) { return r->id; }
uint64_t na_kv_req_seq(const na_kv_req_t *r) { return r->seq; }

void na_kv_req_extent(const na_kv_req_t *r, uint64_t *off_p, uint64_t *len_p)
{
    *off_p = r->has_ext ? r->ext_off : 0;
    *len_p = r->has_ext ? r->ext_len : 0;
}
int      na_kv_req_n_kvh(const na_kv_req_t *r) { return r->n_kvh; }

int na_kv_req_tokens(const na_kv_req_t *r, int layer)
{
    return r->layers[layer].n_tokens;
}

na_status_t na_kv_open(na_kv_store_t *s, uint64_t id, int max_tokens, int n_kvh)
{
    const na_kv_store_cfg_t *c = &s->cfg;
    na_kv_req_t *r;
    na_status_t st;
    uint64_t layer_bytes;
    int l, buf_blocks;
    char what[96];

    if (na_kv_find(s, id) != NULL)
        return na_err(NA_ERR_BUSY, "request %llu is already open", (unsigned long long)id);
    if (max_tokens < 1 || max_tokens > (1 << 24))
        return na_err(NA_ERR_RANGE, "request %llu: max_tokens = %d out of range [1, %d]",
                      (unsigned long long)id, max_tokens, 1 << 24);
    if (n_kvh < 1 || n_kvh > 1024)
        return na_err(NA_ERR_RANGE, "request %llu: n_kv_heads = %d out of range [1, 1024]",
                      (unsigned long long)id, n_kvh);
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return na_err(NA_ERR_NOMEM, "kv open: out of memory");
    r->id = id;
    r->max_tokens = max_tokens;
    r->n_kvh = n_kvh;
    r->max_blocks = (max_tokens + c->block_tokens - 1) / c->block_tokens;
    r->block_bytes = na_kv_block_bytes(c, n_kvh);
    layer_bytes = (uint64_t)r->max_blocks * r->block_bytes;
    r->layers = calloc((size_t)c->n_layers, sizeof(*r->layers));
    if (r->layers == NULL)
        goto err_nomem;
    for (l = 0; l < c->n_layers; l++) {
        r->layers[l].blocks = calloc((size_t)r->max_blocks, sizeof(na_kv_block_t));
        if (r->layers[l].blocks == NULL)
            goto err_nomem;
    }
    /* DRAM: the writeback buffer's worst case, or everything without SSD */
    buf_blocks = (c->spill_interval + c->block_tokens - 1) / c->block_tokens + 1;
    if (buf_blocks > r->max_blocks)
        buf_blocks = r->max_blocks;
    r->dram_reserved = s->has_ssd ? (uint64_t)buf_blocks * r->block_bytes * (uint64_t)c->n_layers
                                  : layer_bytes * (uint64_t)c->n_layers;
    snprintf(what, sizeof(what), "request %llu (%d tokens)", (unsigned long long)id, max_tokens);
    st = na_kv_dram_reserve(s, r->dram_reserved, what);
    if (st != NA_OK) {
        r->dram_reserved = 0;
        goto err_refused;
    }
    if (s->has_ssd) {
        r->ext_len = NA_KV_HDR_BYTES + layer_bytes * (uint64_t)c->n_layers;
        st = na_kv_file_alloc(&s->file, r->ext_len, &r->ext_off);
        if (st != NA_OK) {
            na_err_prefix(st, "request %llu refused: ", (unsigned long long)id);
            goto err_unreserve;
        }
        r->has_ext = 1;
        r->hdr_buf = na_kv_aligned_alloc(NA_KV_HDR_BYTES);
        if (r->hdr_buf == NULL)
            goto err_free_ext_nomem;
    }
    r->seq = s->next_seq++;
    r->next = s->hash[id % NA_KV_HASH];
    s->hash[id % NA_KV_HASH] = r;
    s->st.n_requests++;
    if (s->has_ssd) {
        st = na_kv_header_write_sync(s, r);
        if (st != NA_OK) {
            na_kv_req_drop(s, r);
            return st;
        }
    }
    return NA_OK;

err_free_ext_nomem:
    na_kv_file_free(&s->file, r->ext_off, r->ext_len);
    na_kv_dram_unreserve(s, r->dram_reserved);
    na_kv_req_free_mem(s, r);
    return na_err(NA_ERR_NOMEM, "kv open: out of memory");
err_unreserve:
    na_kv_dram_unreserve(s, r->dram_reserved);
err_refused:
    s->st.n_refused++;
    na_kv_req_free_mem(s, r);
    return st;
err_nomem:
    na_kv_req_free_mem(s, r);
    return na_err(NA_ERR_NOMEM, "kv open: out of memory");
}

na_status_t na_kv_close(na_kv_store_t *s, uint64_t id)
{
    na_kv_req_t *r = na_kv_find(s, id);
    int l;

    if (r == NULL)
        return na_err(NA_ERR_NOT_FOUND, "close: unknown request %llu", (unsigned long long)id);
    for (l = 0; l < s->cfg.n_layers; l++)
        if (r->layers[l].busy)
            return na_err(NA_ERR_BUSY, "close: request %llu layer %d has attention in flight",
                          (unsigned long long)id, l);
    (void)na_kv_wait_req(s, r);       /* write errors no longer matter */
    na_kv_req_drop(s, r);
    return NA_OK;
}

/* Copy one row of n elements from src (src_dtype: kv, or f32) to dst (kv
 * dtype); f32 is rounded to nearest even. */
static void na_kv_row_put(void *dst, na_dtype_t kv, const void *src, na_dtype_t sdt, int n)
{
    const float *f = src;
    uint16_t *h = dst;
    int i = 0;

    if (sdt == kv) {
        memcpy(dst, src, (size_t)n * na_dtype_bytes(kv, 1));
    } else if (kv == NA_DTYPE_F16) {
#ifdef __F16C__
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(f + i), 0));
#endif
        for (; i < n; i++)
            h[i] = na_f32_to_f16(f[i]);
    } else {                                  /* bf16 */
        for (; i < n; i++)
            h[i] = na_f32_to_bf16(f[i]);
    }
}

na_status_t na_kv_append(na_kv_store_t *s, na_kv_req_t *r, int layer, const void *k,
                         const void *v, na_dtype_t src_dtype, size_t row_stride,
                         int n_tok, int bulk)
{
    const na_kv_store_cfg_t *c = &s->cfg;
    const int bt = c->block_tokens, hd = c->head_dim;
    const size_t es = na_dtype_bytes(c->kv_dtype, 1), ses = na_dtype_bytes(src_dtype, 1);
    const size_t head_bytes = 2u * (size_t)bt * (size_t)hd * es;
    size_t src_row = (row_stride ? row_stride : (size_t)r->n_kvh * (size_t)hd) * ses;
    na_kv_layer_t *L;
    na_status_t st;
    int t, h;

    st = na_kv_req_check(r);
    if (st != NA_OK)
        return st;
    if (layer < 0 || layer >= c->n_layers)
        return na_err(NA_ERR_RANGE, "request %llu: layer %d out of range [0, %d)",
                      (unsigned long long)r->id, layer, c->n_layers);
    if (src_dtype != NA_DTYPE_F32 && src_dtype != c->kv_dtype)
        return na_err(NA_ERR_INVALID, "request %llu: rows in %s, store holds %s",
                      (unsigned long long)r->id, na_dtype_name(src_dtype),
                      na_dtype_name(c->kv_dtype));
    L = &r->layers[layer];
    if (L->busy)
        return na_err(NA_ERR_BUSY, "request %llu layer %d: attention in flight",
                      (unsigned long long)r->id, layer);
    if (n_tok < 0 || n_tok > r->max_tokens - L->n_tokens)
        return na_err(NA_ERR_RANGE, "request %llu layer %d: %d + %d tokens exceed max_tokens %d",
                      (unsigned long long)r->id, layer, L->n_tokens, n_tok, r->max_tokens);
    for (t = 0; t < n_tok; t++) {
        int pos = L->n_tokens, b = pos / bt, row = pos % bt;
        na_kv_block_t *blk = &L->blocks[b];
        const char *kr = (const char *)k + (size_t)t * src_row;
        const char *vr = (const char *)v + (size_t)t * src_row;

        if (blk->loc == NA_KV_LOC_NONE) {
            blk->mem = na_kv_dram_block_get(s, r->block_bytes);
            if (blk->mem == NULL)
                return na_err(NA_ERR_NOMEM, "request %llu: out of memory for a KV block",
                              (unsigned long long)r->id);
            memset(blk->mem, 0, r->block_bytes);
            blk->loc = NA_KV_LOC_BUF;
            blk->keep = blk->written = 0;
        }
        for (h = 0; h < r->n_kvh; h++) {
            char *base = (char *)blk->mem + (size_t)h * head_bytes + (size_t)row * hd * es;
            na_kv_row_put(base, c->kv_dtype, kr + (size_t)h * hd * ses, src_dtype, hd);
            na_kv_row_put(base + (size_t)bt * hd * es, c->kv_dtype,
                          vr + (size_t)h * hd * ses, src_dtype, hd);
        }
        L->n_tokens++;
        /* bulk: commit each megabyte of full blocks as it fills (bounded memory) */
        if (bulk && (L->n_tokens % bt) == 0 &&
            (size_t)(L->n_tokens - L->n_committed) / bt * r->block_bytes >= NA_KV_IO_MAX) {
            st = na_kv_spill(s, r, layer, 0);
            if (st != NA_OK)
                return st;
        }
    }
    s->st.bytes_appended += (uint64_t)n_tok * 2u * r->n_kvh * hd * es;
    if (bulk)
        return na_kv_spill(s, r, layer, 0);
    L->pending_steps++;
    if (L->pending_steps < c->spill_interval)
        return NA_OK;
    /* the spill's SSD writes wait for the loop's next na_kv_poll (after
     * this step was answered); a step later they are made here */
    if (s->has_ssd && L->pending_steps == c->spill_interval &&
        na_kv_spill_later(s, r, layer) == 0)
        return NA_OK;
    return na_kv_spill(s, r, layer, 0);
}

na_status_t na_kv_attach(na_kv_store_t *s, na_kv_req_t *r, int layer, const void *mem)
{
    const int bt = s->cfg.block_tokens;
    na_kv_layer_t *L;
    na_kv_block_t *blk;
    int b;

    if (layer < 0 || layer >= s->cfg.n_layers)
        return na_err(NA_ERR_RANGE, "request %llu: layer %d out of range [0, %d)",
                      (unsigned long long)r->id, layer, s->cfg.n_layers);
    L = &r->layers[layer];
    b = L->n_tokens / bt;
    if (L->busy || L->writes)
        return na_err(NA_ERR_BUSY, "request %llu layer %d: a prefix block cannot be attached "
                      "while the layer is read or written", (unsigned long long)r->id, layer);
    if (L->n_tokens % bt != 0 || L->n_committed != L->n_tokens || b >= r->max_blocks ||
        L->n_tokens + bt > r->max_tokens)
        return na_err(NA_ERR_RANGE, "request %llu layer %d: a prefix block after %d tokens "
                      "(max %d, block %d)", (unsigned long long)r->id, layer, L->n_tokens,
                      r->max_tokens, bt);
    blk = &L->blocks[b];
    blk->loc = NA_KV_LOC_DRAM;
    blk->shared = 1;
    blk->keep = blk->written = 0;
    blk->mem = (void *)(uintptr_t)mem;      /* read-only: never written through */
    blk->sum = 0;
    L->n_tokens += bt;
    L->n_committed = L->n_spilled = L->n_tokens;
    return NA_OK;
}

const void *na_kv_block_mem(const na_kv_req_t *r, int layer, int b)
{
    const na_kv_block_t *blk;

    if (b < 0 || b >= r->max_blocks)
        return NULL;
    blk = &r->layers[layer].blocks[b];
    if (blk->loc == NA_KV_LOC_NONE || blk->loc == NA_KV_LOC_SSD)
        return NULL;
    return blk->mem;
}

na_status_t na_kv_block_read(na_kv_store_t *s, na_kv_req_t *r, int layer, int b, void *buf)
{
    const int bt = s->cfg.block_tokens;
    na_kv_block_t *blk;
    uint64_t off;
    na_status_t st;

    if (layer < 0 || layer >= s->cfg.n_layers || b < 0 || b >= r->max_blocks ||
        (b + 1) * bt > r->layers[layer].n_committed)
        return na_err(NA_ERR_RANGE, "request %llu layer %d: block %d is not a whole block held",
                      (unsigned long long)r->id, layer, b);
    blk = &r->layers[layer].blocks[b];
    if (blk->mem != NULL && blk->loc != NA_KV_LOC_SSD) {
        memcpy(buf, blk->mem, r->block_bytes);
        return NA_OK;
    }
    if (!r->has_ext || blk->loc != NA_KV_LOC_SSD)
        return na_err(NA_ERR_RANGE, "request %llu layer %d: block %d is in no tier",
                      (unsigned long long)r->id, layer, b);
    if ((st = na_kv_poll(s, 1)) != NA_OK)       /* the ring is shared: drain it first */
        return st;
    off = na_kv_layer_off(r, layer) + (uint64_t)b * r->block_bytes;
    st = na_kv_io_rw_sync(s->io, s->file.fd, 0, buf, r->block_bytes, off, s->file.path);
    if (st != NA_OK)
        return st;
    s->st.bytes_read_ssd += r->block_bytes;
    if (na_kv_sum(buf, r->block_bytes) != blk->sum)
        return na_err(NA_ERR_IO, "KV block %d of layer %d of request %llu read back from the SSD "
                      "tier (%s, offset %llu, %zu bytes) fails its checksum", b, layer,
                      (unsigned long long)r->id, s->file.path, (unsigned long long)off,
                      r->block_bytes);
    return NA_OK;
}

size_t na_kv_req_block_bytes(const na_kv_req_t *r)
{
    return r->block_bytes;
}

na_status_t na_kv_view(na_kv_store_t *s, na_kv_req_t *r, int layer, na_kv_view_t *view)
{
    return na_kv_view_n(s, r, layer, 0, view);
}

/* A table of at least n blocks from the free list (grown if short) or new;
 * NULL out of memory. Sizes are powers of two of at least 64 blocks, so a
 * growing context regrows the tables rarely. */
static na_kv_block_t *na_kv_vbuf_get(na_kv_store_t *s, int want)
{
    na_kv_vbuf_t *vb = s->vbuf_free;
    int n = 64;

    while (n < want)
        n *= 2;
    if (vb != NULL && vb->cap >= want) {
        s->vbuf_free = vb->next;
        return vb->b;
    }
    if (vb != NULL) {                   /* too small: grow it */
        na_kv_vbuf_t *nv;
        int cap = n < 2 * vb->cap ? 2 * vb->cap : n;
        nv = realloc(vb, sizeof(*vb) + sizeof(na_kv_block_t) * (size_t)cap);
        if (nv == NULL)
            return NULL;
        s->vbuf_free = nv->next;
        nv->cap = cap;
        return nv->b;
    }
    vb = malloc(sizeof(*vb) + sizeof(na_kv_block_t) * (size_t)n);
    if (vb == NULL)
        return NULL;
    vb->cap = n;
    return vb->b;
}

/* A view's table back onto the free list. */
static void na_kv_vbuf_put(na_kv_store_t *s, na_kv_block_t *b)
{
    na_kv_vbuf_t *vb;

    if (b == NULL)
        return;
    vb = (na_kv_vbuf_t *)(void *)((char *)b - offsetof(na_kv_vbuf_t, b));
    vb->next = s->vbuf_free;
    s->vbuf_free = vb;
}

na_status_t na_kv_view_n(na_kv_store_t *s, na_kv_req_t *r, int layer, int n_tok,
                         na_kv_view_t *view)
{
    na_kv_layer_t *L;
    na_status_t st;

    memset(view, 0, sizeof(*view));
    st = na_kv_req_check(r);
    if (st != NA_OK)
        return st;
    if (layer < 0 || layer >= s->cfg.n_layers)
        return na_err(NA_ERR_RANGE, "request %llu: layer %d out of range [0, %d)",
                      (unsigned long long)r->id, layer, s->cfg.n_layers);
    L = &r->layers[layer];
    if (n_tok > L->n_tokens)
        return na_err(NA_ERR_RANGE, "request %llu layer %d: a view of %d tokens, the layer "
                      "holds %d", (unsigned long long)r->id, layer, n_tok, L->n_tokens);
    view->req = r;
    view->layer = layer;
    view->n_tokens = n_tok > 0 ? n_tok : L->n_tokens;
    view->n_blocks = (view->n_tokens + s->cfg.block_tokens - 1) / s->cfg.block_tokens;
    view->n_kvh = r->n_kvh;
    view->block_bytes = r->block_bytes;
    view->fd = s->has_ssd ? s->file.fd : -1;
    view->ssd_off = r->has_ext ? na_kv_layer_off(r, layer) : 0;
    if (view->n_blocks > 0) {
        view->blocks = na_kv_vbuf_get(s, view->n_blocks);
        if (view->blocks == NULL)
            return na_err(NA_ERR_NOMEM, "kv view: out of memory");
        memcpy(view->blocks, L->blocks, sizeof(na_kv_block_t) * (size_t)view->n_blocks);
    }
    L->busy++;
    return NA_OK;
}

void na_kv_view_release(na_kv_store_t *s, na_kv_view_t *view)
{
    na_kv_layer_t *L;
    int b;

    if (view->req == NULL)
        return;
    L = &view->req->layers[view->layer];
    na_kv_vbuf_put(s, view->blocks);
    view->blocks = NULL;
    if (--L->busy == 0 && L->deferred) {
        L->deferred = 0;
        /* finish state changes deferred while the layer was being read */
        for (b = 0; b < view->req->max_blocks; b++) {
            na_kv_block_t *blk = &L->blocks[b];
            if (blk->loc == NA_KV_LOC_WRITING && blk->written) {
                if (blk->keep) {
                    blk->loc = NA_KV_LOC_DRAM;
                } else {
                    na_kv_dram_block_put(s, blk->mem, view->req->block_bytes);
                    blk->mem = NULL;
                    blk->loc = NA_KV_LOC_SSD;
                    s->ssd_only = 1;
                }
                blk->written = 0;
            }
        }
    }
    view->req = NULL;
}

na_status_t na_kv_view_check(const na_kv_view_t *v, int b, const void *data)
{
    if (na_kv_sum(data, v->block_bytes) == v->blocks[b].sum)
        return NA_OK;
    return na_err(NA_ERR_IO, "KV block %d of layer %d of request %llu read back from the SSD "
                  "tier (file offset %llu, %zu bytes) fails its checksum: the disk returned "
                  "other bytes than were written", b, v->layer,
                  (unsigned long long)na_kv_req_id(v->req),
                  (unsigned long long)(v->ssd_off + (uint64_t)b * v->block_bytes),
                  v->block_bytes);
}

void na_kv_stats(na_kv_store_t *s, na_kv_stats_t *out)
{
    *out = s->st;
    out->dram_used = s->dram_used;
    out->ssd_used = s->has_ssd ? s->file.used : 0;
}

na_status_t na_kv_read_header(na_kv_store_t *s, uint64_t id, uint64_t *seq_p,
                              int *tokens, int n_layers)
{
    na_kv_req_t *r = na_kv_find(s, id);

    if (r == NULL || !r->has_ext)
        return na_err(NA_ERR_NOT_FOUND, "read header: request %llu has no extent",
                      (unsigned long long)id);
    return na_kv_header_read(s, r, seq_p, tokens, n_layers);
}

int na_kv_ssd_only_seen(const na_kv_store_t *s)
{
    return s->ssd_only;
}

void na_kv_count_read(na_kv_store_t *s, uint64_t bytes)
{
    s->st.bytes_read_ssd += bytes;
}
