/* cli/run_offload.c — the offload half of `nearattn run`: set up the
 * cluster of a layout (cluster/setup.h: storage nodes started here, private
 * to this run, a running cluster, or in-process device slots), run the
 * offload engine (compute-node/offload.h) over it as the layout's first
 * compute node until every request ended (or a signal asked to stop), print
 * the summary: tokens/s, the time split, bytes on the wire. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/run_offload.h"
#include "cluster/setup.h"
#include "common/clock.h"
#include "common/log.h"
#include "compute-node/replica.h"

#define NA_RUN_PROGRESS_MS 100     /* between checks of the stop flag */

/* The storage nodes of the run: the layout's, and those that joined it
 * while it ran (announced, or added to the layout file) and served
 * attention; from the service's node table (none for kv-fetch). */
static void na_ro_nodes(na_asvc_t *svc, const na_cfg_t *cfg, char *buf, size_t len)
{
    na_asvc_node_stats_t *ns = calloc(NA_CFG_MAX_NODES, sizeof(*ns));
    int n = ns != NULL ? na_asvc_node_stats(svc, ns, NA_CFG_MAX_NODES) : 0, j, joined = 0;

    for (j = cfg->n_storage; j < n; j++)
        joined += ns[j].attn_calls > 0;
    free(ns);
    if (joined > 0)
        snprintf(buf, len, "%d storage node(s) (%d in the layout, %d joined during the run)",
                 cfg->n_storage + joined, cfg->n_storage, joined);
    else
        snprintf(buf, len, "%d storage node(s)", cfg->n_storage);
}

/* This process's peak resident memory (VmHWM of /proc/self/status), MiB; 0
 * when unknown. With --cluster start / connect the storage nodes are other
 * processes: it is the compute node's own. */
static double na_ro_peak_rss_mib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;

    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (!strncmp(line, "VmHWM:", 6) && sscanf(line + 6, "%lf", &kb) == 1)
            break;
    fclose(f);
    return kb / 1024.0;
}

