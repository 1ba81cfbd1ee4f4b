/* cluster/launch.c — `nearattn launch`: fork/exec the nodes of a local layout,
 * or one mpirun job for a multi-host layout. See cluster/launch.h. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster/launch.h"
#include "cluster/proc.h"
#include "common/clock.h"
#include "common/log.h"
#include "storage-node/mkdir.h"

/* Environment the layout's ${VAR} references usually need on every host. */
#define NA_LAUNCH_N_ENV 5
static const char *const na_launch_env_vars[NA_LAUNCH_N_ENV + 1] = {
    "NA_SHARED_DIR", "NA_KV_DIR", "NA_LOG_LEVEL", "UCX_TLS", "TMPDIR", NULL
};

typedef struct {
    const na_cfg_node_t *node;
    pid_t pid;                       /* 0 once reaped */
    int   status;                    /* waitpid status */
    char  log[4096];
} na_launch_child_t;

static uint64_t na_launch_now_ms(void)
{
    return (uint64_t)(1e3 * na_now_s());
}

/* Describe a waitpid status: "exit 3", "signal 9". */
static const char *na_launch_why(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exit status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d", WTERMSIG(status));
    else
        snprintf(buf, len, "status 0x%x", status);
    return buf;
}

/* Signal every live child; returns how many are alive. */
static int na_launch_signal_all(na_launch_child_t *c, int n, int sig)
{
    int i, alive = 0;
    for (i = 0; i < n; i++)
        if (c[i].pid > 0) {
            kill(c[i].pid, sig);
            alive++;
        }
    return alive;
}

/* Reap what exited; returns the index of a child that exited, or -1. */
static int na_launch_reap(na_launch_child_t *c, int n)
{
    int status, i;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0)
        return -1;
    for (i = 0; i < n; i++)
        if (c[i].pid == pid) {
            c[i].pid = 0;
            c[i].status = status;
            return i;
        }
    return -1;
}

/* Stop every child with sig, then SIGKILL after timeout_ms. 1 if all exited 0. */
static int na_launch_stop_all(na_launch_child_t *c, int n, int sig, int timeout_ms, FILE *out)
{
    uint64_t deadline = na_launch_now_ms() + (uint64_t)timeout_ms;
    int all_ok = 1, i;

    (void)na_launch_signal_all(c, n, sig);
    while (na_launch_signal_all(c, n, 0) > 0) {
        if (na_launch_reap(c, n) >= 0)
            continue;
        if (na_launch_now_ms() > deadline) {
            for (i = 0; i < n; i++)
                if (c[i].pid > 0)
                    fprintf(out, "launch: %s did not stop within %d ms: SIGKILL\n",
                            c[i].node->name, timeout_ms);
            (void)na_launch_signal_all(c, n, SIGKILL);
            deadline = na_launch_now_ms() + 5000;
        }
        usleep(20000);
    }
    for (i = 0; i < n; i++) {
        char why[64];
        if (c[i].pid == 0 && !(WIFEXITED(c[i].status) && WEXITSTATUS(c[i].status) == 0)) {
            fprintf(out, "launch: node %s ended with %s (log %s)\n", c[i].node->name,
                    na_launch_why(c[i].status, why, sizeof(why)), c[i].log);
            all_ok = 0;
        }
    }
    return all_ok;
}

