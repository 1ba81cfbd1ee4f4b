/* storage-node/mkdir.c — mkdir -p (see storage-node/mkdir.h). */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage-node/mkdir.h"

na_status_t na_mkdir_p(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    size_t i, len = strlen(path);
    struct stat sb;

    if (len == 0 || len >= sizeof(buf))
        return na_err(NA_ERR_INVALID, "mkdir: directory '%s' is empty or too long", path);
    memcpy(buf, path, len + 1);
    for (i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        buf[i] = '\0';
        if (mkdir(buf, mode) != 0 && errno != EEXIST)
            return na_err(NA_ERR_IO, "mkdir(%s): %s", buf, strerror(errno));
        if (stat(buf, &sb) != 0)
            return na_err(NA_ERR_IO, "stat(%s): %s", buf, strerror(errno));
        if (!S_ISDIR(sb.st_mode))
            return na_err(NA_ERR_IO, "mkdir(%s): %s", buf, strerror(ENOTDIR));
        buf[i] = path[i];
    }
    if (access(path, W_OK | X_OK) != 0)
        return na_err(NA_ERR_IO, "access(%s, W_OK): %s", path, strerror(errno));
    return NA_OK;
}
