/* common/log.c — leveled logging to stderr (see log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static char na_log_tag[32];
static int  na_log_level = -1;

static int na_log_level_from_env(void)
{
    const char *s = getenv("NA_LOG_LEVEL");
    if (s == NULL)                  return NA_LOG_LEVEL_INFO;
    if (!strcasecmp(s, "error"))    return NA_LOG_LEVEL_ERROR;
    if (!strcasecmp(s, "warn"))     return NA_LOG_LEVEL_WARN;
    if (!strcasecmp(s, "debug"))    return NA_LOG_LEVEL_DEBUG;
    return NA_LOG_LEVEL_INFO;
}

void na_log_set_tag(const char *tag)
{
    snprintf(na_log_tag, sizeof(na_log_tag), "%s", tag ? tag : "");
}

void na_log_set_level(na_log_level_t level)
{
    na_log_level = (int)level;
}

int na_log_enabled(na_log_level_t level)
{
    if (na_log_level < 0)
        na_log_level = na_log_level_from_env();
    return (int)level <= na_log_level;
}

void na_log(na_log_level_t level, const char *fmt, ...)
{
    static const char *names[] = { "error", "warn", "info", "debug" };
    char msg[2048], stamp[32];
    struct timespec ts;
    struct tm tm;
    va_list ap;

    if (!na_log_enabled(level))
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    if (na_log_tag[0])
        fprintf(stderr, "%s.%03ld [%s] %s: %s\n", stamp, ts.tv_nsec / 1000000L,
                na_log_tag, names[level], msg);
    else
        fprintf(stderr, "%s.%03ld %s: %s\n", stamp, ts.tv_nsec / 1000000L,
                names[level], msg);
}