static na_status_t na_launch_local(const na_cfg_t *cfg, const na_launch_opts_t *o,
                                   const char *log_dir, int *exit_code_p)
{
    na_launch_child_t *c;
    int n = 0, i, pass, rc = 0;
    int timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 10000;
    na_status_t st = NA_OK;

    c = calloc((size_t)cfg->n_nodes, sizeof(*c));
    if (c == NULL)
        return na_err(NA_ERR_NOMEM, "launch: out of memory");
    /* storage nodes first: compute nodes connect to them */
    for (pass = 0; pass < 2; pass++)
        for (i = 0; i < cfg->n_nodes; i++) {
            const na_cfg_node_t *nd = &cfg->nodes[i];
            if ((pass == 0) != (nd->role == NA_CFG_ROLE_STORAGE) || !nd->is_local)
                continue;
            c[n].node = nd;
            snprintf(c[n].log, sizeof(c[n].log), "%s/%s.log", log_dir, nd->name);
            n++;
        }
    for (i = 0; i < n; i++) {
        na_proc_node_t pn = { .exe = o->exe, .config_path = o->config_path,
                              .name = c[i].node->name };
        na_proc_opts_t po = { NULL, c[i].log, 1, NULL, NULL };
        if (o->dry_run) {
            fprintf(o->out, "%s node --config %s --name %s > %s 2>&1\n", o->exe,
                    o->config_path, c[i].node->name, c[i].log);
            continue;
        }
        st = na_proc_start_node(&pn, &po, &c[i].pid);
        if (st != NA_OK)
            break;
        fprintf(o->out, "launch: started %s %s (pid %d, log %s)\n",
                na_cfg_role_name(c[i].node->role), c[i].node->name, (int)c[i].pid, c[i].log);
    }
    fflush(o->out);
    if (o->dry_run) {
        free(c);
        *exit_code_p = 0;
        return NA_OK;
    }
    if (st != NA_OK) {
        (void)na_launch_stop_all(c, n, SIGTERM, timeout_ms, o->out);
        free(c);
        return st;
    }
    for (;;) {
        int k;
        if (*o->stop) {
            int sig = (int)*o->stop;
            fprintf(o->out, "launch: signal %d: stopping %d node(s)\n", sig,
                    na_launch_signal_all(c, n, 0));
            rc = na_launch_stop_all(c, n, sig, timeout_ms, o->out) ? 0 : 1;
            break;
        }
        k = na_launch_reap(c, n);
        if (k >= 0) {
            char why[64];
            if (WIFEXITED(c[k].status) && WEXITSTATUS(c[k].status) == 0) {
                fprintf(o->out, "launch: node %s exited cleanly\n", c[k].node->name);
                if (na_launch_signal_all(c, n, 0) == 0)
                    break;
                continue;
            }
            fprintf(o->out, "launch: node %s failed: %s (log %s); stopping the others\n",
                    c[k].node->name, na_launch_why(c[k].status, why, sizeof(why)), c[k].log);
            (void)na_launch_stop_all(c, n, SIGTERM, timeout_ms, o->out);
            rc = 1;
            break;
        }
        usleep(50000);
    }
    fflush(o->out);
    free(c);
    *exit_code_p = rc;
    return NA_OK;
}

