/* common/status.h — the one status type of nearattn.
 *
 * 0 is success, 1 means "in progress" (an asynchronous operation was queued),
 * negative values are errors. The function that detects an error records a
 * one-line message with na_err(); callers propagate the status unchanged and
 * the outermost caller (main, a node's loop) prints na_errmsg() once. */
#ifndef NA_STATUS_H
#define NA_STATUS_H

typedef enum {
    NA_OK              =   0,
    NA_INPROGRESS      =   1,
    NA_ERR_INVALID     =  -1,  /* bad argument or user input */
    NA_ERR_NOMEM       =  -2,  /* allocation failed */
    NA_ERR_IO          =  -3,  /* a system call on a file or device failed */
    NA_ERR_FORMAT      =  -4,  /* malformed file or data (model, YAML, tokenizer) */
    NA_ERR_RANGE       =  -5,  /* a value outside its sane bounds */
    NA_ERR_NOT_FOUND   =  -6,  /* unknown name, id, key or file */
    NA_ERR_TIMEOUT     =  -7,  /* a bounded wait ran out */
    NA_ERR_PEER        =  -8,  /* a peer was lost or refused us */
    NA_ERR_PROTO       =  -9,  /* a wire message failed validation */
    NA_ERR_AUTH        = -10,  /* the peer could not prove the cluster secret */
    NA_ERR_NOSPACE     = -11,  /* a budget, queue or disk is full */
    NA_ERR_UNSUPPORTED = -12,  /* valid, but not implemented / not available here */
    NA_ERR_BUSY        = -13,  /* resource in use (a port taken, a slot busy) */
    NA_ERR_TRANSPORT   = -14,  /* the transport library reported an error */
    NA_ERR_CANCELED    = -15,  /* the operation was canceled (shutdown) */
    NA_ERR_INTERNAL    = -16,  /* a bug: an invariant did not hold */
    NA_ERR_VERSION     = -17,  /* a peer or file of another version */
} na_status_t;

/* Static name of a status ("invalid argument", ...). Never NULL. */
const char *na_status_string(na_status_t st);

/* Record a one-line error message for the calling thread (printf-style) and
 * return st unchanged, so a detector can write:
 *     return na_err(NA_ERR_FORMAT, "%s: header field 'dim' = %d out of range", path, dim);
 * The message replaces the previous one. */
na_status_t na_err(na_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prefix the calling thread's current message with more context
 * ("while loading model: ") and return st unchanged. */
na_status_t na_err_prefix(na_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The calling thread's last recorded message, or "" if none. */
const char *na_errmsg(void);

/* Forget the calling thread's message. */
void na_err_clear(void);

#endif /* NA_STATUS_H */
