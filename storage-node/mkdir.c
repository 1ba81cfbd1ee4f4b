/* storage-node/mkdir.c — mkdir -p of a directory only we control (see
 * storage-node/mkdir.h). */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage-node/mkdir.h"

/* One component of the path, buf (created says whether this call made it,
 * last whether it is the directory asked for). A symbolic link is followed
 * only when we or root own it; what it leads to is checked like the rest. */
static na_status_t na_mkdir_check(const char *buf, int created, int last)
{
    uid_t me = geteuid();
    struct stat sb;

    if (lstat(buf, &sb) != 0)
        return na_err(NA_ERR_IO, "lstat(%s): %s", buf, strerror(errno));
    if (S_ISLNK(sb.st_mode)) {
        if (created || (sb.st_uid != me && sb.st_uid != 0))
            return na_err(NA_ERR_IO, "directory %s is a symbolic link owned by uid %u "
                          "(not this user, uid %u, nor root): refused", buf,
                          (unsigned)sb.st_uid, (unsigned)me);
        if (stat(buf, &sb) != 0)
            return na_err(NA_ERR_IO, "stat(%s): %s", buf, strerror(errno));
    }
    if (!S_ISDIR(sb.st_mode))
        return na_err(NA_ERR_IO, "mkdir(%s): %s", buf, strerror(ENOTDIR));
    if (created || last) {
        /* ours alone: nobody else may add, rename or replace what we put there */
        if (sb.st_uid != me)
            return na_err(NA_ERR_IO, "directory %s is owned by uid %u, not by this user "
                          "(uid %u): refused (someone else could swap the files in it)",
                          buf, (unsigned)sb.st_uid, (unsigned)me);
        if (sb.st_mode & (S_IWGRP | S_IWOTH))
            return na_err(NA_ERR_IO, "directory %s is writable by its group or others "
                          "(mode %04o): refused; chmod go-w it", buf,
                          (unsigned)(sb.st_mode & 07777));
        return NA_OK;
    }
    /* a parent that was there: ours or root's, and if others may write in
     * it, sticky (like /tmp), so that they cannot move our entries */
    if (sb.st_uid != me && sb.st_uid != 0)
        return na_err(NA_ERR_IO, "directory %s is owned by uid %u (not this user, uid %u, "
                      "nor root): refused as a parent of a KV or log directory", buf,
                      (unsigned)sb.st_uid, (unsigned)me);
    if ((sb.st_mode & (S_IWGRP | S_IWOTH)) && !(sb.st_mode & S_ISVTX))
        return na_err(NA_ERR_IO, "directory %s is writable by its group or others without "
                      "the sticky bit (mode %04o): refused as a parent of a KV or log "
                      "directory", buf, (unsigned)(sb.st_mode & 07777));
    return NA_OK;
}

na_status_t na_mkdir_p(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    size_t i, len = strlen(path);
    na_status_t st;

    if (len == 0 || len >= sizeof(buf))
        return na_err(NA_ERR_INVALID, "mkdir: directory '%s' is empty or too long", path);
    if (mode & (S_IWGRP | S_IWOTH))
        return na_err(NA_ERR_INVALID, "mkdir(%s): mode %04o lets others write", path,
                      (unsigned)mode);
    while (len > 1 && path[len - 1] == '/')
        len--;                          /* "a/b/" is "a/b" (lstat would follow b) */
    memcpy(buf, path, len);
    buf[len] = '\0';
    for (i = 1; i <= len; i++) {
        int created;
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        if (buf[i - 1] == '/')
            continue;                   /* "a//b" */
        buf[i] = '\0';
        created = mkdir(buf, mode) == 0;
        if (!created && errno != EEXIST)
            return na_err(NA_ERR_IO, "mkdir(%s): %s", buf, strerror(errno));
        st = na_mkdir_check(buf, created, i == len);
        if (st != NA_OK)
            return st;
        if (i < len)
            buf[i] = path[i];
    }
    if (access(buf, W_OK | X_OK) != 0)
        return na_err(NA_ERR_IO, "access(%s, W_OK): %s", buf, strerror(errno));
    return NA_OK;
}
