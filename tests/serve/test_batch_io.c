/* tests/unit/test_batch_io.c — serve/batch_io.c: the batch input checked
 * line by line (valid lines, bad JSON, missing fields, another url or
 * method, repeated custom_ids, blank and CRLF lines), bodies read again; the
 * results file appended to, reopened with the done set, its last line
 * repaired (a whole record without newline) or cut (a partial one), a
 * foreign file refused and left as it was (whole lines, a last line without
 * newline, a symbolic link, a hard link, a FIFO), a second writer refused
 * (flock). */
#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve/batch_io.h"
#include "tests/testutil.h"

static const char *const input_text =
    "{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/completions\","
    "\"body\":{\"prompt\":\"Once\",\"max_tokens\":4}}\n"
    "\n"
    "{\"custom_id\":\"b\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\","
    "\"body\":{\"messages\":[]}}\r\n"
    "{not json\n"
    "{\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{}}\n"
    "{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{}}\n"
    "{\"custom_id\":\"c\",\"method\":\"POST\",\"url\":\"/v1/embeddings\",\"body\":{}}\n"
    "{\"custom_id\":\"d\",\"method\":\"GET\",\"url\":\"/v1/completions\",\"body\":{}}\n"
    "{\"custom_id\":\"e\",\"method\":\"POST\",\"url\":\"/v1/completions\"}\n"
    "[1,2]\n"
    "{\"custom_id\":\"f\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":\"x\"}";

static void test_input(const char *dir)
{
    static const struct {
        long        line;
        const char *cid, *code;
        int         by_line;
    } want[] = {
        { 1, "a", NULL, 0 }, { 3, "b", NULL, 0 }, { 4, NULL, "invalid_json", 1 },
        { 5, NULL, "missing_custom_id", 1 }, { 6, "a", "duplicate_custom_id", 1 },
        { 7, "c", "invalid_url", 0 }, { 8, "d", "invalid_method", 0 },
        { 9, "e", "missing_field", 0 }, { 10, NULL, "invalid_request", 1 },
        { 11, "f", "invalid_body", 0 },
    };
    char path[600];
    na_batch_in_t *in = NULL;
    json_t *body = NULL;
    long i;

    snprintf(path, sizeof(path), "%s/in.jsonl", dir);
    NA_CHECK(na_test_write_file(path, input_text, strlen(input_text)) == 0);
    NA_CHECK_OK(na_batch_in_load(path, &in));
    if (in == NULL)
        return;
    NA_CHECK_MSG(in->n == 10, "%ld lines", in->n);
    NA_CHECK(in->n_bad == 8);
    for (i = 0; i < in->n && i < 10; i++) {
        const na_batch_line_t *l = &in->lines[i];
        NA_CHECK_MSG(l->line == want[i].line, "line %ld want %ld", l->line, want[i].line);
        NA_CHECK_MSG((l->custom_id == NULL) == (want[i].cid == NULL) &&
                     (l->custom_id == NULL || !strcmp(l->custom_id, want[i].cid)),
                     "line %ld custom_id", l->line);
        NA_CHECK_MSG((l->err_code == NULL) == (want[i].code == NULL) &&
                     (l->err_code == NULL || !strcmp(l->err_code, want[i].code)),
                     "line %ld code %s", l->line, l->err_code ? l->err_code : "(none)");
        NA_CHECK(l->by_line == want[i].by_line);
        NA_CHECK(l->err_code == NULL || (l->err_msg != NULL && strstr(l->err_msg, "line ")));
    }
    NA_CHECK(in->lines[0].url == NA_BATCH_URL_COMPLETIONS);
    NA_CHECK(in->lines[1].url == NA_BATCH_URL_CHAT);
    NA_CHECK_OK(na_batch_in_body(in, &in->lines[0], &body));
    NA_CHECK(json_integer_value(json_object_get(body, "max_tokens")) == 4);
    json_decref(body);
    NA_CHECK_OK(na_batch_in_body(in, &in->lines[1], &body));   /* the CRLF line */
    NA_CHECK(json_is_array(json_object_get(body, "messages")));
    json_decref(body);
    na_batch_in_destroy(in);
    snprintf(path, sizeof(path), "%s/missing.jsonl", dir);
    NA_CHECK(na_batch_in_load(path, &in) == NA_ERR_IO);
}

