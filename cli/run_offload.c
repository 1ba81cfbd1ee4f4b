/* cli/run_offload.c — the offload half of `nearattn run`: start the storage
 * nodes of a layout on this machine (or connect to a running cluster, or
 * use in-process device slots), run the offload generator
 * (compute-node/offload.h) as the layout's first compute node, print the
 * summary: tokens/s, the time split, bytes on the wire. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/run_offload.h"
#include "common/clock.h"
#include "common/log.h"
#include "cluster/inproc.h"
#include "compute-node/attn_kvfetch.h"
#include "compute-node/replica.h"

#define NA_RUN_READY_MS 30000      /* a storage node must say READY within this */
#define NA_RUN_STOP_MS  5000

struct na_run_cluster {
    pid_t pid[NA_CFG_MAX_NODES];
    int   fd[NA_CFG_MAX_NODES];
    int   n;
};

/* SIGTERM every started node, wait a bounded time, then SIGKILL. */
void na_run_cluster_stop(na_run_cluster_t *c)
{
    double t0 = na_now_s();
    int i, left;

    if (c == NULL)
        return;
    for (i = 0; i < c->n; i++)
        if (c->pid[i] > 0)
            kill(c->pid[i], SIGTERM);
    do {
        left = 0;
        for (i = 0; i < c->n; i++) {
            if (c->pid[i] <= 0)
                continue;
            if (waitpid(c->pid[i], NULL, WNOHANG) == c->pid[i])
                c->pid[i] = 0;
            else
                left++;
        }
        if (left > 0)
            usleep(20000);
    } while (left > 0 && na_now_s() - t0 < NA_RUN_STOP_MS / 1000.0);
    for (i = 0; i < c->n; i++) {
        if (c->pid[i] > 0) {
            kill(c->pid[i], SIGKILL);
            waitpid(c->pid[i], NULL, 0);
        }
        if (c->fd[i] >= 0)
            close(c->fd[i]);
    }
    free(c);
}

/* The last non-empty line of file path into buf ("" if none). */
static void na_ro_log_tail(const char *path, char *buf, size_t len)
{
    char line[512];
    FILE *f = fopen(path, "r");

    buf[0] = '\0';
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] != '\0')
            snprintf(buf, len, "%s", line);
    }
    fclose(f);
}

/* Wait for "READY" on node i's stdout. */
static na_status_t na_run_wait_ready(na_run_cluster_t *c, int i, const char *name,
                                     const char *log)
{
    char buf[512];
    size_t have = 0;
    double t0 = na_now_s();

    while (na_now_s() - t0 < NA_RUN_READY_MS / 1000.0) {
        struct pollfd pf = { c->fd[i], POLLIN, 0 };
        ssize_t n;
        if (poll(&pf, 1, 100) <= 0)
            continue;
        n = read(c->fd[i], buf + have, sizeof(buf) - 1 - have);
        if (n <= 0) {
            char last[512];
            na_ro_log_tail(log, last, sizeof(last));
            return na_err(NA_ERR_PEER, "node %s exited before it was ready: %s (log: %s)",
                          name, last[0] ? last : "no output", log);
        }
        have += (size_t)n;
        buf[have] = '\0';
        if (strstr(buf, "READY") != NULL)
            return NA_OK;
        if (have == sizeof(buf) - 1)
            have = 0;
    }
    return na_err(NA_ERR_TIMEOUT, "node %s did not become ready within %d ms (log: %s)",
                  name, NA_RUN_READY_MS, log);
}

/* fork/exec `nearattn node --config F --name S` for every storage node, and,
 * for rotational pipelining, for compute nodes 1.. (the replicas). */
na_status_t na_run_cluster_start(const na_cfg_t *cfg, const char *cfg_path,
                                 na_run_cluster_t **c_p)
{
    char exe[PATH_MAX];
    const char *tmp = getenv("TMPDIR");
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    na_run_cluster_t *c;
    na_status_t st;
    int j, n_rep = 0;

    if (len <= 0)
        return na_err(NA_ERR_IO, "cannot find the nearattn executable (/proc/self/exe)");
    exe[len] = '\0';
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return na_err(NA_ERR_NOMEM, "run: out of memory");
    *c_p = c;       /* the caller stops what started, also on failure */
    if (cfg->parallel.pipelining == NA_CFG_PIPE_ROTATIONAL && cfg->n_compute > 1)
        n_rep = cfg->n_compute - 1;
    for (j = 0; j < cfg->n_storage + n_rep; j++) {
        const na_cfg_node_t *nd = j < cfg->n_storage ? &cfg->nodes[cfg->n_compute + j]
                                                     : &cfg->nodes[1 + j - cfg->n_storage];
        char log[PATH_MAX];
        int p[2];
        pid_t pid, parent;

        snprintf(log, sizeof(log), "%s/nearattn-run-%s-%s.log", tmp && tmp[0] ? tmp : "/tmp",
                 cfg->cluster.name, nd->name);
        if (pipe(p) != 0)
            return na_err(NA_ERR_IO, "pipe: %s", strerror(errno));
        parent = getpid();
        pid = fork();
        if (pid < 0) {
            close(p[0]);
            close(p[1]);
            return na_err(NA_ERR_IO, "fork: %s", strerror(errno));
        }
        if (pid == 0) {
            int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            /* the nodes this run started end with it, however it ends */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent)
                _exit(1);
            dup2(p[1], 1);
            if (fd >= 0)
                dup2(fd, 2);
            close(p[0]);
            execl(exe, exe, "node", "--config", cfg_path, "--name", nd->name, (char *)NULL);
            _exit(127);
        }
        close(p[1]);
        c->pid[c->n] = pid;
        c->fd[c->n] = p[0];
        c->n++;
        st = na_run_wait_ready(c, c->n - 1, nd->name, log);
        if (st != NA_OK)
            return st;
    }
    return NA_OK;
}

