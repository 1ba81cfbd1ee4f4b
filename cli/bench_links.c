/* cli/bench_links.c — the links of the comparison sweep and the processes
 * on them (cli/e2e_sweep.h):
 *
 *   shm        loopback, UCX shared memory (transport.tls shm)
 *   tcp        loopback, UCX over TCP (transport.tls tcp)
 *   ns-1gbit   two network namespaces joined by a veth pair, each end shaped
 *   ns-10gbit  with `tc qdisc add dev X root tbf rate R burst 1mb latency 1ms`,
 *              UCX over TCP (otherwise UCX would use shared memory between
 *              namespaces of one machine). Storage nodes run in namespace A,
 *              the compute node (each point process) in namespace B.
 *
 * Namespaces, veth names and the private addresses 10.213.<i>.1/2 exist only
 * inside the namespaces made here; na_link_down (also called from the sweep's
 * signal handler) deletes them: deleting a namespace deletes its veth end and
 * the pair with it. A link that cannot be made is torn down and reported. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/e2e_sweep.h"
#include "cluster/proc.h"
#include "common/clock.h"
#include "common/log.h"

#define LK_READY_MS 30000

static const char *const lk_names[NA_LINK_COUNT] = { "shm", "tcp", "ns-1gbit", "ns-10gbit" };

const char *na_link_name(na_link_kind_t k)
{
    return na_cli_name(lk_names, NA_LINK_COUNT, (int)k);
}

int na_link_parse(const char *s)
{
    return na_cli_lookup(lk_names, NA_LINK_COUNT, s);
}

/* Run a shell command quietly; 0 when it exited 0. */
static int lk_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int lk_sh(const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    int rc;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    strncat(cmd, " >/dev/null 2>&1", sizeof(cmd) - strlen(cmd) - 1);
    rc = system(cmd);
    return rc == 0 ? 0 : -1;
}

void na_link_down(na_link_t *l)
{
    if (l->ns_a[0])
        (void)lk_sh("ip netns del %s", l->ns_a);
    if (l->ns_b[0])
        (void)lk_sh("ip netns del %s", l->ns_b);
    l->up = 0;
}

na_status_t na_link_up(na_link_t *l, na_link_kind_t kind, int idx)
{
    const char *rate;
    int tag = (int)(getpid() % 10000);

    memset(l, 0, sizeof(*l));
    l->kind = kind;
    l->name = na_link_name(kind);
    if (kind == NA_LINK_SHM || kind == NA_LINK_TCP) {
        l->tls = kind == NA_LINK_SHM ? "shm" : "tcp";
        snprintf(l->addr_a, sizeof(l->addr_a), "127.0.0.1");
        snprintf(l->addr_b, sizeof(l->addr_b), "127.0.0.1");
        l->up = 1;
        return NA_OK;
    }
    l->tls = "tcp";
    rate = kind == NA_LINK_NS1G ? "1gbit" : "10gbit";
    l->rate_bps = kind == NA_LINK_NS1G ? 1e9 : 10e9;
    snprintf(l->addr_a, sizeof(l->addr_a), "10.213.%d.1", idx % 250);
    snprintf(l->addr_b, sizeof(l->addr_b), "10.213.%d.2", idx % 250);
    snprintf(l->veth_a, sizeof(l->veth_a), "nacA%d", tag);
    snprintf(l->veth_b, sizeof(l->veth_b), "nacB%d", tag);
    if (getuid() != 0 && geteuid() != 0)
        return na_err(NA_ERR_UNSUPPORTED, "link %s: network namespaces need root", l->name);
    if (lk_sh("command -v ip") != 0 || lk_sh("command -v tc") != 0)
        return na_err(NA_ERR_UNSUPPORTED, "link %s: 'ip' or 'tc' (iproute2) not found", l->name);
    snprintf(l->ns_a, sizeof(l->ns_a), "na_cmp_a%d_%d", idx, tag);
    if (lk_sh("ip netns add %s", l->ns_a) != 0) {
        l->ns_a[0] = '\0';
        return na_err(NA_ERR_UNSUPPORTED, "link %s: cannot create a network namespace "
                      "(ip netns add failed)", l->name);
    }
    snprintf(l->ns_b, sizeof(l->ns_b), "na_cmp_b%d_%d", idx, tag);
    if (lk_sh("ip netns add %s", l->ns_b) != 0) {
        l->ns_b[0] = '\0';
        na_link_down(l);
        return na_err(NA_ERR_UNSUPPORTED, "link %s: cannot create a second network namespace",
                      l->name);
    }
    if (lk_sh("ip link add %s type veth peer name %s", l->veth_a, l->veth_b) != 0 ||
        lk_sh("ip link set %s netns %s", l->veth_a, l->ns_a) != 0 ||
        lk_sh("ip link set %s netns %s", l->veth_b, l->ns_b) != 0 ||
        lk_sh("ip -n %s addr add %s/24 dev %s", l->ns_a, l->addr_a, l->veth_a) != 0 ||
        lk_sh("ip -n %s addr add %s/24 dev %s", l->ns_b, l->addr_b, l->veth_b) != 0 ||
        lk_sh("ip -n %s link set %s up", l->ns_a, l->veth_a) != 0 ||
        lk_sh("ip -n %s link set %s up", l->ns_b, l->veth_b) != 0 ||
        lk_sh("ip -n %s link set lo up", l->ns_a) != 0 ||
        lk_sh("ip -n %s link set lo up", l->ns_b) != 0) {
        (void)lk_sh("ip link del %s", l->veth_a);
        na_link_down(l);
        return na_err(NA_ERR_UNSUPPORTED, "link %s: cannot set up the veth pair between the "
                      "namespaces", l->name);
    }
    if (lk_sh("ip netns exec %s tc qdisc add dev %s root tbf rate %s burst 1mb latency 1ms",
              l->ns_a, l->veth_a, rate) != 0 ||
        lk_sh("ip netns exec %s tc qdisc add dev %s root tbf rate %s burst 1mb latency 1ms",
              l->ns_b, l->veth_b, rate) != 0) {
        na_link_down(l);
        return na_err(NA_ERR_UNSUPPORTED, "link %s: tc tbf qdisc could not be added (sch_tbf "
                      "missing?)", l->name);
    }
    l->up = 1;
    return NA_OK;
}

