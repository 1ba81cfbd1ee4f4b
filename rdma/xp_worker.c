/* rdma/xp_worker.c — the node half of the transport and the top of its
 * files: UCP context and worker, create and destroy, progress (the front
 * door, the sweep, owned completions) and blocking waits on the worker's
 * event fd, the owner's receive (na_xp_recv). The message records, the queue,
 * registered buffers and the landing pool are in xp_msg.c; the layers below
 * block through the loop registered here (xp->loop_wait, xp_internal.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "common/clock.h"
#include "common/list.h"
#include "common/log.h"
#include "common/wire.h"
#include "rdma/xp_cfg.h"
#include "rdma/xp_internal.h"

#define XP_SERVICE_NS 20000000ull  /* the front door and a sweep at least this often
                                      (20 ms of the coarse clock) while progress runs */

uint64_t na_xp_now_ns(void)
{
    return na_now_ns();
}

na_xp_errmode_t na_xp_errmode(const na_xp_t *xp)
{
    return xp->opts.errmode;
}

/* Copy and default the options into xp. Fails with NA_ERR_INVALID. */
static na_status_t xp_opts_init(na_xp_t *xp, const na_xp_opts_t *o)
{
    if (o->secret == NULL || o->secret_len == 0)
        return na_err(NA_ERR_INVALID, "transport: a cluster secret is required");
    if (o->tls == NA_XP_TLS_RAW && (o->tls_raw == NULL || o->tls_raw[0] == '\0' ||
                                    strlen(o->tls_raw) >= sizeof(xp->tls_raw)))
        return na_err(NA_ERR_INVALID, "transport: tls 'raw' needs a UCX_TLS string of 1..%zu chars",
                      sizeof(xp->tls_raw) - 1);
    if (o->host != NULL && strlen(o->host) >= sizeof(xp->host))
        return na_err(NA_ERR_INVALID, "transport: host '%s' longer than %zu chars", o->host,
                      sizeof(xp->host) - 1);
    if (o->name != NULL && strlen(o->name) >= sizeof(xp->name))
        return na_err(NA_ERR_INVALID, "transport: node name '%s' longer than %d chars",
                      o->name, NA_XP_NAME_MAX - 1);
    xp->opts = *o;
    snprintf(xp->name, sizeof(xp->name), "%s", o->name && o->name[0] ? o->name : "node");
    xp->opts.name = xp->name;
    if (o->cluster != NULL && (o->cluster[0] == '\0' || strlen(o->cluster) >= sizeof(xp->cluster)))
        return na_err(NA_ERR_INVALID, "transport: cluster name must be 1..%d chars",
                      NA_XP_NAME_MAX - 1);
    snprintf(xp->cluster, sizeof(xp->cluster), "%s", o->cluster ? o->cluster : "nearattn");
    xp->opts.cluster = xp->cluster;
    snprintf(xp->host, sizeof(xp->host), "%s", o->host ? o->host : "");
    xp->opts.host = o->host ? xp->host : NULL;
    if (xp->opts.role == 0)
        xp->opts.role = NA_WIRE_ROLE_TOOL;
    if (o->tls == NA_XP_TLS_RAW) {
        snprintf(xp->tls_raw, sizeof(xp->tls_raw), "%s", o->tls_raw);
        xp->opts.tls_raw = xp->tls_raw;
    } else {
        xp->opts.tls_raw = NULL;
    }
    xp->secret = malloc(o->secret_len);
    if (xp->secret == NULL)
        return na_err(NA_ERR_NOMEM, "transport: out of memory");
    memcpy(xp->secret, o->secret, o->secret_len);
    xp->secret_len = o->secret_len;
    xp->opts.secret = xp->secret;
    if (xp->opts.timeout_ms <= 0)
        xp->opts.timeout_ms = 5000;
    if (xp->opts.max_msg == 0)
        xp->opts.max_msg = (size_t)256 << 20;
    if (xp->opts.spin_us == 0)
        xp->opts.spin_us = 50;
    xp->opts.errmode = na_xp_errmode_resolve(o->tls, o->errmode);
    return NA_OK;
}

