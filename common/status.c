/* common/status.c — status names and the per-thread last error message. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define NA_ERRMSG_MAX 1024

static _Thread_local char na_errbuf[NA_ERRMSG_MAX];

const char *na_status_string(na_status_t st)
{
    switch (st) {
    case NA_OK:              return "ok";
    case NA_INPROGRESS:      return "in progress";
    case NA_ERR_INVALID:     return "invalid argument";
    case NA_ERR_NOMEM:       return "out of memory";
    case NA_ERR_IO:          return "I/O error";
    case NA_ERR_FORMAT:      return "malformed data";
    case NA_ERR_RANGE:       return "value out of range";
    case NA_ERR_NOT_FOUND:   return "not found";
    case NA_ERR_TIMEOUT:     return "timed out";
    case NA_ERR_PEER:        return "peer lost";
    case NA_ERR_PROTO:       return "protocol error";
    case NA_ERR_AUTH:        return "authentication failed";
    case NA_ERR_NOSPACE:     return "no space left";
    case NA_ERR_UNSUPPORTED: return "unsupported";
    case NA_ERR_BUSY:        return "busy";
    case NA_ERR_TRANSPORT:   return "transport error";
    case NA_ERR_CANCELED:    return "canceled";
    case NA_ERR_INTERNAL:    return "internal error";
    case NA_ERR_VERSION:     return "version mismatch";
    }
    return "unknown status";
}

na_status_t na_err(na_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(na_errbuf, sizeof(na_errbuf), fmt, ap);
    va_end(ap);
    return st;
}

na_status_t na_err_prefix(na_status_t st, const char *fmt, ...)
{
    char old[NA_ERRMSG_MAX];
    size_t n;
    va_list ap;

    memcpy(old, na_errbuf, sizeof(old));
    va_start(ap, fmt);
    vsnprintf(na_errbuf, sizeof(na_errbuf), fmt, ap);
    va_end(ap);
    n = strlen(na_errbuf);
    if (n < sizeof(na_errbuf) - 1) {
        snprintf(na_errbuf + n, sizeof(na_errbuf) - n, "%s",
                 old[0] ? old : na_status_string(st));
    }
    return st;
}

const char *na_errmsg(void)
{
    return na_errbuf;
}

void na_err_clear(void)
{
    na_errbuf[0] = '\0';
}
