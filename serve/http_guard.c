/* serve/http_guard.c — the connection guard (see serve/http_guard.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include "common/clock.h"
#include "common/list.h"
#include "common/log.h"
#include "serve/http_guard.h"

#define NA_HGUARD_SWEEP_MS 250

struct na_hconn {
    int              fd;
    uint64_t         addr;        /* the client's address (IPv4, or a hash of IPv6) */
    int              busy;        /* its request is complete and being answered */
    int              cut;         /* shut down by the guard */
    double           since;       /* when the time of its request started */
    struct na_hconn *prev, *next;
};

/* Shut c down (lock held): libmicrohttpd's thread for it sees the end of
 * the stream and closes it. Its fd is still open: the CLOSED notification,
 * which unlinks c under the same lock, comes before libmicrohttpd closes it. */
static void hg_cut(na_hguard_t *g, na_hconn_t *c, int slow)
{
    double now = na_now_s();

    c->cut = 1;
    if (c->fd >= 0)
        (void)shutdown(c->fd, SHUT_RDWR);
    if (slow)
        g->cut_slow++;
    else
        g->cut_reserve++;
    if (now - g->t_logged >= 60.0) {
        g->t_logged = now;
        na_log_warn("serve: closing connections that send no complete request in time "
                    "(%ld so far past --request-timeout %.0f s, %ld to keep %d of %d "
                    "connections free)", g->cut_slow, g->request_s, g->cut_reserve,
                    g->reserve, g->limit);
    }
}

static void *hg_sweep(void *arg)
{
    na_hguard_t *g = arg;
    struct timespec ts;
    na_hconn_t *c;

    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        double now = na_now_s();
        for (c = g->head; c != NULL; c = c->next)
            if (!c->busy && !c->cut && now - c->since > g->request_s)
                hg_cut(g, c, 1);
        ts = na_cond_deadline((uint64_t)NA_HGUARD_SWEEP_MS * 1000u);
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

na_status_t na_hguard_start(na_hguard_t *g, int limit, int reserve, double request_s)
{
    int e;

    memset(g, 0, sizeof(*g));
    if (reserve < 1 || limit <= reserve || !(request_s > 0))
        return na_err(NA_ERR_INVALID, "serve: connection guard: limit %d, reserve %d, "
                      "request timeout %g s", limit, reserve, request_s);
    g->limit = limit;
    g->reserve = reserve;
    g->request_s = request_s;
    g->t_logged = -1e9;
    pthread_mutex_init(&g->mu, NULL);
    na_cond_init_mono(&g->cv);
    e = pthread_create(&g->thread, NULL, hg_sweep, g);
    if (e != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        return na_err(NA_ERR_IO, "serve: pthread_create: %s", strerror(e));
    }
    g->started = 1;
    return NA_OK;
}

void na_hguard_stop(na_hguard_t *g)
{
    na_hconn_t *c, *next;

    if (!g->started)
        return;
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    for (c = g->head; c != NULL; c = next) {     /* none after MHD_stop_daemon */
        next = c->next;
        free(c);
    }
    g->head = g->tail = NULL;
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    g->started = 0;
}

/* The client address of mc as one number: IPv4's 32 bits, or a hash of an
 * IPv6 address (0: unknown). */
static uint64_t hg_addr(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci != NULL ? ci->client_addr : NULL;
    uint64_t h = 1469598103934665603ull;
    size_t i;

    if (sa == NULL)
        return 0;
    if (sa->sa_family == AF_INET)
        return 1u + (uint64_t)((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr;
    if (sa->sa_family == AF_INET6) {
        const uint8_t *b = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
        for (i = 0; i < 16; i++)
            h = (h ^ b[i]) * 1099511628211ull;
        return h | (1ull << 63);
    }
    return 0;
}

/* The connection to close to keep the reserve (lock held), other than the
 * new one c: of those still waiting for their request, the oldest of the
 * address that holds the most connections. A flood from a few addresses
 * thus loses its own connections first, and a client with one connection
 * (a health probe, a user) keeps its own while it sends its request
 * (which may take a few ms); NULL when none waits. O(n^2) over the
 * connection limit, on connection set-up only. */
static na_hconn_t *hg_victim(na_hguard_t *g, const na_hconn_t *c)
{
    na_hconn_t *o, *p, *best = NULL;
    int best_n = 0;

    for (o = g->head; o != NULL; o = o->next) {
        int n = 0;
        if (o == c || o->busy || o->cut)
            continue;
        for (p = g->head; p != NULL; p = p->next)
            if (!p->cut && p->addr == o->addr)
                n++;
        if (n > best_n) {
            best = o;
            best_n = n;
        }
    }
    return best;
}

void na_hguard_notify(void *cls, struct MHD_Connection *mc, void **socket_context,
                      enum MHD_ConnectionNotificationCode code)
{
    na_hguard_t *g = cls;
    na_hconn_t *c = *socket_context, *o;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        c = calloc(1, sizeof(*c));
        if (c == NULL)
            return;                    /* untracked: the idle timeout still holds */
        c->fd = ci != NULL ? ci->connect_fd : -1;
        c->addr = hg_addr(mc);
        c->since = na_now_s();
        pthread_mutex_lock(&g->mu);
        NA_LIST_APPEND(g->head, g->tail, c, prev, next);
        g->n++;
        if (g->n > g->limit - g->reserve && (o = hg_victim(g, c)) != NULL)
            hg_cut(g, o, 0);
        pthread_mutex_unlock(&g->mu);
        *socket_context = c;
        return;
    }
    if (c == NULL)
        return;
    pthread_mutex_lock(&g->mu);
    NA_LIST_UNLINK_TAIL(g->head, g->tail, c, prev, next);
    g->n--;
    pthread_mutex_unlock(&g->mu);
    *socket_context = NULL;
    free(c);
}

void na_hguard_busy(na_hguard_t *g, struct MHD_Connection *mc, int busy)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    na_hconn_t *c = ci != NULL ? ci->socket_context : NULL;

    if (c == NULL)
        return;
    pthread_mutex_lock(&g->mu);
    c->busy = busy;
    if (!busy)
        c->since = na_now_s();
    pthread_mutex_unlock(&g->mu);
}

void na_hguard_counts(na_hguard_t *g, long *cut_slow, long *cut_reserve, int *open)
{
    pthread_mutex_lock(&g->mu);
    *cut_slow = g->cut_slow;
    *cut_reserve = g->cut_reserve;
    *open = g->n;
    pthread_mutex_unlock(&g->mu);
}