/* The name of the network interface that carries host's address (host
 * resolved, e.g. 127.0.0.1 -> "lo"), into ifname. 0 if none does (a
 * wildcard address, a name that does not resolve, another machine's). */
static int xp_host_ifname(const char *host, char *ifname, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    struct ifaddrs *ifa, *i;
    int found = 0;

    if (host == NULL || host[0] == '\0' || na_xp_resolve(host, 0, &ss, &sslen) != NA_OK)
        return 0;
    if (getifaddrs(&ifa) != 0)
        return 0;
    for (i = ifa; i != NULL && !found; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != ss.ss_family)
            continue;
        if (ss.ss_family == AF_INET)
            found = !memcmp(&((struct sockaddr_in *)i->ifa_addr)->sin_addr,
                            &((struct sockaddr_in *)&ss)->sin_addr, sizeof(struct in_addr));
        else if (ss.ss_family == AF_INET6)
            found = !memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
                            &((struct sockaddr_in6 *)&ss)->sin6_addr, sizeof(struct in6_addr));
        if (found)
            snprintf(ifname, len, "%s", i->ifa_name);
    }
    freeifaddrs(ifa);
    return found;
}

/* Raise RLIMIT_NOFILE to its hard limit: a node holds a socket per peer
 * (and UCX a few more). Best effort. */
static void xp_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
        return;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        na_log_debug("transport: cannot raise RLIMIT_NOFILE: %s", strerror(errno));
}

/* Read the UCX configuration, apply the TLS choice, keep UCX's network
 * transports on the interface of opts.host, and create the context.
 * Fails with NA_ERR_TRANSPORT. */
static na_status_t xp_context_create(na_xp_t *xp)
{
    ucp_config_t *cfg;
    ucp_params_t params;
    ucs_status_t us;
    const char *tls = na_xp_tls_ucx(xp->opts.tls, xp->opts.tls_raw);
    char ka[32], ifname[IF_NAMESIZE + 1];

    na_xp_log_setup();
    us = ucp_config_read(NULL, NULL, &cfg);
    if (us != UCS_OK)
        return na_err(NA_ERR_TRANSPORT, "ucp_config_read: %s", ucs_status_string(us));
    if (tls != NULL) {
        us = ucp_config_modify(cfg, "TLS", tls);
        if (us != UCS_OK) {
            ucp_config_release(cfg);
            return na_err(NA_ERR_TRANSPORT, "transport: UCX_TLS='%s' rejected: %s", tls,
                          ucs_status_string(us));
        }
    }
    /* UCX's tcp transport listens on every interface it uses: keep it to the
     * layout host's one (127.0.0.1 -> lo), unless UCX_NET_DEVICES says
     * otherwise (an RDMA device is named there, not by its IP address) */
    if (getenv("UCX_NET_DEVICES") == NULL &&
        xp_host_ifname(xp->opts.host, ifname, sizeof(ifname))) {
        us = ucp_config_modify(cfg, "NET_DEVICES", ifname);
        if (us != UCS_OK)
            na_log_warn("transport: UCX_NET_DEVICES=%s rejected: %s", ifname,
                        ucs_status_string(us));
        else
            na_log_debug("transport: UCX network devices: %s (host %s)", ifname, xp->opts.host);
    }
    /* Peers that vanish without a word (kill -9 over shared memory) are found
     * by UCX keepalive: probe at a third of our wait limit. */
    snprintf(ka, sizeof(ka), "%dms", xp->opts.timeout_ms / 3 > 0 ? xp->opts.timeout_ms / 3 : 1);
    us = ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", ka);
    if (us != UCS_OK)
        na_log_debug("transport: KEEPALIVE_INTERVAL not settable: %s", ucs_status_string(us));
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features   = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.name       = xp->name;
    us = ucp_init(&params, cfg, &xp->ctx);
    ucp_config_release(cfg);
    if (us != UCS_OK)
        return na_err(NA_ERR_TRANSPORT, "ucp_init (tls %s): %s", tls ? tls : "auto",
                      ucs_status_string(us));
    return NA_OK;
}

