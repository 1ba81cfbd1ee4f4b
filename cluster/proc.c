/* cluster/proc.c — fork/exec of nodes and the programs that start them (see
 * cluster/proc.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster/proc.h"
#include "common/clock.h"
#include "common/config.h"

/* launch runs mpirun with up to 11 arguments per node of the layout */
#define NA_PROC_MAX_ARGS (12 * NA_CFG_MAX_NODES + 64)

na_status_t na_proc_self_exe(char *buf, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);

    if (n <= 0)
        return na_err(NA_ERR_IO, "readlink(/proc/self/exe): %s",
                      n < 0 ? strerror(errno) : "empty");
    buf[n] = '\0';
    return NA_OK;
}

na_status_t na_proc_spawn(const na_proc_opts_t *o, pid_t *pid_p)
{
    char *argv[NA_PROC_MAX_ARGS + 4];
    int fd = -1, p[2] = { -1, -1 }, k = 0, i;
    pid_t pid, parent;

    if (o->ns != NULL && o->ns[0] != '\0') {
        argv[k++] = "ip";
        argv[k++] = "netns";
        argv[k++] = "exec";
        argv[k++] = (char *)o->ns;
    }
    for (i = 0; o->argv[i] != NULL; i++) {
        if (k == NA_PROC_MAX_ARGS)
            return na_err(NA_ERR_RANGE, "spawn %s: more than %d arguments", o->argv[0],
                          NA_PROC_MAX_ARGS);
        argv[k++] = o->argv[i];
    }
    argv[k] = NULL;
    if (o->log != NULL) {
        /* a new file of ours only: the name is predictable (TMPDIR, pid), so
         * whatever already lies there (another user's file or link planted in
         * a shared directory, or a stale log of ours) is removed first when we
         * may, and never written through */
        const int fl = O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC | O_NOFOLLOW;
        fd = open(o->log, fl, 0600);
        if (fd < 0 && errno == EEXIST && unlink(o->log) == 0)
            fd = open(o->log, fl, 0600);
        if (fd < 0)
            return na_err(NA_ERR_IO, "open(%s): %s (the node's log must be a new file: remove "
                          "what is there or set TMPDIR to a private directory)", o->log,
                          strerror(errno));
    }
    if (o->out_fd_p != NULL) {
        if (pipe(p) != 0) {
            int e = errno;
            if (fd >= 0)
                close(fd);
            return na_err(NA_ERR_IO, "pipe: %s", strerror(e));
        }
        fcntl(p[0], F_SETFD, FD_CLOEXEC);
        fcntl(p[1], F_SETFD, FD_CLOEXEC);
    }
    fflush(NULL);
    parent = getpid();
    pid = fork();
    if (pid < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        if (p[0] >= 0) {
            close(p[0]);
            close(p[1]);
        }
        return na_err(NA_ERR_IO, "fork: %s", strerror(e));
    }
    if (pid == 0) {
        if (o->own_group)
            setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);   /* nodes end with whoever started them */
        if (getppid() != parent)
            _exit(1);
        if (fd >= 0) {
            dup2(fd, STDERR_FILENO);
            if (o->out_fd_p == NULL)
                dup2(fd, STDOUT_FILENO);
        }
        if (o->out_fd_p != NULL)
            dup2(p[1], STDOUT_FILENO);
        execvp(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (fd >= 0)
        close(fd);
    if (o->out_fd_p != NULL) {
        close(p[1]);
        *o->out_fd_p = p[0];
    }
    *pid_p = pid;
    return NA_OK;
}

na_status_t na_proc_start_node(const na_proc_node_t *n, const na_proc_opts_t *o, pid_t *pid_p)
{
    const struct { const char *flag, *val; } opt[] = {
        { "--listen", n->listen }, { "--kv-dir", n->kv_dir }, { "--model", n->model },
        { "--shape", n->shape }, { "--kv-dtype", n->kv_dtype },
    };
    char *argv[8 + 2 * sizeof(opt) / sizeof(opt[0])];
    na_proc_opts_t po = *o;
    size_t i;
    int k = 0;

    argv[k++] = (char *)n->exe;
    argv[k++] = "node";
    argv[k++] = "--config";
    argv[k++] = (char *)n->config_path;
    argv[k++] = "--name";
    argv[k++] = (char *)n->name;
    for (i = 0; i < sizeof(opt) / sizeof(opt[0]); i++)
        if (opt[i].val != NULL) {
            argv[k++] = (char *)opt[i].flag;
            argv[k++] = (char *)opt[i].val;
        }
    argv[k] = NULL;
    po.argv = argv;
    return na_proc_spawn(&po, pid_p);
}

int na_proc_stop(pid_t *pids, int n, int sig, int timeout_ms)
{
    double t0 = na_now_s();
    int i, left, ws, unclean = 0;

    for (i = 0; i < n; i++)
        if (pids[i] > 0)
            kill(pids[i], sig);
    do {
        left = 0;
        for (i = 0; i < n; i++) {
            if (pids[i] <= 0)
                continue;
            if (waitpid(pids[i], &ws, WNOHANG) == pids[i]) {
                unclean += !WIFEXITED(ws) || WEXITSTATUS(ws) != 0;
                pids[i] = 0;
            } else
                left++;
        }
        if (left > 0)
            usleep(20000);
    } while (left > 0 && na_now_s() - t0 < timeout_ms / 1000.0);
    for (i = 0; i < n; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            pids[i] = 0;
            unclean++;
        }
    return unclean;
}

/* The last non-empty line of file path into buf ("" if none). */
static void na_proc_log_tail(const char *path, char *buf, size_t len)
{
    char line[512];
    FILE *f = path != NULL ? fopen(path, "r") : NULL;

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

/* Scan the complete lines of buf[0, *have) for "READY ...": 1 with *port_p
 * set when one is there; else the last, incomplete line is kept at the start
 * of buf (*have updated). A line longer than the buffer is skipped (*skip
 * set until its end), never mistaken for the start of another. */
static int na_proc_ready_scan(char *buf, size_t *have, size_t cap, int *skip, long *port_p)
{
    char *line = buf, *eol;

    buf[*have] = '\0';
    while ((eol = memchr(line, '\n', (size_t)(buf + *have - line))) != NULL) {
        *eol = '\0';
        if (!*skip && strncmp(line, "READY", 5) == 0) {
            char *colon = strrchr(line, ':');
            *port_p = colon != NULL ? strtol(colon + 1, NULL, 10) : -1;
            return 1;
        }
        *skip = 0;
        line = eol + 1;
    }
    *have = (size_t)(buf + *have - line);
    memmove(buf, line, *have);
    if (*have == cap - 1) {     /* one line fills the buffer: not READY, skip it */
        *skip = 1;
        *have = 0;
    }
    return 0;
}

na_status_t na_proc_wait_ready(int fd, const char *name, const char *log, int timeout_ms,
                               volatile sig_atomic_t *stop, long *port_p)
{
    char buf[512];
    size_t have = 0;
    int skip = 0;
    double t0 = na_now_s();

    while (na_now_s() - t0 < timeout_ms / 1000.0) {
        struct pollfd pf = { fd, POLLIN, 0 };
        ssize_t got;
        if (stop != NULL && *stop)
            return na_err(NA_ERR_CANCELED, "interrupted while node %s started", name);
        if (poll(&pf, 1, 100) <= 0)
            continue;
        got = read(fd, buf + have, sizeof(buf) - 1 - have);
        if (got <= 0) {
            char last[512];
            na_proc_log_tail(log, last, sizeof(last));
            return na_err(NA_ERR_PEER, "node %s exited before it was ready: %s (log: %s)",
                          name, last[0] ? last : "no output", log ? log : "stderr");
        }
        have += (size_t)got;
        if (na_proc_ready_scan(buf, &have, sizeof(buf), &skip, port_p))
            return NA_OK;
    }
    return na_err(NA_ERR_TIMEOUT, "node %s did not become ready within %d ms (log: %s)",
                  name, timeout_ms, log ? log : "stderr");
}
