/* storage-node/node_kvread.c — KV_FETCH: read a range of a request's KV back
 * from the slots (DRAM blocks, writeback buffer, SSD blocks) and send it as
 * KV_DATA. Used to move a request elsewhere or to check what a node holds;
 * not on the decode path. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "storage-node/kv_ssd.h"
#include "storage-node/node_internal.h"

/* Copy tokens [pos0, pos0+n) of the part's heads that fall in [h0, h1) (absolute
 * heads) from view into k/v ([n][h1-h0][hd] f32). */
static na_status_t kr_copy_part(na_node_t *n, const na_node_req_t *r, const na_place_part_t *pt,
                                const na_kv_view_t *view, const na_wire_kv_fetch_t *f,
                                float *k, float *v)
{
    const int hd = n->common.kv.head_dim, bt = n->common.kv.block_tokens;
    const na_dtype_t dt = n->common.kv.kv_dtype;
    const size_t es = na_dtype_bytes(dt, 1), half = (size_t)bt * hd * es;
    const int nh_out = f->kv_h1 - f->kv_h0;
    int ph0 = r->kv_h0 + pt->kvh0, ph1 = ph0 + pt->n_kvh;
    int lo = ph0 > f->kv_h0 ? ph0 : f->kv_h0, hi = ph1 < f->kv_h1 ? ph1 : f->kv_h1;
    uint32_t t = f->pos0, end = f->pos0 + f->n_tokens;
    uint8_t *buf = NULL;
    na_status_t st = NA_OK;

    if (lo >= hi)
        return NA_OK;
    while (t < end && st == NA_OK) {
        int b = (int)(t / (uint32_t)bt);
        const na_kv_block_t *blk = &view->blocks[b];
        const uint8_t *src = blk->mem;
        uint32_t last = (uint32_t)(b + 1) * (uint32_t)bt;
        if (last > end)
            last = end;
        if (src == NULL || blk->loc == NA_KV_LOC_SSD) {
            uint64_t off = view->ssd_off + (uint64_t)b * view->block_bytes;
            ssize_t got;
            if (buf == NULL && (buf = na_kv_aligned_alloc(view->block_bytes)) == NULL)
                return na_err(NA_ERR_NOMEM, "node %s: out of memory", n->name);
            got = view->fd >= 0 ? pread(view->fd, buf, view->block_bytes, (off_t)off) : -1;
            if (got != (ssize_t)view->block_bytes) {
                st = na_err(NA_ERR_IO, "node %s: request %llu: reading block %d at offset %llu: "
                            "%s", n->name, (unsigned long long)f->request_id, b,
                            (unsigned long long)off, got < 0 ? strerror(errno) : "short read");
                break;
            }
            if (blk->loc == NA_KV_LOC_SSD && (st = na_kv_view_check(view, b, buf)) != NA_OK) {
                st = na_err_prefix(st, "node %s: ", n->name);
                break;
            }
            src = buf;
        }
        for (; t < last; t++) {
            int h;
            for (h = lo; h < hi; h++) {
                const uint8_t *base = src + (size_t)(h - ph0) * 2 * half + (size_t)(t % bt) * hd * es;
                size_t o = ((size_t)(t - f->pos0) * nh_out + (size_t)(h - f->kv_h0)) * hd;
                na_wire_rows_to_f32(base, dt, (size_t)hd, k + o);
                na_wire_rows_to_f32(base + half, dt, (size_t)hd, v + o);
            }
        }
    }
    na_kv_aligned_free(buf);
    return st;
}

