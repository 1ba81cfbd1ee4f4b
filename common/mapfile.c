/* common/mapfile.c — map a whole file read-only. */
#include "common/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

na_status_t na_mapfile(const char *path, const char *what, na_mapfile_check_fn check,
                       void **map_p, size_t *size_p)
{
    struct stat sb;
    void *map;
    na_status_t st = NA_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return na_err(NA_ERR_IO, "%s: cannot open%s: %s", path, what, strerror(errno));
    if (fstat(fd, &sb) != 0)
        st = na_err(NA_ERR_IO, "%s: fstat: %s", path, strerror(errno));
    else if (check != NULL)
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