/* Open path, expecting st; write records for l[0..n) when it opened. */
static na_batch_out_t *open_out(const char *path, na_batch_out_info_t *info)
{
    na_batch_out_t *o = NULL;
    NA_CHECK_OK(na_batch_out_open(path, &o, info));
    return o;
}

static void test_output(const char *dir)
{
    na_batch_line_t a = { .line = 1, .custom_id = "a" }, b = { .line = 2, .custom_id = "b" };
    na_batch_line_t bad = { .line = 3, .err_code = "invalid_json", .by_line = 1 };
    na_batch_line_t c = { .line = 4, .custom_id = "c" };
    na_batch_out_info_t info;
    na_batch_out_t *o, *o2 = NULL;
    const char *whole = "{\"id\":\"x\",\"custom_id\":\"b\",\"response\":null,\"error\":null}";
    char path[600], *text;
    json_t *body = json_pack("{s:s}", "object", "text_completion");
    size_t len, len2;
    int fd;

    snprintf(path, sizeof(path), "%s/out.jsonl", dir);
    o = open_out(path, &info);
    if (o == NULL)
        return;
    NA_CHECK(info.records == 0 && info.cut_bytes == 0 && !info.repaired);
    NA_CHECK(na_batch_out_open(path, &o2, &info) == NA_ERR_BUSY);     /* flock */
    NA_CHECK_OK(na_batch_out_write(o, &a, 200, body, NULL, NULL));
    NA_CHECK_OK(na_batch_out_write(o, &bad, 0, NULL, "invalid_json", "line 3: not valid JSON"));
    NA_CHECK(na_batch_out_done(o, &a) && na_batch_out_done(o, &bad) && !na_batch_out_done(o, &b));
    na_batch_out_close(o);

    text = na_test_read_file(path, &len);
    NA_CHECK(text != NULL && len > 0 && text[len - 1] == '\n');
    NA_CHECK(text != NULL && strstr(text, "\"custom_id\":\"a\",\"response\":{\"status_code\":200,"
                                           "\"request_id\":\"req_") != NULL);
    NA_CHECK(text != NULL && strstr(text, "\"custom_id\":null,\"response\":null,\"error\":"
                                           "{\"code\":\"invalid_json\"") != NULL);
    NA_CHECK(text != NULL && strstr(text, "\"line\":3}") != NULL);
    free(text);

    /* a crash in the middle of a record: the partial line is cut */
    fd = open(path, O_WRONLY | O_APPEND);
    NA_CHECK(fd >= 0 && write(fd, "{\"id\":\"batch_req_1\",\"custom_id\":\"b\",\"resp", 40) == 40);
    close(fd);
    o = open_out(path, &info);
    NA_CHECK_MSG(info.records == 2 && info.cut_bytes == 40 && !info.repaired,
                 "records %ld cut %ld", info.records, info.cut_bytes);
    NA_CHECK(o != NULL && na_batch_out_done(o, &a) && na_batch_out_done(o, &bad) &&
             !na_batch_out_done(o, &b));
    na_batch_out_close(o);
    text = na_test_read_file(path, &len2);
    NA_CHECK(text != NULL && len2 == len);
    free(text);

    /* a whole record without its newline: completed */
    fd = open(path, O_WRONLY | O_APPEND);
    NA_CHECK(fd >= 0 && write(fd, whole, strlen(whole)) == (ssize_t)strlen(whole));
    close(fd);
    o = open_out(path, &info);
    NA_CHECK(info.records == 3 && info.repaired && info.cut_bytes == 0);
    NA_CHECK(o != NULL && na_batch_out_done(o, &b));
    if (o != NULL)
        NA_CHECK_OK(na_batch_out_write(o, &c, 200, body, NULL, NULL));
    na_batch_out_close(o);
    o = open_out(path, &info);
    NA_CHECK(info.records == 4 && !info.repaired && info.cut_bytes == 0);
    NA_CHECK(o != NULL && na_batch_out_done(o, &c));
    na_batch_out_close(o);

    /* not a results file: refused, left alone */
    snprintf(path, sizeof(path), "%s/other.txt", dir);
    NA_CHECK(na_test_write_file(path, "hello\nworld\n", 12) == 0);
    o = NULL;
    NA_CHECK(na_batch_out_open(path, &o, &info) == NA_ERR_FORMAT && o == NULL);
    text = na_test_read_file(path, &len);
    NA_CHECK(text != NULL && len == 12);
    free(text);
    json_decref(body);
}

