/* cli/e2e_sweep.h — the comparison sweep of `nearattn bench e2e --sweep`
 * (Lamina / INF2 style; docs/benchmarks.md):
 *
 *   cli/bench_point.c  one measured point in its own process (`--point`): a
 *                      compute node on one link, one mode, batch, context;
 *                      also the link probe (bulk KV transfer over the link);
 *                      na_e2e_point_run, how a driver runs one
 *   cli/bench_sweep.c  the driver: links x storage nodes x modes x batch x
 *                      context, table + JSON, predicted beside measured
 *   cli/bench_links.c  the links: loopback shm / tcp, and two network
 *                      namespaces joined by a veth shaped with tc tbf; the
 *                      storage-node processes on them; the peers; the
 *                      host (na_e2e_host_t) of the drivers bench capacity
 *                      and bench longctx
 *   cli/plot.c         gnuplot PNGs beside the JSON */
#ifndef NA_CLI_E2E_SWEEP_H
#define NA_CLI_E2E_SWEEP_H

#include <limits.h>
#include <stdio.h>
#include <sys/types.h>

#include "common/bench.h"
#include "common/status.h"

/* The modes, in the order the tables list them. */
typedef enum {
    NA_E2E_MONO = 0,        /* monolithic: KV and attention on the compute node */
    NA_E2E_KVFETCH,         /* FlexGen-style: KV on storage, fetched every step */
    NA_E2E_OFF,             /* attention near storage, write-through (spill 1), 1 batch */
    NA_E2E_OFF_WB,          /* + delayed writeback (spill NA_E2E_SPILL_WB) */
    NA_E2E_OFF_WB_PIPE,     /* + 2 batches in flight */
    NA_E2E_OFF_WB_PIPE_XC,  /* + X-cache for half of the requests (MHA) */
    NA_E2E_N_MODES
} na_e2e_mode_t;

#define NA_E2E_SPILL_WB 8

const char *na_e2e_mode_name(na_e2e_mode_t m);
/* -1 when s names no mode. */
int         na_e2e_mode_parse(const char *s);

/* One measured point, as `--point` prints it on one line ("POINT k=v ..."). */
typedef struct {
    int    mode, batch, ctx, nodes, new_tokens;
    double tok_s;            /* decode tokens/s */
    double step_s;           /* mean decode step (one token of every request of a batch) */
    double compute_s, net_s, attn_s, disk_s, idle_s;   /* per step */
    double bytes_out, bytes_in;          /* measured by the transport, per layer per step */
    double an_out, an_in;                /* analytic, per layer per step */
    double ssd_bytes;                    /* storage SSD bytes read per step */
    double tm, ta;                       /* mean compute slice, mean attention round trip */
    double rss;                          /* the point process's peak resident bytes */
    double rss_dec;                      /* its resident bytes when decode started */
    double ttft;                         /* from the start of generation to the first
                                            request's first token, s (bench longctx) */
    double load1;                        /* 1-min load average as it ended (the sweep
                                            sets it; -1 unknown), in table, JSON, plots */
    int    ok;
} na_e2e_point_t;

int  na_cli_e2e_point(int argc, char **argv);       /* cli/bench_point.c */
int  na_cli_e2e_sweep(int argc, char **argv);       /* cli/bench_sweep.c */
int  na_cli_e2e_peers(int argc, char **argv);       /* cli/bench_peer.c */
/* Parse a "POINT ..." line into p; 0 ok, -1 not a point line. */
int  na_e2e_point_parse(const char *line, na_e2e_point_t *p);

/* ---- links and processes (cli/bench_links.c) ------------------------------ */
typedef enum { NA_LINK_SHM = 0, NA_LINK_TCP, NA_LINK_NS1G, NA_LINK_NS10G, NA_LINK_COUNT } na_link_kind_t;

