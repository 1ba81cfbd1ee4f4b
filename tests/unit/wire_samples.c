/* tests/unit/wire_samples.c — valid sample messages of every wire type. */
#include "tests/unit/wire_samples.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fnv.h"
#include "tests/testutil.h"

static uint32_t rnd(na_rng_t *r, uint32_t lo, uint32_t hi)   /* [lo, hi] */
{
    return lo + (uint32_t)(na_rng_u64(r) % (uint64_t)(hi - lo + 1));
}

/* A kv head range [h0, h1) within 4 heads. */
static void draw_heads(na_rng_t *r, uint16_t *h0_p, uint16_t *h1_p)
{
    *h0_p = (uint16_t)rnd(r, 0, 3);
    *h1_p = (uint16_t)rnd(r, *h0_p + 1, 4);
}

/* The fields every KV message draws, in this order. */
#define DRAW_KV(k, max_tokens) do {                                                  \
        (k)->request_id = rnd(&r, 1, 1000000);                                       \
        (k)->layer = rnd(&r, 0, 31);                                                 \
        (k)->n_tokens = rnd(&r, 1, (max_tokens));                                    \
        (k)->pos0 = rnd(&r, 0, 5000);                                                \
        draw_heads(&r, &(k)->kv_h0, &(k)->kv_h1);                                    \
    } while (0)

/* The batch fields DECODE_ATTN and ATTN_OUT draw alike, in this order. */
#define DRAW_BATCH(a) do {                                                           \
        (a)->batch_id = (uint32_t)na_rng_u64(&r);                                    \
        (a)->layer = rnd(&r, 0, 31);                                                 \
        (a)->n_entries = rnd(&r, 1, NA_WIRE_SAMPLE_ENTRIES);                         \
        (a)->entry_base = rnd(&r, 0, 10);                                            \
        (a)->batch_total = (a)->entry_base + (a)->n_entries + rnd(&r, 0, 3);         \
        (a)->head_dim = (uint16_t)rnd(&r, 1, 17);                                    \
        (a)->q_per_kv = (uint16_t)rnd(&r, 1, 4);                                     \
        (a)->dtype = dts[rnd(&r, 0, 2)];                                             \
    } while (0)

static const uint8_t *take(na_wire_sample_t *s, size_t *used, size_t n)
{
    const uint8_t *p = s->rows + *used;
    *used += n;
    return p;
}

