/* common/log.h — leveled logging to stderr.
 *
 * Lines look like "2026-11-22T03:01:02.123 [s0] warn: message". The level comes
 * from NA_LOG_LEVEL (error|warn|info|debug, default info) at first use; the tag
 * names the node and is set once by main(). Logging never fails. */
#ifndef NA_LOG_H
#define NA_LOG_H

typedef enum {
    NA_LOG_LEVEL_ERROR = 0,
    NA_LOG_LEVEL_WARN  = 1,
    NA_LOG_LEVEL_INFO  = 2,
    NA_LOG_LEVEL_DEBUG = 3,
} na_log_level_t;

/* Set the tag printed in brackets (a node name); NULL or "" for none. */
void na_log_set_tag(const char *tag);
/* Override the level taken from NA_LOG_LEVEL. */
void na_log_set_level(na_log_level_t level);
int  na_log_enabled(na_log_level_t level);
void na_log(na_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define na_log_error(...) na_log(NA_LOG_LEVEL_ERROR, __VA_ARGS__)
#define na_log_warn(...)  na_log(NA_LOG_LEVEL_WARN, __VA_ARGS__)
#define na_log_info(...)  na_log(NA_LOG_LEVEL_INFO, __VA_ARGS__)
#define na_log_debug(...) \
    do { if (na_log_enabled(NA_LOG_LEVEL_DEBUG)) na_log(NA_LOG_LEVEL_DEBUG, __VA_ARGS__); } while (0)

#endif /* NA_LOG_H */