/* Host file + MPMD mpirun command (see the header). */
static na_status_t na_launch_mpirun(const na_cfg_t *cfg, const na_launch_opts_t *o,
                                    const char *log_dir, int *exit_code_p)
{
    char hostfile[4096], outdir[4096];
    char (*hosts)[300];
    uint64_t stop_sent;
    int timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 10000;
    const char *mpirun = o->mpirun ? o->mpirun : "mpirun";
    char **argv;
    FILE *f;
    int i, j, a = 0, n_args;
    pid_t pid;
    na_status_t st;

    snprintf(hostfile, sizeof(hostfile), "%s/hostfile", log_dir);
    snprintf(outdir, sizeof(outdir), "%s/mpirun", log_dir);
    if (o->dry_run) {               /* a dry run writes nothing: show the host file */
        fprintf(o->out, "# host file %s\n", hostfile);
        f = o->out;
    } else if ((f = fopen(hostfile, "w")) == NULL) {
        return na_err(NA_ERR_IO, "launch: fopen(%s): %s", hostfile, strerror(errno));
    }
    for (i = 0; i < cfg->n_nodes; i++) {
        int seen = 0, slots = 0;
        for (j = 0; j < i; j++)
            seen |= !strcmp(cfg->nodes[j].host, cfg->nodes[i].host);
        if (seen)
            continue;
        for (j = i; j < cfg->n_nodes; j++)
            slots += !strcmp(cfg->nodes[j].host, cfg->nodes[i].host);
        fprintf(f, "%s slots=%d\n", cfg->nodes[i].host, slots);
    }
    if (f != o->out)
        fclose(f);
    hosts = calloc(cfg->n_nodes > 0 ? (size_t)cfg->n_nodes : 1, sizeof(*hosts));
    if (hosts == NULL)
        return na_err(NA_ERR_NOMEM, "launch: out of memory");
    for (i = 0; i < cfg->n_nodes; i++) {
        int slots = 0;
        for (j = 0; j < cfg->n_nodes; j++)
            slots += !strcmp(cfg->nodes[j].host, cfg->nodes[i].host);
        snprintf(hosts[i], sizeof(hosts[i]), "%s:%d", cfg->nodes[i].host, slots);
    }
    n_args = 8 + 2 * NA_LAUNCH_N_ENV + cfg->n_nodes * 12;
    argv = calloc((size_t)n_args, sizeof(*argv));
    if (argv == NULL) {
        free(hosts);
        return na_err(NA_ERR_NOMEM, "launch: out of memory");
    }
    argv[a++] = (char *)mpirun;
    if (geteuid() == 0)
        argv[a++] = "--allow-run-as-root";
    argv[a++] = "--hostfile";
    argv[a++] = hostfile;
    argv[a++] = "--output-filename";
    argv[a++] = outdir;
    for (i = 0; na_launch_env_vars[i] != NULL; i++)
        if (getenv(na_launch_env_vars[i]) != NULL) {     /* the layout may refer to them */
            argv[a++] = "-x";
            argv[a++] = (char *)na_launch_env_vars[i];
        }
    for (i = 0; i < cfg->n_nodes; i++) {
        if (i > 0)
            argv[a++] = ":";
        argv[a++] = "-n";
        argv[a++] = "1";
        argv[a++] = "--host";
        argv[a++] = hosts[i];           /* HOST:SLOTS, as in the host file */
        argv[a++] = (char *)o->exe;
        argv[a++] = "node";
        argv[a++] = "--config";
        argv[a++] = (char *)o->config_path;
        argv[a++] = "--name";
        argv[a++] = cfg->nodes[i].name;
    }
    argv[a] = NULL;
    if (o->dry_run) {
        fprintf(o->out, "# command\n");
        for (i = 0; i < a; i++)
            fprintf(o->out, "%s%s", i ? " " : "", argv[i]);
        fprintf(o->out, "\n");
        free(argv);
        free(hosts);
        *exit_code_p = 0;
        return NA_OK;
    }
    {
        na_proc_opts_t po = { argv, NULL, 1, NULL, NULL };
        st = na_proc_spawn(&po, &pid);
    }
    free(argv);
    free(hosts);
    stop_sent = 0;
    if (st != NA_OK)
        return st;
    fprintf(o->out, "launch: mpirun pid %d, %d node(s), output under %s\n", (int)pid,
            cfg->n_nodes, outdir);
    fflush(o->out);
    for (;;) {
        int status;
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            char why[64];
            *exit_code_p = (WIFEXITED(status) && WEXITSTATUS(status) == 0) ? 0 : 1;
            fprintf(o->out, "launch: mpirun ended with %s\n", na_launch_why(status, why, sizeof(why)));
            return NA_OK;
        }
        if (*o->stop && stop_sent == 0) {
            /* mpirun turns SIGTERM/SIGINT into a hard kill of the job but forwards
             * SIGUSR1, which `nearattn node` takes as a clean stop */
            fprintf(o->out, "launch: signal %d: asking every rank to stop (SIGUSR1)\n", (int)*o->stop);
            fflush(o->out);
            kill(pid, SIGUSR1);
            stop_sent = na_launch_now_ms();
        } else if (stop_sent != 0 && na_launch_now_ms() > stop_sent + (uint64_t)timeout_ms) {
            fprintf(o->out, "launch: ranks did not stop within %d ms: SIGTERM to mpirun\n", timeout_ms);
            kill(pid, SIGTERM);
            stop_sent = UINT64_MAX / 2;
        }
        usleep(50000);
    }
}

na_status_t na_launch_run(const na_cfg_t *cfg, const na_launch_opts_t *o, int *exit_code_p)
{
    char dir[3968];      /* leaves room for the file names below it */
    int all_local = 1, i;
    na_status_t st;

    if (o->log_dir != NULL) {
        snprintf(dir, sizeof(dir), "%s", o->log_dir);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof(dir), "%s/nearattn-launch-%s", tmp && *tmp ? tmp : "/tmp",
                 cfg->cluster.name);
    }
    st = o->dry_run ? NA_OK : na_mkdir_p(dir, 0755);     /* a dry run creates nothing */
    if (st != NA_OK)
        return st;
    for (i = 0; i < cfg->n_nodes; i++)
        all_local &= cfg->nodes[i].is_local;
    if (all_local && !o->force_mpirun)
        return na_launch_local(cfg, o, dir, exit_code_p);
    return na_launch_mpirun(cfg, o, dir, exit_code_p);
}
