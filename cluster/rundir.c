/* cluster/rundir.c — a run's private KV directory (see cluster/rundir.h). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster/rundir.h"
#include "common/log.h"

na_status_t na_rundir_make(char *buf, size_t len)
{
    const char *tmp = getenv("TMPDIR");

    snprintf(buf, len, "%s/nearattn-kv-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(buf) == NULL) {
        na_status_t st = na_err(NA_ERR_IO, "mkdtemp(%s): %s", buf, strerror(errno));
        buf[0] = '\0';
        return st;
    }
    return NA_OK;
}

void na_rundir_remove(const char *dir)
{
    DIR *d;
    struct dirent *de;

    if (dir[0] == '\0')
        return;
    d = opendir(dir);
    if (d != NULL) {
        while ((de = readdir(d)) != NULL) {
            char sub[PATH_MAX];
            struct stat sb;
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
            if (lstat(sub, &sb) == 0 && S_ISDIR(sb.st_mode))
                na_rundir_remove(sub);
            else if (unlink(sub) != 0)
                na_log_warn("run: unlink(%s): %s", sub, strerror(errno));
        }
        closedir(d);
    }
    if (rmdir(dir) != 0 && errno != ENOENT)
        na_log_warn("run: rmdir(%s): %s", dir, strerror(errno));
}

na_status_t na_rundir_move_node_kv(na_cfg_node_t *nd, const char *dir)
{
    long k;

    for (k = 0; k < nd->n_devices; k++) {
        size_t len = strlen(dir) + 32;
        char *p = malloc(len);
        if (p == NULL)
            return na_err(NA_ERR_NOMEM, "node %s: out of memory", nd->name);
        snprintf(p, len, "%s/d%ld", dir, k);
        free(nd->devices[k].path);
        nd->devices[k].path = p;
    }
    return NA_OK;
}

na_status_t na_rundir_move_kv(na_cfg_t *cfg, const char *dir)
{
    na_status_t st = NA_OK;
    int i;

    for (i = 0; i < cfg->n_nodes && st == NA_OK; i++) {
        char sub[PATH_MAX];
        snprintf(sub, sizeof(sub), "%s/%s", dir, cfg->nodes[i].name);
        st = na_rundir_move_node_kv(&cfg->nodes[i], sub);
    }
    return st;
}
