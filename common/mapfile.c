/* common/mapfile.c — map a whole file read-only. */
#include "common/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* What a non-regular file is, for the error message. */
static const char *na_file_kind(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a file";
}

na_status_t na_open_regular(const char *path, const char *what, na_status_t not_regular,
                            int *fd_p, struct stat *sb)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), e, fl;

    if (fd < 0) {
        e = errno;
        na_err(NA_ERR_IO, "%s: cannot open %s: %s", path, what, strerror(e));
        errno = e;
        return NA_ERR_IO;
    }
    if (fstat(fd, sb) != 0) {
        e = errno;
        close(fd);
        return na_err(NA_ERR_IO, "%s: cannot stat %s: %s", path, what, strerror(e));
    }
    if (!S_ISREG(sb->st_mode)) {
        close(fd);
        return na_err(not_regular, "%s: %s is not a regular file (it is %s)", path, what,
                      na_file_kind(sb->st_mode));
    }
    fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        e = errno;
        close(fd);
        return na_err(NA_ERR_IO, "%s: fcntl: %s", path, strerror(e));
    }
    *fd_p = fd;
    return NA_OK;
}

na_status_t na_mapfile(const char *path, const char *what, na_mapfile_check_fn check,
                       void **map_p, size_t *size_p)
{
    struct stat sb;
    void *map;
    na_status_t st;
    int fd = -1;

    st = na_open_regular(path, what, NA_ERR_FORMAT, &fd, &sb);
    if (st != NA_OK)
        return st;
    if (check != NULL)
        st = check(path, &sb);
    if (st != NA_OK) {
        close(fd);
        return st;
    }
    map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return na_err(NA_ERR_IO, "%s: mmap: %s", path, strerror(errno));
    *map_p = map;
    *size_p = (size_t)sb.st_size;
    return NA_OK;
}