/* Records a node holds at once in steady state, made at create so that a
 * burst after warm-up does not reach the heap (best effort: the free lists
 * grow on demand anyway). */
#define XP_MSGS_START 64
#define XP_OPS_START  32

static int xp_wait(na_xp_t *xp, int (*done)(void *), void *arg, uint64_t deadline_ns,
                   int timeout_ms);

static void xp_recs_prefill(na_xp_t *xp)
{
    NA_FREELIST_FILL(xp->msg_free, xp->msg_free_n, na_xp_msg_t, XP_MSGS_START, next);
    NA_FREELIST_FILL(xp->op_free, xp->op_free_n, na_xp_op_t, XP_OPS_START, next);
}

na_status_t na_xp_create(const na_xp_opts_t *opts, na_xp_t **xp_p)
{
    ucp_worker_params_t wp;
    ucs_status_t us;
    na_status_t st;
    na_xp_t *xp;

    if (opts == NULL || xp_p == NULL)
        return na_err(NA_ERR_INVALID, "na_xp_create: NULL argument");
    xp = calloc(1, sizeof(*xp));
    if (xp == NULL)
        return na_err(NA_ERR_NOMEM, "transport: out of memory");
    xp->efd = -1;
    xp->lfd = -1;
    xp->loop_progress = na_xp_progress;  /* the loop, for the layers below (xp_internal.h) */
    xp->loop_wait = xp_wait;
    xp->rl_accept.burst = 1;       /* accept() failures: ~1 line/s with a count */
    xp->rl_drop.burst = 10;        /* dropped peers: a few at once, then ~1/s */
    xp_raise_nofile();
    st = xp_opts_init(xp, opts);
    if (st != NA_OK)
        goto err_free;
    st = xp_context_create(xp);
    if (st != NA_OK)
        goto err_free;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    wp.events      = UCP_WAKEUP_RX | UCP_WAKEUP_TX | UCP_WAKEUP_AMO | UCP_WAKEUP_RMA;
    us = ucp_worker_create(xp->ctx, &wp, &xp->worker);
    if (us != UCS_OK) {
        st = na_err(NA_ERR_TRANSPORT, "ucp_worker_create: %s", ucs_status_string(us));
        goto err_cleanup_context;
    }
    us = ucp_worker_get_efd(xp->worker, &xp->efd);
    if (us != UCS_OK) {
        st = na_err(NA_ERR_TRANSPORT, "ucp_worker_get_efd: %s", ucs_status_string(us));
        goto err_destroy_worker;
    }
    us = ucp_worker_get_address(xp->worker, &xp->waddr, &xp->waddr_len);
    if (us != UCS_OK) {
        st = na_err(NA_ERR_TRANSPORT, "ucp_worker_get_address: %s", ucs_status_string(us));
        goto err_destroy_worker;
    }
    if (xp->waddr_len > NA_XP_ADDR_MAX) {
        st = na_err(NA_ERR_TRANSPORT, "transport: UCX worker address of %zu bytes over the "
                    "%d-byte limit", xp->waddr_len, NA_XP_ADDR_MAX);
        goto err_release_address;
    }
    st = na_xp_ep_setup(xp);
    if (st != NA_OK)
        goto err_release_address;
    xp_recs_prefill(xp);
    *xp_p = xp;
    return NA_OK;

err_release_address:
    ucp_worker_release_address(xp->worker, xp->waddr);
err_destroy_worker:
    ucp_worker_destroy(xp->worker);
err_cleanup_context:
    ucp_cleanup(xp->ctx);
err_free:
    free(xp->secret);
    free(xp);
    return st;
}

/* Workers (and contexts) not destroyed because requests of theirs never
 * finished (na_xp_destroy): kept here until the process exits. */
#define XP_GRAVEYARD 16
static struct { ucp_worker_h worker; ucp_context_h ctx; } xp_graveyard[XP_GRAVEYARD];
static int xp_graveyard_n;

