/* serve/batch_io.c — the input and results files of `nearattn batch`
 * (serve/batch_io.h): the input checked line by line, the results file
 * read for resume, repaired, locked and appended to one whole line at a
 * time. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fnv.h"
#include "serve/batch_io.h"
#include "serve/gen.h"

struct na_batch_out {
    int     fd;
    char   *path;
    off_t   size;      /* the file's length: everything up to here is whole lines */
    json_t *ids;       /* custom_ids done (object used as a set) */
    json_t *lines;     /* input lines done, for records keyed by line ("%ld") */
};

/* ---- input ---- */

/* Make *s (malloc'd) valid UTF-8, invalid bytes as U+FFFD: a message that
 * quotes the input (jansson's error text holds the bad token, cut at its
 * own limit, maybe inside a character) must still fit in a JSON record.
 * 0, or -1 out of memory (*s unchanged). */
static int bio_utf8_fix(char **s)
{
    size_t n = strlen(*s);
    char *t = malloc(3 * n + 1);

    if (t == NULL)
        return -1;
    na_sg_utf8_clean(*s, n, t);
    free(*s);
    *s = t;
    return 0;
}

/* Mark l bad: code and printf-style message (NA_ERR_NOMEM). */
static na_status_t bio_bad(na_batch_in_t *in, na_batch_line_t *l, const char *code, int by_line,
                           const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static na_status_t bio_bad(na_batch_in_t *in, na_batch_line_t *l, const char *code, int by_line,
                           const char *fmt, ...)
{
    va_list ap;
    int r;

    va_start(ap, fmt);
    r = vasprintf(&l->err_msg, fmt, ap);
    va_end(ap);
    if (r < 0) {
        l->err_msg = NULL;
        return na_err(NA_ERR_NOMEM, "batch input: out of memory");
    }
    if (bio_utf8_fix(&l->err_msg) != 0)
        return na_err(NA_ERR_NOMEM, "batch input: out of memory");
    l->err_code = code;
    l->by_line = by_line;
    in->n_bad++;
    return NA_OK;
}

/* Check one line's envelope into l; ids: the custom_ids seen so far. */
static na_status_t bio_check(na_batch_in_t *in, na_batch_line_t *l, const char *text,
                             json_t *ids)
{
    json_error_t je;
    json_t *root, *cid, *method, *url, *body;
    na_status_t st = NA_OK;

    if (l->len > NA_BATCH_LINE_MAX)
        return bio_bad(in, l, "line_too_long", 1, "line %ld: %ld bytes, more than the %ld "
                       "a request line may have", l->line, l->len, NA_BATCH_LINE_MAX);
    root = json_loadb(text, (size_t)l->len, 0, &je);
    if (root == NULL)
        return bio_bad(in, l, "invalid_json", 1, "line %ld: not valid JSON (column %d: %s)",
                       l->line, je.column, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return bio_bad(in, l, "invalid_request", 1, "line %ld: not a JSON object", l->line);
    }
    cid = json_object_get(root, "custom_id");
    if (!json_is_string(cid) || json_string_length(cid) == 0) {
        st = bio_bad(in, l, "missing_custom_id", 1, "line %ld: \"custom_id\" %s", l->line,
                     cid == NULL ? "is missing" : "must be a non-empty string");
        goto out;
    }
    l->custom_id = strdup(json_string_value(cid));
    if (l->custom_id == NULL) {
        st = na_err(NA_ERR_NOMEM, "batch input: out of memory");
        goto out;
    }
    if (json_object_get(ids, l->custom_id) != NULL) {
        st = bio_bad(in, l, "duplicate_custom_id", 1, "line %ld: custom_id \"%s\" was used "
                     "by an earlier line (custom_ids must be unique)", l->line, l->custom_id);
        goto out;
    }
    if (json_object_set_new(ids, l->custom_id, json_integer(l->line)) != 0) {
        st = na_err(NA_ERR_NOMEM, "batch input: out of memory");
        goto out;
    }
    method = json_object_get(root, "method");
    url = json_object_get(root, "url");
    body = json_object_get(root, "body");
    if (method == NULL || url == NULL || body == NULL)
        st = bio_bad(in, l, "missing_field", 0, "line %ld: \"%s\" is missing", l->line,
                     method == NULL ? "method" : url == NULL ? "url" : "body");
    else if (!json_is_string(method) || strcmp(json_string_value(method), "POST"))
        st = bio_bad(in, l, "invalid_method", 0, "line %ld: \"method\" must be \"POST\"",
                     l->line);
    else if (json_is_string(url) && !strcmp(json_string_value(url), "/v1/completions"))
        l->url = NA_BATCH_URL_COMPLETIONS;
    else if (json_is_string(url) && !strcmp(json_string_value(url), "/v1/chat/completions"))
        l->url = NA_BATCH_URL_CHAT;
    else
        st = bio_bad(in, l, "invalid_url", 0, "line %ld: \"url\" %s%s%s is not served (use "
                     "/v1/completions or /v1/chat/completions)", l->line,
                     json_is_string(url) ? "\"" : "", json_is_string(url) ?
                     json_string_value(url) : "(not a string)", json_is_string(url) ? "\"" : "");
    if (st == NA_OK && l->err_code == NULL && !json_is_object(body))
        st = bio_bad(in, l, "invalid_body", 0, "line %ld: \"body\" must be a JSON object",
                     l->line);
out:
    json_decref(root);
    return st;
}

/* 1 when the n bytes at s are all blank. */
static int bio_blank(const char *s, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return 0;
    return 1;
}

/* Read the next line of f: at most NA_BATCH_LINE_MAX + 2 bytes of it are
 * kept in *buf (grown as needed, so a longer line costs no more memory: it
 * is read to its end and reported too long), *kept of them; *used = bytes it
 * takes in the file, newline included (0 at the end of the file), *newline
 * whether it ended with one. NA_OK,
 * NA_ERR_IO (a read error) or NA_ERR_NOMEM. (glibc's getline returns -1 on
 * ENOMEM without an error flag: the rest of the input read as absent.) */
static na_status_t bio_getline(FILE *f, const char *path, char **buf, size_t *cap,
                               size_t *kept, long *used, int *newline)
{
    const size_t keep_max = (size_t)NA_BATCH_LINE_MAX + 2;
    size_t n = 0;
    long total = 0;
    int c;

    while ((c = getc_unlocked(f)) != EOF) {
        total++;
        if (n < keep_max) {
            if (n + 1 >= *cap) {
                size_t nc = *cap < 4096 ? 4096 : 2 * *cap;
                char *nb;
                if (nc > keep_max + 1)
                    nc = keep_max + 1;
                nb = realloc(*buf, nc);
                if (nb == NULL)
                    return na_err(NA_ERR_NOMEM, "batch input %s: out of memory for line "
                                  "bytes (%zu)", path, nc);
                *buf = nb;
                *cap = nc;
            }
            (*buf)[n++] = (char)c;
        }
        if (c == '\n')
            break;
    }
    *newline = c == '\n';
    if (ferror(f))
        return na_err(NA_ERR_IO, "cannot read the input %s: %s", path, strerror(errno));
    *kept = n;
    *used = total;
    return NA_OK;
}

na_status_t na_batch_in_load(const char *path, na_batch_in_t **in_p)
{
    na_batch_in_t *in;
    json_t *ids = json_object();
    char *buf = NULL;
    size_t cap = 0, kept = 0;
    long lineno = 0, off = 0, room = 0, got = 0;
    int nl = 0;
    na_status_t st = NA_OK;
    struct stat sb;
    FILE *f;

    in = calloc(1, sizeof(*in));
    if (in == NULL || ids == NULL) {
        free(in);
        json_decref(ids);
        return na_err(NA_ERR_NOMEM, "batch input: out of memory");
    }
    /* O_NONBLOCK: a FIFO is refused below instead of waiting for a writer */
    in->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    in->path = strdup(path);
    if (in->fd < 0 || in->path == NULL) {
        st = in->fd < 0 ? na_err(NA_ERR_IO, "cannot open the input %s: %s", path,
                                 strerror(errno))
                        : na_err(NA_ERR_NOMEM, "batch input: out of memory");
        goto fail;
    }
    if (fstat(in->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = na_err(NA_ERR_INVALID, "the input %s is not a regular file (a pipe, FIFO or "
                    "device): batch reads request bodies again by offset, give a file", path);
        goto fail;
    }
    {
        int fd = dup(in->fd);
        f = fd >= 0 ? fdopen(fd, "r") : NULL;
        if (f == NULL) {
            st = na_err(NA_ERR_IO, "cannot read the input %s: %s", path, strerror(errno));
            if (fd >= 0)
                close(fd);
            goto fail;
        }
    }
    while (st == NA_OK && (st = bio_getline(f, path, &buf, &cap, &kept, &got, &nl)) == NA_OK &&
           got > 0) {
        long len = (long)kept;
        na_batch_line_t *l;

        lineno++;
        if ((size_t)got > kept) {            /* too long: only its start is held */
            len = got - nl;
        } else {
            if (buf[len - 1] == '\n')
                len--;
            if (len > 0 && buf[len - 1] == '\r')
                len--;
        }
        if (bio_blank(buf, len < (long)kept ? (size_t)len : kept)) {
            off += got;
            continue;
        }
        if (in->n == room) {
            na_batch_line_t *nl;
            room = room ? 2 * room : 256;
            nl = realloc(in->lines, (size_t)room * sizeof(*nl));
            if (nl == NULL) {
                st = na_err(NA_ERR_NOMEM, "batch input: out of memory");
                break;
            }
            in->lines = nl;
        }
        l = &in->lines[in->n++];
        memset(l, 0, sizeof(*l));
        l->line = lineno;
        l->off = off;
        l->len = len;
        st = bio_check(in, l, buf, ids);
        off += got;
    }
    fclose(f);
    free(buf);
    json_decref(ids);
    if (st != NA_OK) {
        na_batch_in_destroy(in);
        return st;
    }
    *in_p = in;
    return NA_OK;
fail:
    json_decref(ids);
    na_batch_in_destroy(in);
    return st;
}

na_status_t na_batch_in_body(const na_batch_in_t *in, const na_batch_line_t *l, json_t **body_p)
{
    json_error_t je;
    json_t *root, *body;
    char *buf = malloc((size_t)l->len + 1);
    ssize_t got;

    if (buf == NULL)
        return na_err(NA_ERR_NOMEM, "batch input: out of memory");
    got = pread(in->fd, buf, (size_t)l->len, (off_t)l->off);
    root = got == (ssize_t)l->len ? json_loadb(buf, (size_t)l->len, 0, &je) : NULL;
    free(buf);
    body = json_object_get(root, "body");
    if (!json_is_object(body)) {
        json_decref(root);
        return na_err(NA_ERR_IO, "%s changed while the batch ran (line %ld is not what it "
                      "was): do not edit the input of a running batch", in->path, l->line);
    }
    json_incref(body);
    json_decref(root);
    *body_p = body;
    return NA_OK;
}

void na_batch_in_destroy(na_batch_in_t *in)
{
    long i;

    if (in == NULL)
        return;
    for (i = 0; i < in->n; i++) {
        free(in->lines[i].custom_id);
        free(in->lines[i].err_msg);
    }
    free(in->lines);
    if (in->fd >= 0)
        close(in->fd);
    free(in->path);
    free(in);
}

/* ---- results ---- */

/* Take one whole record line into the done sets: 0, or -1 when it is not a
 * result record. */
static int bout_take(na_batch_out_t *o, const char *s, size_t n)
{
    json_t *rec = json_loadb(s, n, 0, NULL), *cid, *line;
    char key[32];
    int r = -1;

    cid = json_object_get(rec, "custom_id");
    line = json_object_get(json_object_get(rec, "error"), "line");
    if (json_is_object(rec) && (json_is_string(cid) || json_is_null(cid))) {
        r = 0;
        if (json_is_integer(line)) {
            snprintf(key, sizeof(key), "%lld", (long long)json_integer_value(line));
            r = json_object_set_new(o->lines, key, json_true());
        } else if (json_is_string(cid)) {
            r = json_object_set_new(o->ids, json_string_value(cid), json_true());
        }
    }
    json_decref(rec);
    return r;
}

/* How every record line starts (na_batch_out_write: json_pack keeps the key
 * order, JSON_COMPACT). */
#define NA_BATCH_REC_START "{\"id\":\"batch_req_"

/* The last line lacked its newline: a whole record gets it; the start of a
 * record (a write cut by a crash) is cut off at off (where the line
 * starts); anything else is refused, the file left as it is: it is not a
 * results file of ours. */
static na_status_t bout_repair(na_batch_out_t *o, const char *frag, size_t n, off_t off,
                               na_batch_out_info_t *info)
{
    size_t k = strlen(NA_BATCH_REC_START);

    if (bout_take(o, frag, n) == 0) {
        if (write(o->fd, "\n", 1) != 1)
            return na_err(NA_ERR_IO, "write %s: %s", o->path, strerror(errno));
        info->records++;
        info->repaired = 1;
        o->size = off + (off_t)n + 1;
        return NA_OK;
    }
    if (memcmp(frag, NA_BATCH_REC_START, n < k ? n : k) != 0)
        return na_err(NA_ERR_FORMAT, "%s ends with a line that is neither whole nor the start "
                      "of a batch result record: is it the results file of this batch? "
                      "(nothing was written to it)", o->path);
    if (ftruncate(o->fd, off) != 0)
        return na_err(NA_ERR_IO, "ftruncate %s: %s", o->path, strerror(errno));
    info->cut_bytes = (long)n;
    o->size = off;
    return NA_OK;
}

/* Read the file line by line into the done sets; repair its last line. */
static na_status_t bout_scan(na_batch_out_t *o, na_batch_out_info_t *info)
{
    int fd = dup(o->fd);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t got;
    off_t off = 0;
    long lineno = 0;
    na_status_t st = NA_OK;

    if (f == NULL) {
        st = na_err(NA_ERR_IO, "cannot read %s: %s", o->path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return st;
    }
    rewind(f);
    o->size = 0;
    while ((got = getline(&buf, &cap, f)) > 0) {
        lineno++;
        if (buf[got - 1] != '\n') {           /* the last line lacks its newline */
            st = bout_repair(o, buf, (size_t)got, off, info);
            break;
        }
        off += (off_t)got;
        o->size = off;
        if (bio_blank(buf, (size_t)got))
            continue;
        if (bout_take(o, buf, (size_t)got - 1) != 0) {
            st = na_err(NA_ERR_FORMAT, "%s line %ld is not a batch result record: is it the "
                        "results file of this batch? (nothing was written to it)", o->path,
                        lineno);
            break;
        }
        info->records++;
    }
    if (st == NA_OK && ferror(f))
        st = na_err(NA_ERR_IO, "cannot read %s: %s", o->path, strerror(errno));
    free(buf);
    fclose(f);
    return st;
}

na_status_t na_batch_out_open(const char *path, na_batch_out_t **out_p,
                              na_batch_out_info_t *info_p)
{
    na_batch_out_t *o = calloc(1, sizeof(*o));
    na_status_t st;

    memset(info_p, 0, sizeof(*info_p));
    if (o == NULL)
        return na_err(NA_ERR_NOMEM, "results: out of memory");
    o->fd = -1;
    o->path = strdup(path);
    o->ids = json_object();
    o->lines = json_object();
    if (o->path == NULL || o->ids == NULL || o->lines == NULL) {
        st = na_err(NA_ERR_NOMEM, "results: out of memory");
        goto fail;
    }
    /* never through a symbolic link, never a FIFO or device (O_NONBLOCK: the
     * open itself does not wait), never a file with another name */
    o->fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
                 0644);
    if (o->fd < 0) {
        st = errno == ELOOP
           ? na_err(NA_ERR_INVALID, "the output %s is a symbolic link: refused (give the "
                    "file it points to)", path)
           : na_err(NA_ERR_IO, "cannot open the output %s: %s", path, strerror(errno));
        goto fail;
    }
    {
        struct stat sb;
        if (fstat(o->fd, &sb) != 0) {
            st = na_err(NA_ERR_IO, "fstat %s: %s", path, strerror(errno));
            goto fail;
        }
        if (!S_ISREG(sb.st_mode)) {
            st = na_err(NA_ERR_INVALID, "the output %s is not a regular file (a FIFO, device "
                        "or directory): refused", path);
            goto fail;
        }
        if (sb.st_nlink > 1) {
            st = na_err(NA_ERR_INVALID, "the output %s has other names (hard links): refused",
                        path);
            goto fail;
        }
    }
    if (flock(o->fd, LOCK_EX | LOCK_NB) != 0) {
        st = errno == EWOULDBLOCK
           ? na_err(NA_ERR_BUSY, "%s is being written by another process (another nearattn "
                    "batch?): wait for it or choose another --output", path)
           : na_err(NA_ERR_IO, "flock %s: %s", path, strerror(errno));
        goto fail;
    }
    st = bout_scan(o, info_p);
    if (st != NA_OK)
        goto fail;
    *out_p = o;
    return NA_OK;
fail:
    if (o->fd >= 0)
        close(o->fd);
    o->fd = -1;
    na_batch_out_close(o);
    return st;
}

int na_batch_out_done(const na_batch_out_t *o, const na_batch_line_t *l)
{
    char key[32];

    if (l->by_line) {
        snprintf(key, sizeof(key), "%ld", l->line);
        return json_object_get(o->lines, key) != NULL;
    }
    return l->custom_id != NULL && json_object_get(o->ids, l->custom_id) != NULL;
}

void na_batch_record_id(const na_batch_line_t *l, const char *prefix, char *buf, size_t len)
{
    char key[32];
    uint64_t h;

    if (l->by_line || l->custom_id == NULL) {
        snprintf(key, sizeof(key), "line:%ld", l->line);
        h = na_fnv1a64(key, strlen(key));
    } else {
        h = na_fnv1a64(l->custom_id, strlen(l->custom_id));
    }
    snprintf(buf, len, "%s%016llx", prefix, (unsigned long long)h);
}

/* Append the n bytes at s as they are; a short write is cut off again. */
static na_status_t bout_append(na_batch_out_t *o, const char *s, size_t n)
{
    size_t done = 0;
    ssize_t w;

    while (done < n) {
        w = write(o->fd, s + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            if (ftruncate(o->fd, o->size) != 0)
                return na_err(NA_ERR_IO, "write %s: %s, and ftruncate to cut the partial line: "
                              "%s (a resumed run repairs it)", o->path, strerror(e),
                              strerror(errno));
            return na_err(NA_ERR_IO, "write %s: %s", o->path, strerror(e));
        }
        done += (size_t)w;
    }
    o->size += (off_t)n;
    return NA_OK;
}

na_status_t na_batch_out_write(na_batch_out_t *o, const na_batch_line_t *l, int status_code,
                               json_t *body, const char *err_code, const char *err_msg)
{
    char rid[40], qid[40];
    json_t *rec, *resp = NULL, *err = NULL;
    char *text, *line;
    size_t n;
    na_status_t st;

    na_batch_record_id(l, "batch_req_", rid, sizeof(rid));
    na_batch_record_id(l, "req_", qid, sizeof(qid));
    if (body != NULL)
        resp = json_pack("{s:i, s:s, s:O}", "status_code", status_code, "request_id", qid,
                         "body", body);
    else {
        char *msg = strdup(err_msg != NULL ? err_msg : "");
        if (msg != NULL && bio_utf8_fix(&msg) == 0)   /* a message quoting input bytes */
            err = json_pack("{s:s, s:s}", "code", err_code != NULL ? err_code : "error",
                            "message", msg);
        free(msg);
    }
    if (err != NULL && l->by_line &&
        json_object_set_new(err, "line", json_integer(l->line)) != 0) {
        json_decref(err);
        err = NULL;
    }
    rec = resp == NULL && err == NULL ? NULL :
          json_pack("{s:s, s:s?, s:o, s:o}", "id", rid, "custom_id", l->custom_id,
                    "response", resp != NULL ? resp : json_null(),
                    "error", err != NULL ? err : json_null());
    text = rec != NULL ? json_dumps(rec, JSON_COMPACT) : NULL;
    json_decref(rec);
    if (text == NULL)
        return na_err(NA_ERR_NOMEM, "results: cannot build the record of line %ld", l->line);
    n = strlen(text);
    line = realloc(text, n + 2);
    if (line == NULL) {
        free(text);
        return na_err(NA_ERR_NOMEM, "results: out of memory");
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    st = bout_append(o, line, n + 1);
    free(line);
    if (st != NA_OK)
        return st;
    if (l->by_line) {
        char key[32];
        snprintf(key, sizeof(key), "%ld", l->line);
        json_object_set_new(o->lines, key, json_true());
    } else if (l->custom_id != NULL) {
        json_object_set_new(o->ids, l->custom_id, json_true());
    }
    return NA_OK;
}

na_status_t na_batch_out_sync(na_batch_out_t *o)
{
    if (fdatasync(o->fd) != 0)
        return na_err(NA_ERR_IO, "fdatasync %s: %s", o->path, strerror(errno));
    return NA_OK;
}

void na_batch_out_close(na_batch_out_t *o)
{
    if (o == NULL)
        return;
    if (o->fd >= 0) {
        (void)fdatasync(o->fd);
        close(o->fd);           /* drops the flock */
    }
    json_decref(o->ids);
    json_decref(o->lines);
    free(o->path);
    free(o);
}
