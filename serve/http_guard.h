/* serve/http_guard.h — the connection guard of the HTTP server: a bound on
 * the time a connection takes to deliver a complete request, and a reserve
 * of free connections, so that clients that trickle bytes (slowloris) can
 * neither hold connections for ever nor use them all up.
 *
 * libmicrohttpd's own idle timeout starts again at every byte received, so
 * one header byte every few seconds keeps a connection open; its connection
 * limit is global. The guard tracks every connection (libmicrohttpd's
 * connection notifications) and:
 *   - closes (shutdown of its socket) a connection that has not delivered a
 *     complete request, header and body, within request_s of its opening or
 *     of the end of its previous request (a thread sweeps every 250 ms);
 *   - when a new connection leaves fewer than `reserve` free of `limit`,
 *     closes a connection still waiting for its request: the oldest of the
 *     address that holds the most connections, so that a flood loses its
 *     own connections first and a new client (a /health probe, still
 *     sending its request) always finds room and keeps it.
 * The per-address cap is libmicrohttpd's (MHD_OPTION_PER_IP_CONNECTION_LIMIT).
 * A connection whose request is complete (being answered) is never cut by
 * the guard: the request timeout and the idle timeout rule it. */
#ifndef NA_SERVE_HTTP_GUARD_H
#define NA_SERVE_HTTP_GUARD_H

#include <pthread.h>

#include <microhttpd.h>

#include "common/status.h"

typedef struct na_hconn na_hconn_t;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    pthread_t       thread;
    int             started;
    int             stop;          /* [mu] */
    na_hconn_t     *head, *tail;   /* [mu] open connections, oldest first */
    int             n;             /* [mu] open connections */
    int             limit;         /* the server's connection limit */
    int             reserve;       /* kept free for new connections */
    double          request_s;     /* to deliver one complete request */
    long            cut_slow;      /* [mu] closed: no complete request in time */
    long            cut_reserve;   /* [mu] closed to keep the reserve */
    double          t_logged;      /* [mu] last warning (one a minute at most) */
} na_hguard_t;

/* Start the sweep thread. limit > reserve >= 1, request_s > 0. */
na_status_t na_hguard_start(na_hguard_t *g, int limit, int reserve, double request_s);
/* Stop the thread (after MHD_stop_daemon: no connection is left). */
void        na_hguard_stop(na_hguard_t *g);
/* The MHD_OPTION_NOTIFY_CONNECTION callback (cls: the guard). */
void        na_hguard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                             enum MHD_ConnectionNotificationCode code);
/* c's request is complete and handled (busy = 1): no deadline; or it ended
 * (busy = 0): the next request's time starts now. */
void        na_hguard_busy(na_hguard_t *g, struct MHD_Connection *c, int busy);
/* The counters (for /metrics). */
void        na_hguard_counts(na_hguard_t *g, long *cut_slow, long *cut_reserve, int *open);

#endif /* NA_SERVE_HTTP_GUARD_H */