int na_wire_sample_make(na_wire_sample_t *s, na_wire_type_t t, uint64_t seed)
{
    static const na_dtype_t dts[3] = { NA_DTYPE_F32, NA_DTYPE_F16, NA_DTYPE_BF16 };
    na_rng_t r;
    size_t used = 0, i, es;
    na_wire_msg_t *m = &s->msg;
    uint32_t n;

    memset(s, 0, sizeof(*s));
    na_rng_seed(&r, seed * 7919 + (uint64_t)t);
    s->rows_len = 1 << 18;       /* room for entries of up to 3 queries */
    s->rows = malloc(s->rows_len);
    if (!s->rows)
        return -1;
    for (i = 0; i < s->rows_len; i++)
        s->rows[i] = (uint8_t)na_rng_u64(&r);
    m->type = t;
    m->seq = (uint32_t)na_rng_u64(&r);
    m->time_ns = na_rng_u64(&r);
    m->flags = (na_rng_u64(&r) & 1) ? NA_WIRE_F_MORE : 0;
    switch (t) {
    case NA_WIRE_MSG_HELLO:
    case NA_WIRE_MSG_HELLO_CHALLENGE: {
        na_wire_hello_t *h = t == NA_WIRE_MSG_HELLO ? &m->u.hello : &m->u.challenge.hello;
        h->role = (na_wire_role_t)rnd(&r, 1, NA_WIRE_ROLE_COUNT - 1);
        memcpy(h->nonce, take(s, &used, 32), 32);
        n = rnd(&r, 0, 99);                      /* one draw per statement: */
        snprintf(h->name, sizeof(h->name), "node-%u.x_%u", n, rnd(&r, 0, 9));  /* fixed order */
        snprintf(h->cluster, sizeof(h->cluster), "demo:%u", rnd(&r, 0, 999));
        if (t == NA_WIRE_MSG_HELLO_CHALLENGE)
            memcpy(m->u.challenge.mac, take(s, &used, 32), 32);
        break;
    }
    case NA_WIRE_MSG_AUTH:
        memcpy(m->u.auth.mac, take(s, &used, 32), 32);
        break;
    case NA_WIRE_MSG_HELLO_OK:
        m->u.hello_ok.heartbeat_ms = rnd(&r, 0, 100000);
        break;
    case NA_WIRE_MSG_REFUSE:
    case NA_WIRE_MSG_BYE: {
        na_wire_refuse_msg_t *x = t == NA_WIRE_MSG_REFUSE ? &m->u.refuse : &m->u.bye;
        x->reason = (na_wire_refuse_t)rnd(&r, t == NA_WIRE_MSG_REFUSE ? 1 : 0, NA_WIRE_REFUSE_COUNT - 1);
        n = rnd(&r, 0, 40);
        for (i = 0; i < n; i++)
            x->text[i] = (char)rnd(&r, 0x20, 0x7e);
        x->text[n] = '\0';
        break;
    }
    case NA_WIRE_MSG_HEARTBEAT:
        m->u.heartbeat.send_ns = na_rng_u64(&r);
        m->u.heartbeat.echo_ns = na_rng_u64(&r);
        break;
    case NA_WIRE_MSG_REQ_OPEN: {
        na_wire_req_open_t *o = &m->u.req_open;
        o->request_id = rnd(&r, 1, 1000000);
        o->max_tokens = rnd(&r, 1, 4096);
        o->n_layers = rnd(&r, 1, 80);
        o->kv_h0 = (uint16_t)rnd(&r, 0, 7);
        o->kv_h1 = (uint16_t)rnd(&r, o->kv_h0 + 1, 8);
        o->head_dim = (uint16_t)rnd(&r, 1, 256);
        o->q_per_kv = (uint16_t)rnd(&r, 1, 8);
        o->dtype = dts[rnd(&r, 0, 2)];
        o->n_prompt = rnd(&r, 0, 1) ? rnd(&r, 1, o->max_tokens) : 0;
        if (rnd(&r, 0, 1)) {                    /* a prefix section (prefix reuse) */
            o->n_prefix = rnd(&r, 1, o->max_tokens < 300 ? o->max_tokens : 300);
            memcpy(o->model_fp, take(s, &used, NA_WIRE_FP_SIZE), NA_WIRE_FP_SIZE);
            used = (used + 3) & ~(size_t)3;     /* the ids are read as uint32_t */
            o->prefix = take(s, &used, 4u * o->n_prefix);
        }
        break;
    }
    case NA_WIRE_MSG_REQ_RELEASE:
        m->u.req_release.request_id = rnd(&r, 1, 1000000);
        m->u.req_release.status = -(int32_t)rnd(&r, 0, 17);
        break;
    case NA_WIRE_MSG_PREFILL_KV:
    case NA_WIRE_MSG_KV_DATA: {
        na_wire_kv_t *k = &m->u.kv;
        DRAW_KV(k, 9);
        k->head_dim = (uint16_t)rnd(&r, 1, 20);
        k->dtype = dts[rnd(&r, 0, 2)];
        es = na_dtype_bytes(k->dtype, 1);
        n = k->n_tokens * (k->kv_h1 - k->kv_h0) * k->head_dim * (uint32_t)es;
        k->k = take(s, &used, n);
        k->v = take(s, &used, n);
        break;
    }
    case NA_WIRE_MSG_KV_FETCH: {
        na_wire_kv_fetch_t *f = &m->u.kv_fetch;
        DRAW_KV(f, 4096);
        f->dtype = dts[rnd(&r, 0, 2)];
        break;
    }
    case NA_WIRE_MSG_DECODE_ATTN: {
        na_wire_attn_t *a = &m->u.attn;
        DRAW_BATCH(a);
        a->scale = 1.0f / (float)rnd(&r, 1, 16);
        es = na_dtype_bytes(a->dtype, 1);
        for (i = 0; i < a->n_entries; i++) {
            na_wire_attn_entry_t *e = &s->attn_e[i];
            uint32_t nh;
            e->request_id = rnd(&r, 1, 1000000);
            e->position = rnd(&r, 0, 100000);
            draw_heads(&r, &e->kv_h0, &e->kv_h1);
            e->n_queries = rnd(&r, 1, 3);           /* > 1: a prompt chunk */
            nh = e->kv_h1 - e->kv_h0;
            e->q = take(s, &used, (size_t)e->n_queries * nh * a->q_per_kv * a->head_dim * es);
            e->k = take(s, &used, (size_t)e->n_queries * nh * a->head_dim * es);
            e->v = take(s, &used, (size_t)e->n_queries * nh * a->head_dim * es);
        }
        a->entries = s->attn_e;
        break;
    }
    case NA_WIRE_MSG_ATTN_OUT: {
        na_wire_attn_out_t *a = &m->u.attn_out;
        DRAW_BATCH(a);
        es = na_dtype_bytes(a->dtype, 1);
        for (i = 0; i < a->n_entries; i++) {
            na_wire_out_entry_t *e = &s->out_e[i];
            e->request_id = rnd(&r, 1, 1000000);
            e->status = 0;
            draw_heads(&r, &e->kv_h0, &e->kv_h1);
            e->n_queries = rnd(&r, 1, 3);
            e->o = take(s, &used, (size_t)e->n_queries * (e->kv_h1 - e->kv_h0) * a->q_per_kv *
                                  a->head_dim * es);
        }
        a->entries = s->out_e;
        break;
    }
    case NA_WIRE_MSG_STATS: {
        na_wire_stats_t *st = &m->u.stats;
        st->n = rnd(&r, 0, NA_WIRE_SAMPLE_ENTRIES);
        for (i = 0; i < st->n; i++) {
            snprintf(s->stats[i].key, sizeof(s->stats[i].key), "tier%zu.bytes_read", i);
            s->stats[i].value = na_rng_u64(&r);
        }
        st->pairs = s->stats;
        break;
    }
    case NA_WIRE_MSG_ERROR: {
        na_wire_error_t *e = &m->u.error;
        e->request_id = na_rng_u64(&r) % 1000;
        e->batch_id = rnd(&r, 0, 100);
        e->layer = rnd(&r, 0, 31);
        e->status = -(int32_t)rnd(&r, 1, 17);
        e->about_type = (uint16_t)rnd(&r, 0, NA_WIRE_MSG_COUNT - 1);
        e->about_seq = (uint32_t)na_rng_u64(&r);
        n = rnd(&r, 0, 999);
        snprintf(e->text, sizeof(e->text), "request %u: no space on slot %u", n, rnd(&r, 0, 3));
        break;
    }
    case NA_WIRE_MSG_ECHO:
        m->u.echo.len = rnd(&r, 0, 300);
        m->u.echo.data = take(s, &used, m->u.echo.len);
        break;
    case NA_WIRE_MSG_ACK:
        m->u.ack.request_id = rnd(&r, 0, 1000);
        m->u.ack.about_type = (uint16_t)rnd(&r, 1, NA_WIRE_MSG_COUNT - 1);
        m->u.ack.about_seq = (uint32_t)na_rng_u64(&r);
        m->u.ack.prefix_tokens = rnd(&r, 0, 1) ? rnd(&r, 1, 5000) : 0;
        break;
    case NA_WIRE_MSG_BATCH_CTX: {
        na_wire_ctx_t *c = &m->u.ctx;
        c->batch_id = rnd(&r, 0, 7);
        c->slice = rnd(&r, 0, 12);
        c->n_rows = rnd(&r, 1, NA_WIRE_SAMPLE_ENTRIES);
        c->dim = rnd(&r, 1, 40);
        c->att_dim = rnd(&r, 0, 2) ? rnd(&r, 1, 40) : 0;
        c->dtype = dts[rnd(&r, 0, 2)];
        c->step = na_rng_u64(&r);
        es = na_dtype_bytes(c->dtype, 1);
        for (i = 0; i < c->n_rows; i++) {
            na_wire_ctx_row_t *w = &s->ctx_r[i];
            w->request_id = rnd(&r, 1, 1000000);
            w->position = rnd(&r, 0, 4096);
            w->token = rnd(&r, 0, 32000);
            w->rng = na_rng_u64(&r);
            w->status = rnd(&r, 0, 3) ? 0 : -(int32_t)rnd(&r, 1, 17);
        }
        c->rows = s->ctx_r;
        c->x = take(s, &used, (size_t)c->n_rows * c->dim * es);
        c->att = c->att_dim ? take(s, &used, (size_t)c->n_rows * c->att_dim * es) : NULL;
        break;
    }
    case NA_WIRE_MSG_STATS_REQ:
    default:
        break;
    }
    return used <= s->rows_len ? 0 : -1;
}