#if defined(__SANITIZE_ADDRESS__)
/* The worker and context above stay reachable, but UCX objects they no longer
 * point to (a closed endpoint's lanes, the stuck requests) are reported by
 * LeakSanitizer at exit: allocations made inside UCX's own libraries are not
 * ours to free. Seen in test_transport_kill-shm (ASan CI run: "1 UCX
 * request(s) ... never finished", 1092 bytes in libucs/libuct, exit 1). Every
 * program that links the transport links this file. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libucs.so\nleak:libuct.so\nleak:libucp.so\n";
}
#endif

void na_xp_destroy(na_xp_t *xp)
{
    if (xp == NULL)
        return;
    na_xp_door_unlisten(xp);
    na_xp_ep_close_all(xp);
    na_xp_owned_drop_all(xp);
    /* Drop what the owner never took; pending payloads are gone with the eps.
     * servicing = 1 keeps endpoint records alive until freed below. */
    xp->servicing = 1;
    while (xp->q_head != NULL) {
        na_xp_msg_t *m = xp->q_head;
        xp->q_head = m->next;
        m->ready = 1;
        na_xp_msg_release(xp, m);
    }
    na_xp_ep_free_all(xp);
    na_xp_recs_drain(xp);
    na_xp_pool_drain(xp);
    ucp_worker_release_address(xp->worker, xp->waddr);
    if (xp->stuck == 0 || xp_graveyard_n == XP_GRAVEYARD) {
        ucp_worker_destroy(xp->worker);
        ucp_cleanup(xp->ctx);
    } else {        /* see na_xp_req_drop: no abort inside UCX on the way out */
        na_log_info("transport: %d UCX request(s) to peers that stopped answering never "
                    "finished; the UCX worker is left to the process exit", xp->stuck);
        xp_graveyard[xp_graveyard_n].worker = xp->worker;     /* still reachable */
        xp_graveyard[xp_graveyard_n++].ctx = xp->ctx;
    }
    if (xp->secret != NULL)
        memset(xp->secret, 0, xp->secret_len);
    free(xp->secret);
    free(xp->pfd);
    free(xp->pfd_ep);
    free(xp);
}

/* Handle work that cannot run inside UCX callbacks: the listener and the
 * TCP sockets (handshakes, liveness), failed endpoints. Not re-entrant
 * (guarded). */
static void xp_service(na_xp_t *xp)
{
    uint64_t now;

    if (xp->servicing)
        return;
    xp->servicing = 1;
    na_xp_door_service(xp);
    /* Sweeps read the clock; when nothing asked for one, run one every 256
     * calls or XP_SERVICE_NS, whichever comes first. */
    now = na_xp_coarse_ns();
    if (xp->sweep_due || (xp->svc_count & 255u) == 0 || now >= xp->svc_next_ns) {
        xp->sweep_due = 0;
        if (xp->inflight != NULL)
            na_xp_owned_check(xp, na_xp_now_ns());
        na_xp_ep_sweep(xp);
    }
    xp->svc_next_ns = now + XP_SERVICE_NS;
    xp->servicing = 0;
}

int na_xp_progress(na_xp_t *xp)
{
    /* one pass: each pass may cost a syscall per tcp interface (epoll), and
     * the waits call us in a loop anyway */
    int n = (int)ucp_worker_progress(xp->worker);
    if (xp->cmpl_due)
        na_xp_owned_reap(xp);          /* owned sends UCX completed */
    /* the busy-poll fast path: nothing to service on most turns. The pace is
     * 1 call in 256 or XP_SERVICE_NS of the coarse clock (a vDSO read, no
     * syscall), whichever comes first: a caller that polls seldom (an idle
     * server, 20 calls a second) must still answer the front door (a node
     * announcing itself, a handshake) and notice lost peers within a fraction
     * of a second, not after 256 calls (13 s). */
    if (!xp->sweep_due && (++xp->svc_count & 255u) != 0 && na_xp_coarse_ns() < xp->svc_next_ns)
        return n;
    xp_service(xp);
    return n;
}

/* Sleep on the worker's event fd, the listener and the TCP sockets until
 * something happens or deadline. */
