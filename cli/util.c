/* cli/util.c — argument parsing helpers shared by the subcommands. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

na_status_t na_cli_int(const char *cmd, const char *flag, const char *val,
                       long lo, long hi, long *out)
{
    char *end;
    long v;

    if (val == NULL) {
        fprintf(stderr, "nearattn %s: %s needs a value\n", cmd, flag);
        return NA_ERR_INVALID;
    }
    errno = 0;
    v = strtol(val, &end, 10);
    if (errno != 0 || end == val || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "nearattn %s: %s expects a whole number in [%ld, %ld], got '%s'\n",
                cmd, flag, lo, hi, val);
        return NA_ERR_INVALID;
    }
    *out = v;
    return NA_OK;
}

na_status_t na_cli_float(const char *cmd, const char *flag, const char *val,
                         double lo, double hi, double *out)
{
    char *end;
    double v;

    if (val == NULL) {
        fprintf(stderr, "nearattn %s: %s needs a value\n", cmd, flag);
        return NA_ERR_INVALID;
    }
    errno = 0;
    v = strtod(val, &end);
    if (errno != 0 || end == val || *end != '\0' || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "nearattn %s: %s expects a number in [%g, %g], got '%s'\n",
                cmd, flag, lo, hi, val);
        return NA_ERR_INVALID;
    }
    *out = v;
    return NA_OK;
}

int na_cli_fail(const char *cmd, na_status_t st)
{
    const char *msg = na_errmsg();
    fprintf(stderr, "nearattn %s: %s\n", cmd, msg[0] ? msg : na_status_string(st));
    return 1;
}

const char *na_cli_shared_dir(void)
{
    static char buf[PATH_MAX + 64];
    char exe[PATH_MAX];
    const char *env = getenv("NA_SHARED_DIR");
    ssize_t n;
    int up;

    if (env != NULL && env[0] != '\0')
        return env;
    /* The binary sits in a build folder of the repository: walk up looking
     * for a sibling shared/ folder with models/ in it. */
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        for (up = 0; up < 5; up++) {
            char *slash = strrchr(exe, '/');
            if (slash == NULL || slash == exe)
                break;
            *slash = '\0';
            snprintf(buf, sizeof(buf), "%s/../shared/models", exe);
            if (access(buf, R_OK) == 0) {
                snprintf(buf, sizeof(buf), "%s/../shared", exe);
                return buf;
            }
        }
    }
    return "../shared";
}
