/* tests/unit/test_xp_log.c — rdma/xp_log.c: UCX's lines reach stderr (never
 * stdout), and a line more verbose than UCX_LOG_LEVEL (unset: warn) is
 * dropped even when UCX dispatches it (a storage node woken by SIGCONT was
 * seen logging dozens of "UCX DEBUG" lines). Lines are dispatched as UCX's
 * own macros do, with a component whose level lets them through. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <ucs/debug/log_def.h>

#include "rdma/xp_internal.h"
#include "tests/testutil.h"

int main(void)
{
    char path[] = "/tmp/na-xp-log-XXXXXX", buf[4096];
    ucs_log_component_config_t comp;
    int fd, saved;
    ssize_t n;

    unsetenv("UCX_LOG_FILE");
    unsetenv("UCX_LOG_LEVEL");
    na_xp_log_setup();
    fd = mkstemp(path);
    NA_CHECK(fd >= 0);
    if (fd < 0)
        return na_test_finish();
    fflush(stderr);
    saved = dup(2);
    dup2(fd, 2);
    memset(&comp, 0, sizeof(comp));
    comp.log_level = UCS_LOG_LEVEL_TRACE;      /* everything passes UCX's own check */
    snprintf(comp.name, sizeof(comp.name), "TEST");
    ucs_log_dispatch(__FILE__, __LINE__, __func__, UCS_LOG_LEVEL_DEBUG, &comp, "probe-debug %d", 1);
    ucs_log_dispatch(__FILE__, __LINE__, __func__, UCS_LOG_LEVEL_INFO, &comp, "probe-info %d", 2);
    ucs_log_dispatch(__FILE__, __LINE__, __func__, UCS_LOG_LEVEL_WARN, &comp, "probe-warn %d", 3);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    n = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    unlink(path);
    buf[n > 0 ? n : 0] = '\0';
    NA_CHECK_MSG(strstr(buf, "UCX WARN probe-warn 3") != NULL, "stderr: [%s]", buf);
    NA_CHECK_MSG(strstr(buf, "probe-debug") == NULL, "a DEBUG line got through: [%s]", buf);
    NA_CHECK_MSG(strstr(buf, "probe-info") == NULL, "an INFO line got through: [%s]", buf);
    return na_test_finish();
}
