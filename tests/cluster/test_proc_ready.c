/* tests/cluster/test_proc_ready.c — cluster/proc.c's wait for a node's READY
 * line reads it whatever came before: lines of any length (over its 512-byte
 * buffer), a READY line cut across reads and across the buffer's end, a
 * "READY" inside a long line (not a READY line), a node that exits first. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster/proc.h"
#include "tests/testutil.h"

/* Write chunks (NULL-terminated) to a pipe from a child, 2 ms apart; wait for READY. */
static na_status_t ready_of(const char *const *chunks, long *port)
{
    int fd[2];
    pid_t pid;
    na_status_t st;

    NA_CHECK(pipe(fd) == 0);
    pid = fork();
    if (pid == 0) {
        close(fd[0]);
        for (; *chunks != NULL; chunks++) {
            if (write(fd[1], *chunks, strlen(*chunks)) < 0)
                _exit(1);
            usleep(2000);
        }
        _exit(0);
    }
    close(fd[1]);
    *port = -2;
    st = na_proc_wait_ready(fd[0], "t", NULL, 5000, NULL, port);
    close(fd[0]);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return st;
}

int main(void)
{
    static char junk[2000], longline[1500];
    const char *plain[] = { "READY s0 127.0.0.1:1234\n", NULL };
    const char *after_junk[] = { junk, "READY s0 127.0.0.1:2345\n", NULL };
    char cut511[700];
    const char *straddle[] = { cut511, cut511 + 505, NULL };
    const char *in_long[] = { longline, "\nREADY s1 127.0.0.1:3456\n", NULL };
    const char *pieces[] = { "log line\nREA", "DY s2 127.0", ".0.1:4567", "\n", NULL };
    const char *none[] = { "just output\n", NULL };
    long port;
    size_t i;

    for (i = 0; i + 1 < sizeof(junk); i++)         /* lines of 79 chars + newline */
        junk[i] = (i % 80 == 79) ? '\n' : 'a' + (char)(i % 26);
    junk[sizeof(junk) - 1] = '\0';
    junk[sizeof(junk) - 2] = '\n';
    memset(longline, 'x', sizeof(longline) - 1);   /* one 1499-char line with READY inside */
    memcpy(longline + 600, "READY s9 127.0.0.1:9", 20);
    /* 500 bytes of one line, then READY starting at byte 501, cut at byte 505 */
    memset(cut511, 'b', 500);
    cut511[500] = '\n';
    snprintf(cut511 + 501, sizeof(cut511) - 501, "READY s3 127.0.0.1:5678\n");

    NA_CHECK_OK(ready_of(plain, &port));
    NA_CHECK(port == 1234);
    NA_CHECK_OK(ready_of(after_junk, &port));
    NA_CHECK(port == 2345);
    {
        static char a[506];                        /* the first 505 bytes, then the rest */
        memcpy(a, cut511, 505);
        straddle[0] = a;
        NA_CHECK_OK(ready_of(straddle, &port));
        NA_CHECK(port == 5678);
    }
    NA_CHECK_OK(ready_of(in_long, &port));
    NA_CHECK_MSG(port == 3456, "READY inside a long line taken: port %ld", port);
    NA_CHECK_OK(ready_of(pieces, &port));
    NA_CHECK(port == 4567);
    NA_CHECK(ready_of(none, &port) == NA_ERR_PEER);
    return na_test_finish();
}