void na_wire_sample_free(na_wire_sample_t *s)
{
    free(s->rows);
    s->rows = NULL;
}

uint8_t *na_wire_sample_encode(const na_wire_sample_t *s, size_t *len_p)
{
    size_t size, len;
    uint8_t *buf;

    if (na_wire_msg_size(&s->msg, &size) != NA_OK)
        return NULL;
    buf = malloc(size ? size : 1);
    if (!buf)
        return NULL;
    if (na_wire_encode(&s->msg, buf, size, &len) != NA_OK || len != size) {
        free(buf);
        return NULL;
    }
    *len_p = len;
    return buf;
}

static uint64_t sum_bytes(const void *p, size_t n)
{
    return na_fnv1a64(p, n);
}

/* Rows in a message's table (0 for the types without one). */
static uint32_t table_rows(const na_wire_msg_t *m)
{
    switch (m->type) {
    case NA_WIRE_MSG_DECODE_ATTN: return m->u.attn.n_entries;
    case NA_WIRE_MSG_ATTN_OUT:    return m->u.attn_out.n_entries;
    case NA_WIRE_MSG_STATS:       return m->u.stats.n;
    case NA_WIRE_MSG_BATCH_CTX:   return m->u.ctx.n_rows;
    default:                      return 0;
    }
}