static void na_ro_print_summary(const na_off_stats_t *s, const na_cfg_t *cfg, const char *kind,
                                const char *how)
{
    double dec = s->wall_s - s->prefill_s - s->ship_s;
    double compute = s->compute_s - s->prefill_s - s->ship_s - s->xcache_s;

    fprintf(stderr,
            "%s (%s): %d storage node(s), partition %s, %d batch(es) in flight: "
            "prompt tokens %ld, generated tokens %ld, %.1f tok/s overall, decode %.1f tok/s\n",
            kind, how, cfg->n_storage, na_cfg_partition_name(cfg->parallel.partition),
            (int)cfg->parallel.batches_in_flight, s->gen.prompt_tokens, s->gen.gen_tokens,
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
}

na_status_t na_run_offload(const na_run_offload_args_t *a, na_engine_t *e, na_request_t **reqs,
                           int n, na_off_stats_t *stats)
{
    na_run_cluster_t *cl = NULL;
    na_asvc_t *svc = NULL;
    na_rep_t *rep = NULL;
    na_off_opts_t oo;
    const na_cfg_t *cfg = a->cfg;
    const char *me = cfg->n_compute > 0 ? cfg->nodes[0].name : "c0";
    const char *how;
    na_status_t st;

    if (cfg->parallel.pipelining == NA_CFG_PIPE_ROTATIONAL &&
        (cfg->n_compute < 2 || !strcmp(a->cluster, "inproc")))
        na_log_warn("run: rotational pipelining needs several compute processes (compute "
                    "nodes with ports, not --cluster inproc); this run is one compute node "
                    "and uses the fixed schedule");
    if (a->kvfetch && !strcmp(a->cluster, "inproc")) {
        st = na_err(NA_ERR_INVALID, "--mode kv-fetch needs storage nodes (--cluster start or "
                    "connect), not --cluster inproc");
        goto out_stop;
    }
    if (!strcmp(a->cluster, "inproc")) {
        how = "in-process slots";
        st = na_asvc_inproc_create(cfg, &e->cfg, &svc);
    } else {
        if (!strcmp(a->cluster, "start")) {
            how = "cluster started here";
            st = na_run_cluster_start(cfg, a->config_path, &cl);
            if (st != NA_OK)
                goto out_stop;
        } else {
            how = "connected to a running cluster";
        }
        if (a->kvfetch)
            st = na_asvc_kvfetch_create(cfg, &e->cfg, me, e->kern, &svc);
        else
            st = na_asvc_remote_create(cfg, &e->cfg, me, &svc);
    }
    if (st == NA_OK && cfg->parallel.pipelining == NA_CFG_PIPE_ROTATIONAL &&
        cfg->n_compute > 1 && strcmp(a->cluster, "inproc") != 0)
        st = na_rep_create(cfg, me, &rep);
    if (st != NA_OK)
        goto out_stop;
    memset(&oo, 0, sizeof(oo));
    oo.rep = rep;
    oo.max_batch = a->max_batch > 0 ? a->max_batch : (int)cfg->parallel.max_batch;
    oo.batches_in_flight = (int)cfg->parallel.batches_in_flight;
    oo.stop_ids = a->stop_ids;
    oo.n_stop = a->n_stop;
    oo.xcache = cfg->xcache.enabled;
    oo.xcache_share = cfg->xcache.share > 0 ? cfg->xcache.share : 1.0;
    oo.xcache_host_mb = cfg->xcache.host_mb;
    oo.on_token = a->on_token;
    oo.on_done = a->on_done;
    oo.on_error = a->on_error;
    oo.user = a->user;
    st = na_offload_generate(e, svc, reqs, n, &oo, stats);
    if (st == NA_OK)
        na_ro_print_summary(stats, cfg, a->kvfetch ? "kv-fetch" : "offload", how);
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
out_stop:
    na_rep_destroy(rep);
    na_asvc_destroy(svc);
    na_run_cluster_stop(cl);
    return st;
}
