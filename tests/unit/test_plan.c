/* tests/unit/test_plan.c — the planner's analytic traffic (common/plan.c)
 * equals the encoded size of the messages it stands for (common/wire.h
 * na_wire_msg_size): DECODE_ATTN / ATTN_OUT of 1..9 entries for offload, and
 * KV_FETCH, a one-row PREFILL_KV, KV_DATA of p rows and ACK for kv-fetch, on
 * MHA and GQA shapes including head sizes whose rows are not multiples of 64
 * bytes. Also: estimates are deterministic, offload bytes do not depend on
 * the context, kv-fetch bytes grow with it, and a suggestion has at least one
 * storage node and 2 batches in flight for batches > 1. */
#include <stdlib.h>
#include <string.h>

#include "common/plan.h"
#include "common/wire.h"
#include "tests/testutil.h"

static size_t msg_size(na_wire_msg_t *m)
{
    size_t n = 0;
    NA_CHECK_OK(na_wire_msg_size(m, &n));
    return n;
}

static void check_shape(int n_heads, int n_kv, int hd)
{
    na_model_config_t mc;
    int n, p;

    memset(&mc, 0, sizeof(mc));
    mc.dim = n_heads * hd;
    mc.hidden_dim = 2 * mc.dim;
    mc.n_layers = 1;
    mc.n_heads = n_heads;
    mc.n_kv_heads = n_kv;
    mc.head_dim = hd;
    mc.vocab_size = 300;
    for (n = 1; n <= 9; n += 4) {
        na_wire_attn_entry_t *e = calloc((size_t)n, sizeof(*e));
        na_wire_out_entry_t *o = calloc((size_t)n, sizeof(*o));
        na_wire_msg_t m;
        na_plan_traffic_t t;
        int i;
        for (i = 0; i < n; i++) {
            e[i].request_id = (uint64_t)i + 1;
            e[i].position = 5;
            e[i].kv_h1 = (uint16_t)n_kv;
            o[i].request_id = (uint64_t)i + 1;
            o[i].kv_h1 = (uint16_t)n_kv;
        }
        memset(&m, 0, sizeof(m));
        m.type = NA_WIRE_MSG_DECODE_ATTN;
        m.u.attn = (na_wire_attn_t){ .n_entries = (uint32_t)n, .batch_total = (uint32_t)n,
                                     .head_dim = (uint16_t)hd, .q_per_kv = (uint16_t)(n_heads / n_kv),
                                     .dtype = NA_DTYPE_F32, .scale = 0.5f, .entries = e };
        na_plan_traffic_nodes(&mc, NA_PLAN_OFFLOAD, n, 1, 1, 100, 1, &t);
        NA_CHECK_MSG((size_t)t.out == msg_size(&m), "DECODE_ATTN %d/%d/%d n=%d: %.0f vs %zu",
                     n_heads, n_kv, hd, n, t.out, msg_size(&m));
        memset(&m, 0, sizeof(m));
        m.type = NA_WIRE_MSG_ATTN_OUT;
        m.u.attn_out = (na_wire_attn_out_t){ .n_entries = (uint32_t)n, .batch_total = (uint32_t)n,
                                             .head_dim = (uint16_t)hd,
                                             .q_per_kv = (uint16_t)(n_heads / n_kv),
                                             .dtype = NA_DTYPE_F32, .entries = o };
        NA_CHECK_MSG((size_t)t.in == msg_size(&m), "ATTN_OUT %d/%d/%d n=%d: %.0f vs %zu",
                     n_heads, n_kv, hd, n, t.in, msg_size(&m));
        free(e);
        free(o);
    }
    for (p = 1; p <= 1025; p += 341) {
        na_wire_msg_t m;
        na_plan_traffic_t t;
        size_t out, in;
        memset(&m, 0, sizeof(m));
        m.type = NA_WIRE_MSG_KV_FETCH;
        m.u.kv_fetch.request_id = 1;
        m.u.kv_fetch.n_tokens = (uint32_t)p;
        m.u.kv_fetch.kv_h1 = (uint16_t)n_kv;
        m.u.kv_fetch.dtype = NA_DTYPE_F16;
        out = msg_size(&m);
        memset(&m, 0, sizeof(m));
        m.type = NA_WIRE_MSG_PREFILL_KV;
        m.u.kv.request_id = 1;
        m.u.kv.pos0 = (uint32_t)p;
        m.u.kv.n_tokens = 1;
        m.u.kv.kv_h1 = (uint16_t)n_kv;
        m.u.kv.head_dim = (uint16_t)hd;
        m.u.kv.dtype = NA_DTYPE_F16;
        out += msg_size(&m);
        m.type = NA_WIRE_MSG_KV_DATA;
        m.u.kv.pos0 = 0;
        m.u.kv.n_tokens = (uint32_t)p;
        in = msg_size(&m);
        memset(&m, 0, sizeof(m));
        m.type = NA_WIRE_MSG_ACK;
        m.u.ack.request_id = 1;
        m.u.ack.about_type = NA_WIRE_MSG_PREFILL_KV;
        in += msg_size(&m);
        na_plan_traffic(&mc, NA_PLAN_KVFETCH, 1, 1, p, 1, &t);
        NA_CHECK_MSG((size_t)t.out == out && (size_t)t.in == in,
                     "kv-fetch %d/%d/%d p=%d: %.0f/%.0f vs %zu/%zu", n_heads, n_kv, hd, p, t.out,
                     t.in, out, in);
    }
}

int main(void)
{
    na_model_config_t mc;
    na_plan_rates_t r = { 2e10, 9e10, 1e10, 1e9, 1.25e8, 1e-4, 0 };
    na_plan_est_t a, b;
    na_plan_suggest_t s1, s2;

    check_shape(8, 8, 32);      /* the sweep's MHA model */
    check_shape(8, 4, 8);       /* stories260K-like GQA */
    check_shape(2, 1, 6);       /* rows not multiples of 64 bytes */
    check_shape(6, 3, 10);

    memset(&mc, 0, sizeof(mc));
    mc.dim = 256;
    mc.hidden_dim = 512;
    mc.n_layers = 4;
    mc.n_heads = mc.n_kv_heads = 8;
    mc.head_dim = 32;
    mc.vocab_size = 512;
    na_plan_estimate(&mc, &r, NA_PLAN_OFFLOAD, 8, 512, 1, 1, 1, &a);
    na_plan_estimate(&mc, &r, NA_PLAN_OFFLOAD, 8, 8192, 1, 1, 1, &b);
    NA_CHECK(a.bytes_layer == b.bytes_layer);
    NA_CHECK(b.step_s > a.step_s);
    na_plan_estimate(&mc, &r, NA_PLAN_KVFETCH, 8, 512, 1, 1, 1, &a);
    na_plan_estimate(&mc, &r, NA_PLAN_KVFETCH, 8, 8192, 1, 1, 1, &b);
    NA_CHECK(b.bytes_layer > 15 * a.bytes_layer);
    na_plan_suggest(&mc, &r, 32, 2048, 1, 1, &s1);
    na_plan_suggest(&mc, &r, 32, 2048, 1, 1, &s2);
    NA_CHECK(memcmp(&s1, &s2, sizeof(s1)) == 0);
    NA_CHECK(s1.bif >= 2 && s1.nodes >= 1 && s1.tok_s > 0);
    na_plan_suggest(&mc, &r, 1, 2048, 1, 1, &s1);
    NA_CHECK(s1.bif == 1 && s1.nodes == 1);
    return na_test_finish();
}
