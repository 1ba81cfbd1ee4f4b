/* serve/batch_io.h — the two files of `nearattn batch`, in OpenAI's batch
 * format (JSON Lines):
 *
 *   input    one request per line: {"custom_id": "...", "method": "POST",
 *            "url": "/v1/completions" | "/v1/chat/completions", "body": {...}}
 *   results  one record per line: {"id": "batch_req_...", "custom_id": "...",
 *            "response": {"status_code": 200, "request_id": "...", "body": {...}}
 *                        or null,
 *            "error": null or {"code": "...", "message": "...", ["line": N]}}
 *
 * The input is checked line by line when it is loaded: a line that is not a
 * JSON object, lacks a field, names another method or url, or repeats a
 * custom_id is kept as a *bad line* (code + message) that becomes an error
 * record; it never fails the load. Only the envelope is checked here: the
 * body is the serve library's business (serve/oai.h). Bodies are not held in
 * memory: na_batch_in_body() reads a line's again when it is admitted.
 *
 * The results file is only appended to, one whole line per write(2), and
 * locked (flock) against a second writer. Opening it reads the records
 * already there: their requests are *done* and skipped by a resumed run. A
 * last line without its newline (a crash in the middle of a write, or a full
 * disk) is repaired: completed with the newline when it is a whole record,
 * else cut off (ftruncate), and reported either way.
 *
 * A record's key is its custom_id, except for the bad lines that have no
 * usable one (not JSON, custom_id missing or not a string, a repeated
 * custom_id): their error carries "line": N and the key is that line. */
#ifndef NA_BATCH_IO_H
#define NA_BATCH_IO_H

#include <jansson.h>

#include "common/status.h"

#define NA_BATCH_LINE_MAX (8L << 20)  /* longest input line (bytes) */

typedef enum {
    NA_BATCH_URL_COMPLETIONS = 0,     /* /v1/completions */
    NA_BATCH_URL_CHAT        = 1,     /* /v1/chat/completions */
} na_batch_url_t;

/* One input line (blank lines are not counted as requests). */
typedef struct {
    long           line;       /* 1-based line number in the input file */
    long           off, len;   /* its bytes in the file (without the newline) */
    char          *custom_id;  /* owned; NULL when the line has no string custom_id */
    na_batch_url_t url;        /* valid lines only */
    const char    *err_code;   /* NULL: a valid request; else the error record's code
                                  ("invalid_json", "missing_field", "invalid_url", ...) */
    char          *err_msg;    /* owned; the error record's message (bad lines) */
    int            by_line;    /* 1: the record is keyed by line (see above) */
} na_batch_line_t;

typedef struct {
    na_batch_line_t *lines;    /* [n] in file order */
    long             n;
    long             n_bad;    /* lines with err_code set */
    int              fd;       /* the input, for na_batch_in_body */
    char            *path;
} na_batch_in_t;

/* Read and check every line of path. NA_ERR_IO (open, read: names the
 * file), NA_ERR_NOMEM; never for a bad line. */
na_status_t na_batch_in_load(const char *path, na_batch_in_t **in_p);
/* The body of valid line l, read and parsed again (a new reference, the
 * caller json_decref()s it). NA_ERR_IO when the file changed under us. */
na_status_t na_batch_in_body(const na_batch_in_t *in, const na_batch_line_t *l, json_t **body_p);
void        na_batch_in_destroy(na_batch_in_t *in);

typedef struct na_batch_out na_batch_out_t;

/* How opening the results file went. */
typedef struct {
    long records;        /* whole records found (requests done before) */
    long repaired;       /* 1: the last line lacked its newline and was a whole
                            record: the newline was added */
    long cut_bytes;      /* > 0: the last line was cut off (this many bytes) */
} na_batch_out_info_t;

/* Open (create: 0644) path for appending and read what is there. Only an
 * empty file or a results file is taken: NA_ERR_INVALID for a symbolic link
 * (O_NOFOLLOW), a FIFO, device or directory, a file with hard links;
 * NA_ERR_FORMAT (nothing is written to it) for a whole line that is not a
 * result record, or a last line without newline that is neither a whole
 * record nor the start of one (only that start, a write cut by a crash, is
 * cut off). NA_ERR_IO (open, read, ftruncate, write), NA_ERR_BUSY (another
 * process holds it). */
na_status_t na_batch_out_open(const char *path, na_batch_out_t **out_p,
                              na_batch_out_info_t *info_p);
/* 1 when line l's record is in the file already. */
int         na_batch_out_done(const na_batch_out_t *o, const na_batch_line_t *l);
/* Append l's record: response NULL with err_code/err_msg (a line that got no
 * HTTP response), or the response's status_code and body (not stolen; an
 * error body for a 4xx/5xx). One write(2) of the whole line; a short write
 * is cut off again. NA_ERR_IO naming the call. */
na_status_t na_batch_out_write(na_batch_out_t *o, const na_batch_line_t *l, int status_code,
                               json_t *body, const char *err_code, const char *err_msg);
/* fdatasync the file. NA_ERR_IO. */
na_status_t na_batch_out_sync(na_batch_out_t *o);
/* Sync and close (unlocks). NULL is a no-op. */
void        na_batch_out_close(na_batch_out_t *o);

/* The deterministic ids of a record ("batch_req_<16 hex>") and of its
 * response ("req_<16 hex>"), from the key, so that a resumed run writes the
 * same records as one that was never interrupted. buf: >= 32 bytes. */
void        na_batch_record_id(const na_batch_line_t *l, const char *prefix, char *buf,
                               size_t len);

#endif /* NA_BATCH_IO_H */
