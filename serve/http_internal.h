/* serve/http_internal.h — state shared by the connection threads
 * (serve/http.c) and the engine thread (serve/http_engine.c). Every field of
 * na_srv_t and na_hreq_t marked [lock] is read and written under s->mu only;
 * [engine] fields belong to the engine thread, [conn] to the connection. */
#ifndef NA_SERVE_HTTP_INTERNAL_H
#define NA_SERVE_HTTP_INTERNAL_H

#include <pthread.h>
#include <stddef.h>

#include "serve/chat.h"
#include "serve/gen.h"
#include "serve/http.h"
#include "serve/http_guard.h"
#include "serve/metrics.h"
#include "serve/oai.h"

enum { NA_HR_QUEUED = 0, NA_HR_RUNNING, NA_HR_DONE, NA_HR_REFUSED };

typedef struct na_hreq {
    struct na_srv  *s;
    /* [conn] the request as read */
    int             route;            /* NA_ROUTE_* (http.c) */
    char           *body;
    size_t          n_body;
    int             too_big;          /* the body passed max_body */
    int             fd;               /* the client's socket (disconnect checks) */
    double          deadline;         /* na_now_s() after which it is cancelled */
    na_oai_req_t    oai;              /* parsed (completions, chat) */
    char            id[48];
    long            created;
    double          t_arrive;
    /* [lock] */
    int             refs;             /* connection + engine */
    int             state;            /* NA_HR_* */
    int             cancel;           /* asked by the connection (gone, timed out) */
    int             timed_out;
    pthread_cond_t  cv;               /* wakes the connection */
    char           *out;              /* stream: SSE bytes; else the response body */
    size_t          n_out, cap_out, pos_out;
    int             http;             /* status of a whole (not streamed) response */
    na_oai_error_t  err;              /* REFUSED: why */
    double          t_last;           /* last text piece (latency histograms) */
    int             n_pieces;
    /* [engine] */
    na_sg_job_t    *job;
    int             cancel_sent;
    int             role_sent;
    struct na_hreq *next_q;           /* [lock] the submit queue */
    struct na_hreq *next_live, *prev_live;
} na_hreq_t;

struct na_srv {
    na_sg_t          *g;
    na_srv_opts_t     o;
    struct MHD_Daemon *d;
    na_hguard_t       guard;          /* slow clients, the connection reserve */
    int               port;
    char              model[128];
    long              created;
    na_chat_t         chat;
    int               chat_ok;
    char              chat_err[512];
    pthread_mutex_t   mu;
    pthread_cond_t    cv_engine;      /* wakes the engine thread */
    pthread_cond_t    cv_stats;
    /* [lock] */
    na_hreq_t        *q_head, *q_tail;
    int               n_held;         /* queued + running */
    int               n_cancel;       /* cancels asked and not yet seen by the engine */
    int               want_stats;
    unsigned long     stats_gen;
    na_sg_stats_t     snap;
    na_hist_t         ttft, itl;
    long              rejected;       /* 429 */
    long              bad;            /* other 4xx */
    long              timeouts;
    unsigned long     next_id;
    int               stopping;
    int               n_nodes;        /* storage nodes of the layout (0: in-process) */
    int               n_alive;        /* of which taking requests, as last seen */
    int               check_nodes;    /* a job failed for a lost node: look again */
    /* [engine] */
    na_hreq_t        *live;
    double            t_nodes;        /* when n_alive was last read */
};

/* Drop one reference of r (lock held); the last frees it. */
void na_hreq_unref(na_hreq_t *r);
/* Append n bytes to r->out (lock held); 0, or -1 out of memory. */
int  na_hreq_put(na_hreq_t *r, const char *s, size_t n);

/* The /metrics page (malloc'd text), from a fresh engine snapshot. */
char *na_srv_metrics_page(struct na_srv *s, size_t *len_p);

/* Refresh s->snap (and n_nodes / n_alive) from the engine thread, waiting
 * up to 5 s; a busy engine leaves the last snapshot. Lock held. */
void  na_srv_snapshot(struct na_srv *s);

/* The cluster's state (lock held): "ok", "degraded" (some storage nodes
 * lost) or "unavailable" (none takes requests). */
const char *na_srv_health(const struct na_srv *s);

#endif /* NA_SERVE_HTTP_INTERNAL_H */
