/* tests/unit/kv_fault_io.h — helpers of the storage-node tests: a
 * temporary directory where O_DIRECT works; the test double behind the KV
 * I/O interface is storage-node/kv_fault.h (na_kv_fault_factory), also
 * reachable from a real node through NA_FAULTS. */
#ifndef NA_TEST_KV_FAULT_IO_H
#define NA_TEST_KV_FAULT_IO_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "storage-node/kv_fault.h"
#include "tests/testutil.h"

/* Does dir accept O_DIRECT files? */
static int na_kv_test_direct_ok(const char *dir)
{
    char p[600];
    int fd;
    snprintf(p, sizeof(p), "%s/.direct-probe", dir);
    fd = open(p, O_RDWR | O_CREAT | O_DIRECT, 0600);
    if (fd < 0)
        return 0;
    close(fd);
    unlink(p);
    return 1;
}

/* Make a fresh temporary directory on a file system that takes O_DIRECT:
 * $TMPDIR (or /tmp), else under the current directory (the build tree).
 * 0 on success; -1 (message printed) when none does: the caller skips. */
static inline int na_kv_test_dir(char *buf, size_t len)
{
    if (na_test_tmpdir(buf, len) == 0) {
        if (na_kv_test_direct_ok(buf))
            return 0;
        fprintf(stderr, "%s refuses O_DIRECT (tmpfs?); trying the build directory\n", buf);
        na_test_rmtree(buf);
    }
    snprintf(buf, len, "./nearattn-test-XXXXXX");
    if (mkdtemp(buf) == NULL)
        return -1;
    if (na_kv_test_direct_ok(buf))
        return 0;
    fprintf(stderr, "%s refuses O_DIRECT too\n", buf);
    na_test_rmtree(buf);
    return -1;
}

#endif /* NA_TEST_KV_FAULT_IO_H */