typedef struct {
    na_link_kind_t kind;
    const char    *name;       /* "shm", "tcp", "ns-1gbit", "ns-10gbit" */
    char           ns_a[32];   /* storage namespace ("" for loopback) */
    char           ns_b[32];   /* compute namespace */
    char           veth_a[16], veth_b[16];
    char           addr_a[32], addr_b[32];   /* storage / compute address */
    const char    *tls;        /* layout transport.tls */
    double         rate_bps;   /* tc tbf rate, bits/s (0 = not shaped) */
    int            up;
} na_link_t;

const char *na_link_name(na_link_kind_t k);
/* -1 when s names no link. */
int         na_link_parse(const char *s);
/* Bring the link up (namespaces, veth, addresses, tbf). On failure the link
 * is torn down again and the error says why (the sweep skips it). */
na_status_t na_link_up(na_link_t *l, na_link_kind_t kind, int idx);
/* Remove what na_link_up made (also safe on a half-made link). */
void        na_link_down(na_link_t *l);

/* Storage-node processes of a layout, started in the link's storage
 * namespace; each waited for until READY. */
typedef struct {
    pid_t pid[16];
    int   fd[16];
    int   n;
} na_e2e_nodes_t;
na_status_t na_e2e_nodes_start(const na_link_t *l, const char *exe, const char *cfg_path,
                               int n_nodes, const char *logdir, na_e2e_nodes_t *nodes);
void        na_e2e_nodes_stop(na_e2e_nodes_t *nodes);

/* What a bench kind that runs `bench e2e --point` processes against storage
 * nodes started here holds (bench capacity, bench longctx): this executable,
 * a private directory (its layouts, NAME.secret, the model, the nodes' KV
 * and logs), the shm link, the nodes, the kind's table. */
typedef struct {
    char           exe[PATH_MAX];
    char           dir[PATH_MAX - 64];
    char           secret[PATH_MAX];     /* dir/NAME.secret */
    na_link_t      link;
    na_e2e_nodes_t nodes;
    na_bench_t    *b;
} na_e2e_host_t;
/* Set up h for `bench <kind>`: the directory $TMPDIR/nearattn-NAME-XXXXXX,
 * a fresh secret NAME.secret in it, the shm link, the table named kind.
 * 0; or 1 after "nearattn bench <kind>: ..." on stderr, with what was made
 * undone. */
int         na_e2e_host_open(na_e2e_host_t *h, const char *kind, const char *name);
/* Stop the nodes, take the link down, destroy the table, remove the
 * directory ("nearattn bench <kind>: cannot remove DIR" if not). */
void        na_e2e_host_close(na_e2e_host_t *h, const char *kind);

/* Run argv (NULL-terminated) in the link's compute namespace (l may be
 * NULL), stdout into out[cap] (NUL-terminated), bounded by timeout_s.
 * Returns the exit status, or -1 when it could not run / timed out. */
int         na_e2e_run_capture(const na_link_t *l, char *const *argv, char *out, size_t cap,
                               int timeout_s);
/* Run one point process, `exe bench e2e --point --config cfg --mode M
 * --batch B --ctx C --new N --threads T` and the arguments in more
 * (NULL-terminated, at most 8; or NULL), in the link's compute namespace (l
 * may be NULL), bounded by timeout_s; its POINT line into p, p->ok 0 when
 * it failed or printed none. Returns its exit status (na_e2e_run_capture). */
int         na_e2e_point_run(const na_link_t *l, const char *exe, const char *cfg, int mode,
                             int B, int C, int n_new, int threads, char *const *more,
                             int timeout_s, na_e2e_point_t *p);

/* ---- plots (cli/plot.c) ----------------------------------------------------- */
/* Write the gnuplot data and scripts for the points next to json_path
 * (<stem>-*.dat / .gp) and run gnuplot to make <stem>-*.png. Returns the
 * number of PNGs made (0 with a printed reason when gnuplot is absent). */
int na_e2e_plot(const char *json_path, const na_e2e_point_t *pts, const char *const *links,
                const int *pt_link, int n_pts, int n_links);

#endif /* NA_CLI_E2E_SWEEP_H */