static void na_ro_print_summary(const na_off_stats_t *s, const na_cfg_t *cfg, const char *kind,
                                const char *how, const char *nodes)
{
    double dec = s->wall_s - s->prefill_s - s->ship_s;
    double compute = s->compute_s - s->prefill_s - s->ship_s - s->xcache_s;
    char re[64] = "", split[160] = "";

    if (s->reprefill_tokens > 0)
        snprintf(re, sizeof(re), " (+ %ld re-prefilled after a lost node)", s->reprefill_tokens);
    if (s->adaptive_batches)
        snprintf(split, sizeof(split), " (adaptive: %ld batch steps merged, %ld split; "
                 "split won %ld of %ld trial%s)", s->merged_steps, s->split_steps,
                 s->split_trials_won, s->split_trials, s->split_trials == 1 ? "" : "s");
    fprintf(stderr,
            "%s (%s): %s, partition %s, %d batch(es) in flight%s: "
            "prompt tokens %ld%s, generated tokens %ld, %.1f tok/s overall, decode %.1f tok/s\n",
            kind, how, nodes, na_cfg_partition_name(cfg->parallel.partition),
            (int)cfg->parallel.batches_in_flight, split, s->gen.prompt_tokens, re,
            s->gen.gen_tokens,
            s->wall_s > 0 ? (double)s->gen.gen_tokens / s->wall_s : 0.0,
            dec > 0 ? (double)s->gen.decode_tokens / dec : 0.0);
    fprintf(stderr,
            "time split: wall %.3f s = prefill compute %.3f + KV shipping %.3f + decode compute "
            "%.3f + x-cache %.3f + sending %.3f + idle (waiting for attention) %.3f; "
            "attention round trips %ld, mean %.3f ms (network + storage attention + disk; "
            "the link's own round trip, a HEARTBEAT ping: %.3f ms)\n",
            s->wall_s, s->prefill_s, s->ship_s, compute, s->xcache_s, s->submit_s, s->idle_s,
            s->attn_calls, s->attn_calls ? 1e3 * s->attn_rt_s / (double)s->attn_calls : 0.0,
            1e3 * s->svc.link_rtt_s);
    if (s->svc.node_parts > 0 && s->attn_calls > 0) {
        /* the nodes of one batch work in parallel: one round trip holds the
         * mean node time of one (batch, node) message */
        double k = (double)s->attn_calls / (double)s->svc.node_parts;
        double node = s->svc.node_s * k, att = s->svc.node_attn_s * k;
        double disk = s->svc.node_disk_s * k, net = s->attn_rt_s - node;
        if (net < 0)
            net = 0;
        fprintf(stderr,
                "time split of the run: compute %.3f s (prefill %.3f, decode %.3f, x-cache "
                "%.3f, sending %.3f, KV shipping %.3f) | attention round trips %.3f s = "
                "network + queueing %.3f + storage attention %.3f + storage disk/other %.3f "
                "(SSD reads, staging, replies; from the storage nodes' counters) | idle %.3f "
                "(the part of the round trips not hidden behind compute)\n",
                s->prefill_s + compute + s->xcache_s + s->submit_s + s->ship_s, s->prefill_s,
                compute, s->xcache_s, s->submit_s, s->ship_s, s->attn_rt_s, net, att, disk,
                s->idle_s);
        /* issue 14's round-trip target: mean round trip <= 2 x (the link's
         * own round trip + the storage node's attention per round trip) */
        if (s->svc.link_rtt_s > 0)
            fprintf(stderr, "round trip: mean %.3f ms = %.2f x (HEARTBEAT ping %.3f ms + storage "
                    "attention %.3f ms per round trip)\n", 1e3 * s->attn_rt_s / (double)s->attn_calls,
                    s->attn_rt_s / (double)s->attn_calls /
                        (s->svc.link_rtt_s + att / (double)s->attn_calls),
                    1e3 * s->svc.link_rtt_s, 1e3 * att / (double)s->attn_calls);
    } else {
        fprintf(stderr, "time split of the run: the storage nodes' own attention and disk "
                "times are not reported by this attention service\n");
    }
    fprintf(stderr,
            "wire: %llu messages / %llu bytes sent, %llu / %llu received; prompt KV shipped "
            "%llu bytes; storage SSD reads %llu bytes; %ld request(s) failed, %ld re-placed "
            "after a lost storage node, %ld via x-cache\n",
            (unsigned long long)s->svc.msgs_sent, (unsigned long long)s->svc.bytes_sent,
            (unsigned long long)s->svc.msgs_recv, (unsigned long long)s->svc.bytes_recv,
            (unsigned long long)s->svc.prefill_bytes, (unsigned long long)s->svc.ssd_bytes_read,
            s->failed, s->recovered, s->xcache_reqs);
    fprintf(stderr, "compute process: peak RSS %.1f MiB, %d prefill steps (chunked prefill: "
            "%s%d prompt tokens a step%s)\n", na_ro_peak_rss_mib(), s->gen.prefill_steps,
            s->prefill_weighted ? "at most " : "", s->prefill_chunk,
            s->prefill_weighted ? ", their cost weighed by position" : "");
    if (s->prefix_hit_tokens > 0 || s->prefix_hit_reqs > 0 || s->n_prefix_nodes > 0) {
        int i;
        fprintf(stderr, "prefix reuse: %ld prompt tokens held by a storage node already "
                "(%ld request(s): their prefill starts after them; %ld waited for a prompt "
                "computing a block they share), %ld prefilled", s->prefix_hit_tokens,
                s->prefix_hit_reqs, s->prefix_waits, s->gen.prompt_tokens);
        for (i = 0; i < s->n_prefix_nodes; i++)
            fprintf(stderr, "%s %s: hit %llu / computed %llu", i == 0 ? ";" : ",",
                    s->prefix_nodes[i].name,
                    (unsigned long long)s->prefix_nodes[i].prefix_hit_tokens,
                    (unsigned long long)s->prefix_nodes[i].prefill_tokens);
        fprintf(stderr, "\n");
    }
    if (s->svc.csd_launches > 0)     /* engine csd: never pass the C model for hardware */
        fprintf(stderr, "csd: %s: %llu kernel launches, %llu KV bytes SSD -> device buffers "
                "(storage nodes' totals)\n", s->svc.csd_noop_slots > 0
                ? "XRT noop + C model (no FPGA: the C kernel ran as its stand-in)"
                : "XRT hardware", (unsigned long long)s->svc.csd_launches,
                (unsigned long long)s->svc.csd_p2p_bytes);
}

