/* rdma/xp_log.c — UCX's own log lines go to stderr, never to stdout (which
 * carries the generated text). UCX writes its log to stdout unless
 * UCX_LOG_FILE names a file; that file is opened when libucs is loaded, so
 * setting the variable here would come too late: a log handler in front of
 * UCX's default one prints each line to stderr instead. A UCX_LOG_FILE set
 * by the user is left alone (UCX's handler then writes where it says).
 * Lines more verbose than UCX_LOG_LEVEL (default warn) are dropped. Also
 * the transport's log limiter (na_xp_rl_warn: lines an outsider can cause). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>
#include <ucs/debug/log_def.h>

#include "common/log.h"
#include "rdma/xp_internal.h"

/* The most verbose level the user asked for: UCX_LOG_LEVEL by name, else
 * UCX's default (warn). A line above it is dropped here, whatever made UCX
 * emit it (a node woken by SIGCONT was seen logging dozens of DEBUG lines
 * without UCX_LOG_LEVEL set). */
static ucs_log_level_t xp_log_max = UCS_LOG_LEVEL_WARN;

static ucs_log_level_t xp_log_user_level(void)
{
    const char *v = getenv("UCX_LOG_LEVEL");
    int i;

    if (v == NULL || v[0] == '\0')
        return UCS_LOG_LEVEL_WARN;
    for (i = 0; i < UCS_LOG_LEVEL_LAST; i++)
        if (ucs_log_level_names[i] != NULL && !strcasecmp(v, ucs_log_level_names[i]))
            return (ucs_log_level_t)i;
    return UCS_LOG_LEVEL_LAST;       /* a name we do not know (e.g. "req"): let UCX decide */
}

static ucs_log_func_rc_t xp_log_stderr(const char *file, unsigned line, const char *function,
                                       ucs_log_level_t level,
                                       const ucs_log_component_config_t *comp_conf,
                                       const char *format, va_list ap)
{
    char msg[1024];
    const char *base = file != NULL ? file : "?";
    const char *s;

    (void)function;
    if (level != UCS_LOG_LEVEL_PRINT && !ucs_log_component_is_enabled(level, comp_conf))
        return UCS_LOG_FUNC_RC_CONTINUE;
    if (level != UCS_LOG_LEVEL_PRINT && level > xp_log_max)
        return UCS_LOG_FUNC_RC_STOP;           /* more verbose than asked: dropped */
    for (s = base; *s != '\0'; s++)
        if (*s == '/')
            base = s + 1;
    vsnprintf(msg, sizeof(msg), format, ap);
    /* one write per line, so lines of several threads do not mix */
    fprintf(stderr, "[%d] %s:%u UCX %s %s\n", (int)getpid(), base, line,
            level < UCS_LOG_LEVEL_LAST ? ucs_log_level_names[level] : "?", msg);
    return UCS_LOG_FUNC_RC_STOP;
}

static void xp_log_once(void)
{
    const char *f = getenv("UCX_LOG_FILE");
    xp_log_max = xp_log_user_level();
    if (f == NULL || f[0] == '\0')
        ucs_log_push_handler(xp_log_stderr);
}

void na_xp_log_setup(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    (void)pthread_once(&once, xp_log_once);
}

/* ---- the log limiter (xp_internal.h) --------------------------------------- */

void na_xp_rl_warn(na_xp_rl_t *rl, const char *fmt, ...)
{
    uint64_t now = na_xp_coarse_ns();
    char line[512];
    va_list ap;

    unsigned burst = rl->burst > 0 ? rl->burst : 1;

    if (rl->last_ns == 0 || now - rl->last_ns >= 1000000000ull) {
        uint64_t gained = rl->last_ns == 0 ? burst : (now - rl->last_ns) / 1000000000ull;
        rl->tokens = rl->tokens + gained > burst ? burst : rl->tokens + (unsigned)gained;
        rl->last_ns = now;
    }
    if (rl->tokens == 0) {
        rl->suppressed++;
        return;
    }
    rl->tokens--;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (rl->suppressed > 0)
        na_log_warn("%s (and %u similar lines left out)", line, rl->suppressed);
    else
        na_log_warn("%s", line);
    rl->suppressed = 0;
}