/* What is not a results file (or empty) is refused and left as it was. */
static void test_output_foreign(const char *dir)
{
    static const char keep[] = "line one\nno newline at the end";
    char path[600], other[600];
    na_batch_out_info_t info;
    na_batch_out_t *o = NULL;
    size_t len;
    char *text;

    /* whole lines then a last line without newline that are no records */
    snprintf(path, sizeof(path), "%s/notes.txt", dir);
    NA_CHECK(na_test_write_file(path, keep, sizeof(keep) - 1) == 0);
    NA_CHECK(na_batch_out_open(path, &o, &info) == NA_ERR_FORMAT && o == NULL);
    snprintf(path, sizeof(path), "%s/one.txt", dir);       /* one line, no newline: was emptied */
    NA_CHECK(na_test_write_file(path, "hello", 5) == 0);
    NA_CHECK(na_batch_out_open(path, &o, &info) == NA_ERR_FORMAT && o == NULL);
    NA_CHECK_MSG(strstr(na_errmsg(), "neither whole") != NULL, "%s", na_errmsg());
    text = na_test_read_file(path, &len);
    NA_CHECK(text != NULL && len == 5);
    free(text);

    /* a symbolic link to it, a hard link of it, a FIFO */
    snprintf(path, sizeof(path), "%s/notes.txt", dir);
    snprintf(other, sizeof(other), "%s/link.jsonl", dir);
    NA_CHECK(symlink(path, other) == 0);
    NA_CHECK(na_batch_out_open(other, &o, &info) == NA_ERR_INVALID && o == NULL);
    NA_CHECK_MSG(strstr(na_errmsg(), "symbolic link") != NULL, "%s", na_errmsg());
    snprintf(other, sizeof(other), "%s/hard.jsonl", dir);
    NA_CHECK(link(path, other) == 0);
    NA_CHECK(na_batch_out_open(other, &o, &info) == NA_ERR_INVALID && o == NULL);
    NA_CHECK_MSG(strstr(na_errmsg(), "hard links") != NULL, "%s", na_errmsg());
    text = na_test_read_file(path, &len);
    NA_CHECK(text != NULL && len == sizeof(keep) - 1 && !memcmp(text, keep, len));
    free(text);
    snprintf(other, sizeof(other), "%s/fifo", dir);
    NA_CHECK(mkfifo(other, 0600) == 0);
    NA_CHECK(na_batch_out_open(other, &o, &info) == NA_ERR_INVALID && o == NULL);
    NA_CHECK_MSG(strstr(na_errmsg(), "not a regular file") != NULL, "%s", na_errmsg());

    /* an empty file is taken */
    snprintf(path, sizeof(path), "%s/empty.jsonl", dir);
    NA_CHECK(na_test_write_file(path, "", 0) == 0);
    o = open_out(path, &info);
    NA_CHECK(o != NULL && info.records == 0);
    na_batch_out_close(o);
}

/* Lines that cannot be held: one longer than NA_BATCH_LINE_MAX is reported
 * (its length named) and the next line still read; what is not a regular
 * file (/dev/zero read as empty: glibc's getline gave up with ENOMEM and no
 * error flag; a FIFO waited) is refused at once. */
