/* serve/http.h — the OpenAI-compatible HTTP server of `nearattn serve`
 * over one generation front end (serve/gen.h), with libmicrohttpd.
 *
 * Threads. libmicrohttpd runs one thread per connection (its own HTTP
 * parsing, limits and timeouts); those threads never call the engine. The
 * engine is single-threaded: na_srv_run runs it on the calling thread (the
 * "engine thread"), which takes new jobs and cancellations from a queue,
 * calls na_sg_progress in short slices and writes each request's output
 * (stream chunks, or the whole response) into that request's buffer, which
 * its connection thread sends. One lock (the server's) guards the queue and
 * the buffers; a condition variable per request wakes its connection.
 *
 * Routes: POST /v1/completions, POST /v1/chat/completions (stream false or
 * true: server-sent events), GET /v1/models, GET /health, GET /metrics
 * (Prometheus text). Everything else: 404 in OpenAI's error shape.
 *
 * Limits: a body over max_body bytes is refused (413) before it is read,
 * headers over the connection memory limit by libmicrohttpd (431/413); at most
 * max_queue requests are held (queued + running): the next gets 429 with
 * Retry-After; a request that runs past timeout_s is cancelled (504, or an
 * error event in a stream); a client that disconnects (seen by poll on its
 * socket while its request waits or streams) cancels its job, whose KV is
 * then released on the storage nodes; a client that does not read is cut
 * after the connection's idle timeout. Slow clients (serve/http_guard.h): a
 * connection must deliver each complete request (header and body) within
 * request_s, one client address holds at most max_per_ip connections, and
 * the oldest connection still waiting for its request is closed when fewer
 * than NA_SRV_RESERVE connections are left, so /health stays answerable.
 * With an API key, every route but /health needs "Authorization: Bearer
 * KEY" (compared in constant time). */
#ifndef NA_SERVE_HTTP_H
#define NA_SERVE_HTTP_H

#include <signal.h>
#include <stddef.h>

#include "common/status.h"
#include "serve/gen.h"

typedef struct {
    const char *host;            /* bind address (default 127.0.0.1) */
    int         port;            /* 0: any free port (na_srv_port) */
    const char *api_key;         /* NULL: no key */
    int         max_queue;       /* requests held at once (default 64) */
    size_t      max_body;        /* request body bytes (default 1 MiB) */
    size_t      max_header;      /* per-connection memory for headers (default 32 KiB) */
    int         timeout_s;       /* per request (default 600) */
    int         idle_s;          /* a connection without progress is closed (default 60) */
    int         request_s;       /* to deliver a complete request (default 30) */
    int         max_per_ip;      /* connections of one client address (0: max_queue + 8) */
    const char *chat_template;   /* --chat-template NAME, or NULL: the model's */
} na_srv_opts_t;

typedef struct na_srv na_srv_t;

/* Connections: max_queue + NA_SRV_SPARE in all, NA_SRV_RESERVE of them kept
 * free for new clients. */
#define NA_SRV_SPARE   64
#define NA_SRV_RESERVE 16

void        na_srv_opts_default(na_srv_opts_t *o);
/* Start listening (g is borrowed and must only be used by na_srv_run from
 * now on). NA_ERR_INVALID (bad host), NA_ERR_BUSY (cannot bind), NA_ERR_NOMEM. */
na_status_t na_srv_create(na_sg_t *g, const na_srv_opts_t *o, na_srv_t **s_p);
/* The port listened on. */
int         na_srv_port(const na_srv_t *s);
/* Run the engine thread until *stop is set (a signal), then cancel what is
 * held and return. The engine's fatal error otherwise. */
na_status_t na_srv_run(na_srv_t *s, volatile sig_atomic_t *stop);
/* Stop listening (connections still open get their jobs cancelled) and free. */
void        na_srv_destroy(na_srv_t *s);

/* Constant-time equality of a and b (the time depends on their lengths only). */
int         na_srv_key_equal(const char *a, const char *b);

#endif /* NA_SERVE_HTTP_H */