/* Read row i of m's table through its accessor and sum it and the bytes it
 * points at into *h. */
static na_status_t touch_row(const na_wire_msg_t *m, uint32_t i, uint64_t *h)
{
    na_wire_attn_entry_t ae;
    na_wire_out_entry_t oe;
    na_wire_stat_t sp;
    na_wire_ctx_row_t w;
    na_status_t st = NA_ERR_INVALID;
    size_t kv;

    if (m->type == NA_WIRE_MSG_DECODE_ATTN && (st = na_wire_attn_get(&m->u.attn, i, &ae)) == NA_OK) {
        kv = (size_t)ae.n_queries * (ae.kv_h1 - ae.kv_h0) * m->u.attn.head_dim *
             na_dtype_bytes(m->u.attn.dtype, 1);
        *h += sum_bytes(ae.q, kv * m->u.attn.q_per_kv) + sum_bytes(ae.k, kv) + sum_bytes(ae.v, kv);
    } else if (m->type == NA_WIRE_MSG_ATTN_OUT &&
               (st = na_wire_attn_out_get(&m->u.attn_out, i, &oe)) == NA_OK) {
        kv = (size_t)oe.n_queries * (oe.kv_h1 - oe.kv_h0) * m->u.attn_out.head_dim *
             na_dtype_bytes(m->u.attn_out.dtype, 1);
        *h += sum_bytes(oe.o, kv * m->u.attn_out.q_per_kv);
    } else if (m->type == NA_WIRE_MSG_STATS && (st = na_wire_stats_get(&m->u.stats, i, &sp)) == NA_OK) {
        *h += sum_bytes(sp.key, strlen(sp.key)) + sp.value;
    } else if (m->type == NA_WIRE_MSG_BATCH_CTX && (st = na_wire_ctx_get(&m->u.ctx, i, &w)) == NA_OK) {
        *h += w.request_id + w.position + w.token + w.rng + (uint64_t)(uint32_t)w.status;
    }
    return st;
}

uint64_t na_wire_sample_touch(const na_wire_msg_t *m)
{
    uint64_t h = sum_bytes(m, sizeof(*m));
    uint32_t i, n = table_rows(m);

    for (i = 0; i < n; i++)
        if (touch_row(m, i, &h) != NA_OK)
            return 0;
    switch (m->type) {
    case NA_WIRE_MSG_PREFILL_KV:
    case NA_WIRE_MSG_KV_DATA: {
        const na_wire_kv_t *k = &m->u.kv;
        size_t bytes = (size_t)k->n_tokens * (k->kv_h1 - k->kv_h0) * k->head_dim * na_dtype_bytes(k->dtype, 1);
        h += sum_bytes(k->k, bytes) + sum_bytes(k->v, bytes);
        break;
    }
    case NA_WIRE_MSG_ECHO:
        h += sum_bytes(m->u.echo.data, (size_t)m->u.echo.len);
        break;
    case NA_WIRE_MSG_BATCH_CTX: {
        const na_wire_ctx_t *c = &m->u.ctx;
        size_t es = na_dtype_bytes(c->dtype, 1);
        h += sum_bytes(c->x, (size_t)c->n_rows * c->dim * es);
        if (c->att_dim)
            h += sum_bytes(c->att, (size_t)c->n_rows * c->att_dim * es);
        break;
    }
    default:
        break;
    }
    return h;
}