static void test_input_bounds(const char *dir)
{
    const size_t big = (size_t)NA_BATCH_LINE_MAX + 100;
    const char *next = "{\"custom_id\":\"n\",\"method\":\"POST\",\"url\":\"/v1/completions\","
                       "\"body\":{\"prompt\":\"x\"}}\n";
    char path[600], want[64];
    na_batch_in_t *in = NULL;
    char *text = malloc(big + 256);
    int k;

    NA_CHECK(text != NULL);
    if (text == NULL)
        return;
    for (k = 0; k < 2; k++) {               /* the long line first, then last without newline */
        size_t n = 0;
        if (k == 1) {
            memcpy(text, next, strlen(next));
            n = strlen(next);
        }
        memset(text + n, 'x', big);
        n += big;
        if (k == 0) {
            text[n++] = '\n';
            memcpy(text + n, next, strlen(next));
            n += strlen(next);
        }
        snprintf(path, sizeof(path), "%s/long%d.jsonl", dir, k);
        NA_CHECK(na_test_write_file(path, text, n) == 0);
        in = NULL;
        NA_CHECK_OK(na_batch_in_load(path, &in));
        NA_CHECK(in != NULL && in->n == 2 && in->n_bad == 1);
        if (in != NULL && in->n == 2) {
            const na_batch_line_t *l = &in->lines[k == 0 ? 0 : 1], *g = &in->lines[k == 0 ? 1 : 0];
            snprintf(want, sizeof(want), "%zu bytes", big);
            NA_CHECK(l->err_code != NULL && !strcmp(l->err_code, "line_too_long"));
            NA_CHECK_MSG(l->err_msg != NULL && strstr(l->err_msg, want) != NULL, "%s",
                         l->err_msg ? l->err_msg : "(none)");
            NA_CHECK(g->err_code == NULL && g->custom_id != NULL && !strcmp(g->custom_id, "n"));
        }
        na_batch_in_destroy(in);
    }
    free(text);
    in = NULL;
    NA_CHECK(na_batch_in_load("/dev/zero", &in) == NA_ERR_INVALID && in == NULL);
    NA_CHECK_MSG(strstr(na_errmsg(), "not a regular file") != NULL, "%s", na_errmsg());
    snprintf(path, sizeof(path), "%s/in.fifo", dir);
    NA_CHECK(mkfifo(path, 0600) == 0);
    NA_CHECK(na_batch_in_load(path, &in) == NA_ERR_INVALID && in == NULL);
}

/* A bad line whose JSON error quotes a token cut inside a UTF-8 character
 * ("invalid escape near '"\<c3>'): its record is written (the message made
 * valid UTF-8) and read back; the run stopped at that line before. */
static void test_utf8_error(const char *dir)
{
    const char *text = "{\"custom_id\":\"u\",\"method\":\"POST\",\"url\":\"/v1/completions\","
                       "\"body\":{\"prompt\":\"\\\xc3\xa9\"}}\n";
    char path[600], out[600];
    na_batch_in_t *in = NULL;
    na_batch_out_info_t info;
    na_batch_out_t *o;

    snprintf(path, sizeof(path), "%s/utf8.jsonl", dir);
    snprintf(out, sizeof(out), "%s/utf8.out.jsonl", dir);
    NA_CHECK(na_test_write_file(path, text, strlen(text)) == 0);
    NA_CHECK_OK(na_batch_in_load(path, &in));
    if (in == NULL)
        return;
    NA_CHECK(in->n == 1 && in->lines[0].err_code != NULL &&
             !strcmp(in->lines[0].err_code, "invalid_json"));
    o = open_out(out, &info);
    if (o != NULL && in->n == 1) {
        NA_CHECK_OK(na_batch_out_write(o, &in->lines[0], 0, NULL, in->lines[0].err_code,
                                       in->lines[0].err_msg));
        /* a message from elsewhere holding bytes that are no UTF-8 */
        na_batch_line_t other = { .line = 7, .custom_id = "w" };
        NA_CHECK_OK(na_batch_out_write(o, &other, 0, NULL, "error", "bad \xff \xc3"));
    }
    na_batch_out_close(o);
    o = open_out(out, &info);
    NA_CHECK(o != NULL && info.records == 2 && na_batch_out_done(o, &in->lines[0]));
    na_batch_out_close(o);
    na_batch_in_destroy(in);
}

int main(void)
{
    char dir[512];

    if (na_test_tmpdir(dir, sizeof(dir)) != 0)
        return 1;
    test_input(dir);
    test_output(dir);
    test_output_foreign(dir);
    test_utf8_error(dir);
    test_input_bounds(dir);
    na_test_rmtree(dir);
    return na_test_finish();
}
