/* common/plan.h — the capacity/throughput planner of `nearattn check-config
 * --plan` and the predictions `nearattn bench e2e --sweep` prints beside its
 * measurements (docs/benchmarks.md):
 *
 *   rates    what this machine and link do: weight streaming of a decode
 *            GEMV, GEMM FLOP/s at a large batch, decode attention over KV
 *            bytes, disk read, link bandwidth and round trip. Measured in
 *            process (cli/plan_rates.c) or read from a "key value" file.
 *   traffic  the analytic bytes of the decode phase per mode (INF2 §2.2 /
 *            Eq. 3, Lamina §4.2) including the wire framing of common/wire.h.
 *   estimate per-layer compute time t_m, attention time t_a (network +
 *            attention + disk) and the decode step time of each mode.
 *   suggest  batches in flight and storage nodes so that t_a ≈ t_m/(n−1)
 *            (Lamina §4.1, §5.1).
 *
 * Pure arithmetic: nothing here measures or fails except the rates file. */
#ifndef NA_PLAN_H
#define NA_PLAN_H

#include <stdio.h>

#include "common/model.h"
#include "common/status.h"

typedef struct {
    double gemv_Bps;      /* weight bytes/s of a batch-1 matmul (memory bound) */
    double gemm_flops;    /* FLOP/s of a batch-64 matmul (compute bound) */
    double attn_Bps;      /* KV bytes/s of decode attention (f16 KV) */
    double disk_Bps;      /* sequential SSD read, bytes/s (KV on the SSD tier) */
    double link_Bps;      /* link bandwidth, bytes/s */
    double link_rtt_s;    /* round trip of a small message */
    double step_overhead_s; /* fixed per model slice (dispatch, norms, sync) */
} na_plan_rates_t;

typedef enum { NA_PLAN_MONO = 0, NA_PLAN_KVFETCH = 1, NA_PLAN_OFFLOAD = 2 } na_plan_kind_t;

/* Bytes of the decode phase, both directions, summed over all steps and
 * layers (compute -> storage = out, storage -> compute = in). */
typedef struct {
    double out, in;
} na_plan_traffic_t;

/* Analytic decode traffic of n_req requests of prompt length ctx over n_steps
 * decode steps (positions ctx .. ctx+n_steps-1) in n_batches equal batches,
 * each batch's requests spread over min(n_nodes, batch) storage nodes (here:
 * one DECODE_ATTN per node per batch per layer). Offload: q, k_new, v_new f32
 * out and o f32 back per entry plus framing; kv-fetch: per entry a KV_FETCH,
 * KV_DATA of the whole context in f16, a one-row PREFILL_KV and its ACK. */
void na_plan_traffic_nodes(const na_model_config_t *mc, na_plan_kind_t kind, int n_req,
                           int n_batches, int n_nodes, int ctx, int n_steps,
                           na_plan_traffic_t *out);
/* The same with one storage node per batch message (request partition, the
 * batch on one node or each request on its own: the per-entry bytes are the
 * same; only the framing of extra messages differs). */
void na_plan_traffic(const na_model_config_t *mc, na_plan_kind_t kind, int n_req,
                     int n_batches, int ctx, int n_steps, na_plan_traffic_t *out);

/* Per-step estimate of one configuration. */
typedef struct {
    double t_m;           /* compute of one model slice of one batch (s) */
    double t_net;         /* transfer of one layer's attention traffic of one batch */
    double t_attn;        /* attention of one layer of one batch (on its devices) */
    double t_disk;        /* SSD read of one layer of one batch (0 on DRAM) */
    double t_a;           /* t_net + max(t_attn, t_disk) */
    double t_head;        /* final norm + LM head + sampling per step */
    double step_s;        /* decode step: every request advances one token */
    double bytes_layer;   /* link bytes per layer per step, both directions */
} na_plan_est_t;

/* Estimate mode `kind` for batch B (split into `bif` batches in flight),
 * context ctx, n_nodes storage nodes, KV on SSD when ssd != 0. */
void na_plan_estimate(const na_model_config_t *mc, const na_plan_rates_t *r, na_plan_kind_t kind,
                      int B, int ctx, int n_nodes, int bif, int ssd, na_plan_est_t *out);

/* Suggestion for batch B at context ctx with n_compute compute nodes. */
typedef struct {
    int    bif;           /* batches in flight */
    int    nodes;         /* storage nodes */
    double t_m, t_a;      /* at the suggestion (per slice / per attention) */
    double step_s;        /* predicted decode step */
    double tok_s;         /* predicted decode tokens/s */
} na_plan_suggest_t;
void na_plan_suggest(const na_model_config_t *mc, const na_plan_rates_t *r, int B, int ctx,
                     int n_compute, int ssd, na_plan_suggest_t *out);

/* Read rates from a file of "key value" lines (# comments; keys as the
 * fields above; missing keys keep what *r holds). NA_ERR_IO, NA_ERR_FORMAT
 * naming file:line. */
na_status_t na_plan_rates_load(const char *path, na_plan_rates_t *r);
/* Write rates in the same format. */
void        na_plan_rates_print(const na_plan_rates_t *r, FILE *f);

#endif /* NA_PLAN_H */