/* fork/exec argv (cluster/proc.h), in namespace ns when ns[0]; stdout into
 * a pipe whose read end is *fd_p; stderr to errlog (or inherited when NULL).
 * -1 when it could not start. */
static pid_t lk_spawn(const char *ns, char *const *argv, const char *errlog, int *fd_p)
{
    na_proc_opts_t po = { argv, errlog, 0, fd_p, ns };
    pid_t pid;

    return na_proc_spawn(&po, &pid) == NA_OK ? pid : -1;
}

na_status_t na_e2e_nodes_start(const na_link_t *l, const char *exe, const char *cfg_path,
                               int n_nodes, const char *logdir, na_e2e_nodes_t *nd)
{
    int j;

    memset(nd, 0, sizeof(*nd));
    for (j = 0; j < n_nodes && j < 16; j++) {
        char name[16], log[600];
        na_proc_node_t pn = { .exe = exe, .config_path = cfg_path, .name = name };
        na_proc_opts_t po = { NULL, log, 0, &nd->fd[j], l->ns_a };
        long port;
        na_status_t st;

        snprintf(name, sizeof(name), "s%d", j);
        snprintf(log, sizeof(log), "%s/node-%s-s%d.log", logdir, l->name, j);
        st = na_proc_start_node(&pn, &po, &nd->pid[j]);
        if (st != NA_OK)
            return st;
        nd->n = j + 1;
        st = na_proc_wait_ready(nd->fd[j], name, log, LK_READY_MS, NULL, &port);
        if (st != NA_OK)
            return na_err_prefix(st, "link %s: ", l->name);
    }
    return NA_OK;
}

void na_e2e_nodes_stop(na_e2e_nodes_t *nd)
{
    int i;

    na_proc_stop(nd->pid, nd->n, SIGTERM, 5000);
    for (i = 0; i < nd->n; i++)
        if (nd->fd[i] > 0)
            close(nd->fd[i]);
    nd->n = 0;
}

int na_e2e_host_open(na_e2e_host_t *h, const char *kind, const char *name)
{
    char cmd[64];
    ssize_t len;

    snprintf(cmd, sizeof(cmd), "bench %s", kind);
    memset(h, 0, sizeof(*h));
    len = readlink("/proc/self/exe", h->exe, sizeof(h->exe) - 1);
    if (len <= 0)
        return na_cli_fail(cmd, na_err(NA_ERR_IO, "readlink(/proc/self/exe)"));
    h->exe[len] = '\0';
    if (na_cli_bench_dir(cmd, name, h->dir, sizeof(h->dir)) != 0)
        return 1;
    snprintf(h->secret, sizeof(h->secret), "%s/%s.secret", h->dir, name);
    if (na_link_up(&h->link, NA_LINK_SHM, 0) != NA_OK || na_cli_write_secret(h->secret) != NA_OK ||
        na_bench_create(kind, &h->b) != NA_OK) {
        na_cli_fail(cmd, NA_ERR_IO);
        na_e2e_host_close(h, kind);
        return 1;
    }
    return 0;
}

void na_e2e_host_close(na_e2e_host_t *h, const char *kind)
{
    char cmd[64];

    snprintf(cmd, sizeof(cmd), "bench %s", kind);
    na_e2e_nodes_stop(&h->nodes);
    na_link_down(&h->link);
    na_bench_destroy(h->b);
    h->b = NULL;
    na_cli_bench_rmdir(cmd, h->dir);
}

int na_e2e_run_capture(const na_link_t *l, char *const *argv, char *out, size_t cap,
                       int timeout_s)
{
    int fd, status = 0;
    size_t have = 0;
    double t0 = na_now_s();
    pid_t pid = lk_spawn(l != NULL ? l->ns_b : NULL, argv, NULL, &fd);

    if (pid < 0)
        return -1;
    out[0] = '\0';
    for (;;) {
        struct pollfd pf = { fd, POLLIN, 0 };
        ssize_t n;
        if (na_now_s() - t0 > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            close(fd);
            return -1;
        }
        if (poll(&pf, 1, 200) <= 0)
            continue;
        n = read(fd, have + 1 < cap ? out + have : (char[64]){ 0 },
                 have + 1 < cap ? cap - 1 - have : 64);
        if (n <= 0)
            break;
        if (have + 1 < cap) {
            have += (size_t)n;
            out[have] = '\0';
        }
    }
    close(fd);
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
