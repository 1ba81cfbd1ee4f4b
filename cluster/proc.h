/* cluster/proc.h — the one fork/exec of the tree: starting a nearattn node
 * process (`nearattn node --config F --name N [--listen H:P] [--kv-dir D] [--model F]
 * [--shape S] [--kv-dtype T]`)
 * or another program that starts nodes (mpirun), and stopping what was
 * started. Used by `nearattn run` (cluster/nodes.c), `nearattn launch`
 * (cluster/launch.c) and the benchmarks that start nodes. */
#ifndef NA_PROC_H
#define NA_PROC_H

#include <signal.h>
#include <sys/types.h>

#include "common/status.h"

typedef struct {
    char *const *argv;      /* argv[0]: a path, or a name looked up in PATH */
    const char  *log;       /* stderr (and stdout unless out_fd_p) into this file,
                               truncated, then appended to; NULL: inherited */
    int          own_group; /* setpgid(0, 0): terminal signals reach it only through
                               the parent */
    int         *out_fd_p;  /* non-NULL: stdout into a pipe whose read end is set here */
    const char  *ns;        /* non-empty: run it in this network namespace
                               (`ip netns exec NS ...`) */
} na_proc_opts_t;

/* Start a child as o says; it gets SIGTERM when this process dies
 * (PR_SET_PDEATHSIG). NA_ERR_IO naming the failing call (open, pipe,
 * fork); a failing exec makes the child exit 127 with a line on its stderr. */
na_status_t na_proc_spawn(const na_proc_opts_t *o, pid_t *pid_p);

/* One node of a layout. */
typedef struct {
    const char *exe;          /* the nearattn executable */
    const char *config_path;  /* the layout file */
    const char *name;         /* the node's name in it */
    const char *listen;       /* "HOST:PORT" instead of the layout's address, or NULL */
    const char *kv_dir;       /* KV under this directory instead of the layout's, or NULL */
    const char *model;        /* `--model F` instead of the layout's model, or NULL */
    const char *shape;        /* `--shape L:H:KVH:HD` (a storage node's KV shape), or NULL */
    const char *kv_dtype;     /* `--kv-dtype T` instead of the layout's model.kv_dtype, or NULL */
} na_proc_node_t;

/* Start `exe node --config F --name N ...` for node n (see na_proc_spawn). */
na_status_t na_proc_start_node(const na_proc_node_t *n, const na_proc_opts_t *o, pid_t *pid_p);

/* Wait up to timeout_ms for a started node's "READY ..." line on fd (its
 * stdout pipe; a line that starts with READY, after any amount of other
 * output); *port_p gets the number after the line's last ':' (-1 when
 * there is none: a compute replica). NA_ERR_PEER (it exited: the last line
 * of log), NA_ERR_TIMEOUT, NA_ERR_CANCELED when *stop got set. */
na_status_t na_proc_wait_ready(int fd, const char *name, const char *log, int timeout_ms,
                               volatile sig_atomic_t *stop, long *port_p);

/* SIGTERM (sig) every pids[i] > 0, wait up to timeout_ms for them, SIGKILL
 * what is left; reaps them all and sets their pids to 0. Returns how many of
 * them did not exit with status 0 (killed, or failed). */
int         na_proc_stop(pid_t *pids, int n, int sig, int timeout_ms);

/* The running executable (/proc/self/exe) into buf. NA_ERR_IO. */
na_status_t na_proc_self_exe(char *buf, size_t len);

#endif /* NA_PROC_H */