static void xp_sleep(na_xp_t *xp, uint64_t deadline_ns)
{
    uint64_t now = na_xp_now_ns();
    int ms;

    if (now >= deadline_ns)
        return;
    if (ucp_worker_arm(xp->worker) == UCS_ERR_BUSY)
        return;                       /* events pending: progress again */
    ms = (int)((deadline_ns - now + 999999) / 1000000);
    if (ms > 100)
        ms = 100;                     /* re-check sweeps now and then */
    na_xp_door_pollset(xp);
    if (xp->pfd_n > 0)
        (void)poll(xp->pfd, (nfds_t)xp->pfd_n, ms);
}

/* Progress until done(arg), or until the absolute deadline_ns (when not 0)
 * or timeout_ms after the first look at the clock. The clock is costly in
 * some VMs, so it is read only every 16th turn while spinning (every turn
 * when told never to spin), and not at all when done() comes first. */
static int xp_wait(na_xp_t *xp, int (*done)(void *), void *arg, uint64_t deadline_ns,
                   int timeout_ms)
{
    uint64_t spin_until = 0;
    unsigned spins = 0;

    for (;;) {
        uint64_t now;
        int n = na_xp_progress(xp);
        if (done(arg))
            return 1;
        /* while spinning the clock is read every 64th turn (a turn is a
         * worker progress, well under a microsecond when idle) */
        if ((++spins & 63u) != 0 && xp->opts.spin_us >= 0)
            continue;
        now = na_xp_now_ns();
        if (spin_until == 0) {
            spin_until = now + (xp->opts.spin_us > 0 ? (uint64_t)xp->opts.spin_us * 1000ull : 0);
            if (deadline_ns == 0)
                deadline_ns = now + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000ull;
        }
        if (now >= deadline_ns)
            return 0;
        if (n > 0 || now < spin_until)
            continue;
        xp_sleep(xp, deadline_ns);
        xp->sweep_due = 1;
    }
}

/* Find the next deliverable message: the first ready entry whose endpoint
 * has no earlier entry still arriving (rendezvous in progress). Order is kept
 * per endpoint, and a peer whose large message stalls or dies never holds up
 * the others. Entries whose payload failed are dropped on the way (the owner
 * hears of the peer through NA_XP_EV_LOST), and so are those of an endpoint
 * the owner never got (a failed connect). Sets xp->q_pick / q_pick_prev. */
static int xp_queue_ready(void *arg)
{
    na_xp_t *xp = arg;
    na_xp_ep_t *blocked[32];
    na_xp_msg_t *m, *prev = NULL, *next;
    int nb = 0, i;

    for (m = xp->q_head; m != NULL; m = next) {
        next = m->next;
        if (m->ready < 0 || (m->ready > 0 && m->ep != NULL && m->ep->discard)) {
            /* unlink and drop */
            if (prev != NULL)
                prev->next = next;
            else
                xp->q_head = next;
            if (xp->q_tail == m)
                xp->q_tail = prev;
            na_xp_msg_release(xp, m);
            continue;
        }
        for (i = 0; i < nb && blocked[i] != m->ep; i++)
            ;
        if (m->kind == NA_XP_EV_LOST)
            i = nb;              /* a loss is told even if a payload is stuck */
        if (i == nb) {
            if (m->ready > 0) {
                xp->q_pick = m;
                xp->q_pick_prev = prev;
                return 1;
            }
            if (nb == (int)(sizeof(blocked) / sizeof(blocked[0])))
                return 0;                        /* many arriving at once: wait */
            blocked[nb++] = m->ep;
        }
        prev = m;
    }
    return 0;
}

na_status_t na_xp_recv(na_xp_t *xp, int timeout_ms, na_xp_msg_t **msg_p)
{
    na_xp_msg_t *m;

    if (!xp_wait(xp, xp_queue_ready, xp, 0, timeout_ms < 0 ? xp->opts.timeout_ms : timeout_ms))
        return NA_ERR_TIMEOUT;
    m = xp->q_pick;
    if (xp->q_pick_prev != NULL)
        xp->q_pick_prev->next = m->next;
    else
        xp->q_head = m->next;
    if (xp->q_tail == m)
        xp->q_tail = xp->q_pick_prev;
    m->next = NULL;
    xp->q_pick = xp->q_pick_prev = NULL;
    *msg_p = m;
    return NA_OK;
}

