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
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/e2e_sweep.h"
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

/* fork/exec argv, in namespace ns when ns[0]; stdout into a pipe whose read
 * end is *fd_p; stderr to errlog (or inherited when NULL). */
static pid_t lk_spawn(const char *ns, char *const *argv, const char *errlog, int *fd_p)
{
    int p[2];
    pid_t pid;

    if (pipe(p) != 0)
        return -1;
    pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        char *nv[64];
        int i, k = 0;
        if (errlog != NULL) {
            int fd = open(errlog, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd >= 0)
                dup2(fd, 2);
        }
        dup2(p[1], 1);
        close(p[0]);
        if (ns != NULL && ns[0]) {
            nv[k++] = "ip";
            nv[k++] = "netns";
            nv[k++] = "exec";
            nv[k++] = (char *)ns;
        }
        for (i = 0; argv[i] != NULL && k < 63; i++)
            nv[k++] = argv[i];
        nv[k] = NULL;
        execvp(nv[0], nv);
        _exit(127);
    }
    close(p[1]);
    *fd_p = p[0];
    return pid;
}

na_status_t na_e2e_nodes_start(const na_link_t *l, const char *exe, const char *cfg_path,
                               int n_nodes, const char *logdir, na_e2e_nodes_t *nd)
{
    int j;

    memset(nd, 0, sizeof(*nd));
    for (j = 0; j < n_nodes && j < 16; j++) {
        char name[16], log[600], buf[512];
        char *argv[] = { (char *)exe, "node", "--config", (char *)cfg_path, "--name", name, NULL };
        size_t have = 0;
        double t0 = na_now_s();
        int ready = 0;

        snprintf(name, sizeof(name), "s%d", j);
        snprintf(log, sizeof(log), "%s/node-%s-s%d.log", logdir, l->name, j);
        nd->pid[j] = lk_spawn(l->ns_a, argv, log, &nd->fd[j]);
        if (nd->pid[j] < 0)
            return na_err(NA_ERR_IO, "fork: %s", strerror(errno));
        nd->n = j + 1;
        while (!ready && na_now_s() - t0 < LK_READY_MS / 1000.0) {
            struct pollfd pf = { nd->fd[j], POLLIN, 0 };
            ssize_t n;
            if (poll(&pf, 1, 100) <= 0)
                continue;
            n = read(nd->fd[j], buf + have, sizeof(buf) - 1 - have);
            if (n <= 0)
                return na_err(NA_ERR_PEER, "storage node s%d on link %s exited before it was "
                              "ready (log %s)", j, l->name, log);
            have += (size_t)n;
            buf[have] = '\0';
            ready = strstr(buf, "READY") != NULL;
            if (have == sizeof(buf) - 1)
                have = 0;
        }
        if (!ready)
            return na_err(NA_ERR_TIMEOUT, "storage node s%d on link %s not ready within %d ms "
                          "(log %s)", j, l->name, LK_READY_MS, log);
    }
    return NA_OK;
}

void na_e2e_nodes_stop(na_e2e_nodes_t *nd)
{
    double t0 = na_now_s();
    int i, left;

    for (i = 0; i < nd->n; i++)
        if (nd->pid[i] > 0)
            kill(nd->pid[i], SIGTERM);
    do {
        left = 0;
        for (i = 0; i < nd->n; i++) {
            if (nd->pid[i] <= 0)
                continue;
            if (waitpid(nd->pid[i], NULL, WNOHANG) == nd->pid[i])
                nd->pid[i] = 0;
            else
                left++;
        }
        if (left)
            usleep(20000);
    } while (left && na_now_s() - t0 < 5.0);
    for (i = 0; i < nd->n; i++) {
        if (nd->pid[i] > 0) {
            kill(nd->pid[i], SIGKILL);
            waitpid(nd->pid[i], NULL, 0);
        }
        if (nd->fd[i] > 0)
            close(nd->fd[i]);
    }
    nd->n = 0;
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