/* Send KV_DATA with rows converted from f32 (k, v: [n][nh][hd]) to f->dtype. */
static na_status_t kr_send(na_node_t *n, na_node_peer_t *p, const na_wire_kv_fetch_t *f,
                           float *k, float *v, size_t cnt)
{
    na_wire_msg_t m;
    void *ck = k, *cv = v;
    uint8_t *conv = NULL;
    na_status_t st;

    if (f->dtype != NA_DTYPE_F32) {
        size_t es = na_dtype_bytes(f->dtype, 1);
        conv = malloc(2 * cnt * es);
        if (conv == NULL)
            return na_err(NA_ERR_NOMEM, "node %s: out of memory", n->name);
        na_wire_rows_from_f32(k, f->dtype, cnt, conv);
        na_wire_rows_from_f32(v, f->dtype, cnt, conv + cnt * es);
        ck = conv;
        cv = conv + cnt * es;
    }
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_KV_DATA;
    m.u.kv.request_id = f->request_id;
    m.u.kv.layer = f->layer;
    m.u.kv.pos0 = f->pos0;
    m.u.kv.n_tokens = f->n_tokens;
    m.u.kv.kv_h0 = f->kv_h0;
    m.u.kv.kv_h1 = f->kv_h1;
    m.u.kv.head_dim = (uint16_t)n->common.kv.head_dim;
    m.u.kv.dtype = f->dtype;
    m.u.kv.k = ck;
    m.u.kv.v = cv;
    st = na_node_send(p, &m);
    free(conv);
    return st;
}

na_status_t na_node_kv_fetch(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                             const na_wire_kv_fetch_t *f)
{
    na_node_req_t *r = na_node_req_find(n, p->id, f->request_id);
    size_t cnt;
    float *k;
    na_status_t st = NA_OK;
    int i, have = -1;

    if (r != NULL && f->layer < r->n_layers)
        have = na_slotset_tokens(n->ss, &r->sr, (int)f->layer);
    if (r == NULL || f->layer >= r->n_layers || f->kv_h0 < r->kv_h0 || f->kv_h1 > r->kv_h1 ||
        f->kv_h0 >= f->kv_h1 || f->n_tokens == 0 || (uint64_t)f->pos0 + f->n_tokens > (uint64_t)(have > 0 ? have : 0)) {
        st = na_err(r == NULL ? NA_ERR_NOT_FOUND : NA_ERR_RANGE, "node %s: KV_FETCH of request "
                    "%llu layer %u heads [%u, %u) tokens [%u, %llu): %s", n->name,
                    (unsigned long long)f->request_id, f->layer, f->kv_h0, f->kv_h1, f->pos0,
                    (unsigned long long)f->pos0 + f->n_tokens,
                    r == NULL ? "unknown request" : "outside what the request holds");
        return na_node_send_error(n, p, h, f->request_id, st, na_errmsg());
    }
    cnt = (size_t)f->n_tokens * (size_t)(f->kv_h1 - f->kv_h0) * (size_t)n->common.kv.head_dim;
    k = malloc(2 * cnt * sizeof(float));
    if (k == NULL)
        return na_node_send_error(n, p, h, f->request_id,
                                  na_err(NA_ERR_NOMEM, "node %s: out of memory for KV_DATA", n->name),
                                  na_errmsg());
    for (i = 0; i < r->sr.n_parts && st == NA_OK; i++) {
        na_kv_store_t *store = na_slot_store(n->slots[r->sr.parts[i].slot]);
        na_kv_req_t *kr = na_kv_find(store, r->sr.sid);
        na_kv_view_t view;
        if (kr == NULL) {
            st = na_err(NA_ERR_INTERNAL, "node %s: request %llu missing on slot %d", n->name,
                        (unsigned long long)f->request_id, r->sr.parts[i].slot);
            break;
        }
        st = na_kv_view(store, kr, (int)f->layer, &view);
        if (st != NA_OK)
            break;
        st = kr_copy_part(n, r, &r->sr.parts[i], &view, f, k, k + cnt);
        na_kv_view_release(store, &view);
    }
    if (st == NA_OK)
        st = kr_send(n, p, f, k, k + cnt, cnt);
    else
        st = na_node_send_error(n, p, h, f->request_id, st, na_errmsg());
    free(k);
    return st;
}
