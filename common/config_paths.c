/* common/config_paths.c — the KV directories of a layout: on this machine
 * usable or creatable (checked, never created: the storage node creates them
 * when it starts), normalised, and unique per host. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config_internal.h"

/* A KV directory the node can use or create when it starts (loading a
 * layout creates nothing): path (absolute) is a writable directory, or its
 * nearest existing ancestor is. *canon_p gets the path with that ancestor
 * resolved (realpath) and the rest normalised (no ".", "..", "//" or
 * trailing "/"), so that two spellings of one directory compare equal.
 * Fails with NA_ERR_IO and the reason in why; NA_ERR_NOMEM. */
static na_status_t na_cfg_kv_dir(const char *path, char **canon_p, char *why, size_t why_len)
{
    char tmp[PATH_MAX], out[PATH_MAX];
    size_t len = strlen(path), n;
    const char *rest;
    struct stat sb;
    char *slash, *real;

    if (len == 0 || len >= sizeof(tmp)) {
        snprintf(why, why_len, "path too long");
        return NA_ERR_IO;
    }
    memcpy(tmp, path, len + 1);
    while (stat(tmp, &sb) != 0) {
        if (errno != ENOENT && errno != ENOTDIR) {
            snprintf(why, why_len, "stat '%s': %s", tmp, strerror(errno));
            return NA_ERR_IO;
        }
        slash = strrchr(tmp, '/');
        if (slash == NULL || slash == tmp)
            snprintf(tmp, sizeof(tmp), "/");
        else
            *slash = '\0';
    }
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(why, why_len, "'%s' cannot hold a directory: %s", tmp, strerror(ENOTDIR));
        return NA_ERR_IO;
    }
    if (access(tmp, W_OK | X_OK) != 0) {
        snprintf(why, why_len, "'%s' is not writable: %s", tmp, strerror(errno));
        return NA_ERR_IO;
    }
    real = realpath(tmp, NULL);
    snprintf(out, sizeof(out), "%s", real != NULL ? real : tmp);
    free(real);
    rest = path + (strcmp(tmp, "/") ? strlen(tmp) : 0);
    while (*rest != '\0') {            /* the components that do not exist yet */
        while (*rest == '/')
            rest++;
        n = strcspn(rest, "/");
        if (n == 0 || (n == 1 && rest[0] == '.')) {
            rest += n;
            continue;
        }
        if (n == 2 && rest[0] == '.' && rest[1] == '.') {
            slash = strrchr(out, '/');
            if (slash != NULL)
                slash[slash == out ? 1 : 0] = '\0';
        } else {
            size_t ol = strlen(out);
            if (ol + 1 + n >= sizeof(out)) {
                snprintf(why, why_len, "path too long");
                return NA_ERR_IO;
            }
            if (ol > 0 && out[ol - 1] != '/')
                out[ol++] = '/';
            memcpy(out + ol, rest, n);
            out[ol + n] = '\0';
        }
        rest += n;
    }
    *canon_p = strdup(out);
    return *canon_p != NULL ? NA_OK : NA_ERR_NOMEM;
}

/* KV directories: unique per host; on this machine usable or creatable
 * (the node creates them when it starts). */
na_status_t na_cfg_check_kv_dirs(na_cfg_parse_t *p, na_cfg_t *cfg)
{
    char why[PATH_MAX + 128];
    int s, t;

    for (s = 0; s < cfg->n_slots; s++) {
        const na_cfg_node_t *node = &cfg->nodes[cfg->slots[s].node];
        na_cfg_device_t *dev = &node->devices[cfg->slots[s].dev];
        const na_yn_t *devs = na_cfg_yn_get(na_cfg_node_yn(p, node), "devices");
        const na_yn_t *dm = (devs != NULL && devs->kind == NA_YN_SEQ &&
                             (size_t)cfg->slots[s].dev < devs->n)
                                ? devs->items[cfg->slots[s].dev] : na_cfg_node_yn(p, node);
        const na_yn_t *at = na_cfg_key_at(dm, "path");

        if (node->is_local) {
            char *canon = NULL;
            na_status_t st = na_cfg_kv_dir(dev->path, &canon, why, sizeof(why));
            if (st == NA_ERR_NOMEM)
                return na_err(st, "'%s': out of memory", cfg->file);
            if (st != NA_OK)
                return na_cfg_errat(p, at, NA_ERR_IO, "storage node '%s' device %d: KV "
                                    "directory: %s", node->name, cfg->slots[s].dev, why);
            free(dev->path);
            dev->path = canon;
        }
        for (t = 0; t < s; t++) {
            const na_cfg_node_t *o = &cfg->nodes[cfg->slots[t].node];
            const na_cfg_device_t *od = &o->devices[cfg->slots[t].dev];
            if (!strcmp(od->path, dev->path) &&
                (!strcmp(o->host, node->host) || (o->is_local && node->is_local)))
                return na_cfg_errat(p, at, NA_ERR_INVALID, "KV directory '%s' is already used "
                                    "by node '%s' device %d", dev->path, o->name,
                                    cfg->slots[t].dev);
        }
    }
    return NA_OK;
}