/* Submit every request and drive the engine until none is left or *stop. */
static na_status_t na_ro_drive(const na_run_offload_args_t *a, na_engine_t *e,
                               na_cluster_t *cl, na_request_t **reqs, int n,
                               na_off_stats_t *stats)
{
    const na_cfg_t *cfg = na_cluster_cfg(cl);
    double t0 = na_now_s();
    na_off_opts_t oo;
    na_off_t *g;
    na_status_t st;
    int i;

    memset(&oo, 0, sizeof(oo));
    oo.rep = na_cluster_rep(cl);
    oo.max_batch = a->max_batch > 0 ? a->max_batch : (int)cfg->parallel.max_batch;
    oo.batches_in_flight = (int)cfg->parallel.batches_in_flight;
    oo.adaptive_batches = cfg->parallel.adaptive_batches && !a->no_adaptive;
    oo.prefill_chunk = a->prefill_chunk > 0 ? a->prefill_chunk : (int)cfg->parallel.prefill_chunk;
    oo.prefill_weighted = a->prefill_budget > 0 ? a->prefill_budget == 2
                                                : cfg->parallel.prefill_weighted;
    oo.stop_ids = a->stop_ids;
    oo.n_stop = a->n_stop;
    oo.xcache = a->no_xcache ? 0 : cfg->xcache.enabled;
    oo.xcache_share = cfg->xcache.share > 0 ? cfg->xcache.share : 1.0;
    oo.xcache_host_mb = cfg->xcache.host_mb;
    oo.prefix_reuse = cfg->kv.prefix_reuse && !a->no_prefix_reuse;
    oo.on_token = a->on_token;
    oo.on_done = a->on_done;
    oo.on_error = a->on_error;
    oo.user = a->user;
    memset(stats, 0, sizeof(*stats));
    st = na_off_create(e, na_cluster_service(cl), &oo, &g);
    if (st != NA_OK)
        return st;
    for (i = 0; i < n && st == NA_OK; i++)
        st = na_off_submit(g, reqs[i], NULL);
    while (st == NA_OK && na_off_pending(g) > 0) {
        if (a->cluster.stop != NULL && *a->cluster.stop) {
            st = na_err(NA_ERR_CANCELED, "interrupted by signal %d", (int)*a->cluster.stop);
            break;
        }
        st = na_off_progress(g, a->cluster.stop != NULL ? NA_RUN_PROGRESS_MS : -1);
    }
    na_off_stats(g, stats);
    if (g != NULL && oo.prefix_reuse)      /* the storage nodes' own prefix counters */
        stats->n_prefix_nodes = na_asvc_node_stats(na_cluster_service(cl), stats->prefix_nodes,
                                                   NA_OFF_PREFIX_NODES);
    stats->failed += a->failed_before;
    stats->wall_s = na_now_s() - t0;
    na_off_destroy(g);
    return st;
}

na_status_t na_run_offload(const na_run_offload_args_t *a, na_engine_t *e, na_request_t **reqs,
                           int n, na_off_stats_t *stats)
{
    na_cluster_t *cl = NULL;
    const na_cfg_t *cfg;
    na_rep_t *rep;
    na_status_t st;

    st = na_cluster_create(&a->cluster, e, &cl);
    if (st != NA_OK)
        return st;
    cfg = na_cluster_cfg(cl);
    rep = na_cluster_rep(cl);
    st = na_ro_drive(a, e, cl, reqs, n, stats);
    if (st == NA_OK) {
        char nodes[128];
        na_ro_nodes(na_cluster_service(cl), cfg, nodes, sizeof(nodes));
        na_ro_print_summary(stats, cfg, a->cluster.kvfetch ? "kv-fetch" : "offload",
                            na_cluster_how(cl), nodes);
    }
    if (st == NA_OK && rep != NULL) {
        na_rep_stats_t rs;
        na_rep_stats(rep, &rs);
        fprintf(stderr, "rotational: %d compute replicas; %ld batch contexts sent, %ld back, "
                "mean %.3f ms away (the replica's slice + its attention + 2 hops); compute "
                "link %llu bytes sent, %llu received (prompt KV forwarded %llu)\n",
                na_rep_count(rep), stats->ctx_sent, stats->ctx_recv,
                stats->ctx_recv ? 1e3 * stats->ctx_rt_s / (double)stats->ctx_recv : 0.0,
                (unsigned long long)rs.bytes_sent, (unsigned long long)rs.bytes_recv,
                (unsigned long long)rs.prefill_bytes);
    }
    if (st != NA_OK || stats->failed > 0 || stats->recovered > 0)
        na_cluster_keep_logs(cl);        /* what went wrong is in the nodes' logs */
    na_cluster_destroy(cl);
    return st;
}
