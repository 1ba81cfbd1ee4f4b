/* tests/fuzz/fuzz_batch.c — hostile batch input files for `nearattn batch`
 * (serve/batch_io.c, the line checks; serve/oai.c, the bodies).
 *
 * Each input is a whole JSONL file: written to a temporary file and loaded
 * (na_batch_in_load: the only failures allowed are refusals, never
 * NA_ERR_INTERNAL). Then every line gets its record in a fresh results file,
 * as the job would write it: a bad line its error record, a good line its
 * body read again (na_batch_in_body, must succeed) and parsed
 * (na_oai_parse): its 400 error body, or a 200 record. Every write must
 * succeed — a record that could not be built stopped the run at that line
 * on every rerun (issue 22 item 9) — and reopening the results file must
 * find every record (the resume scan). Driver and builds:
 * tests/fuzz/fuzz_text.h; default 8000 iterations under ctest. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve/batch_io.h"
#include "serve/oai.h"
#include "tests/fuzz/fuzz_text.h"
#include "tests/testutil.h"

/* Write line l's record as the job would: NA_OK or the failure. */
static na_status_t fuzz_record(na_batch_out_t *o, const na_batch_in_t *in,
                               const na_batch_line_t *l)
{
    na_oai_kind_t kind = l->url == NA_BATCH_URL_CHAT ? NA_OAI_CHAT : NA_OAI_COMPLETION;
    na_chat_t chat = NA_CHAT_CHATML;
    na_oai_req_t r;
    na_oai_error_t e;
    json_t *body, *out;
    char *text;
    na_status_t st;
    int http;

    if (l->err_code != NULL)
        return na_batch_out_write(o, l, 0, NULL, l->err_code, l->err_msg);
    st = na_batch_in_body(in, l, &body);
    if (!fuzz_expect(st == NA_OK, "line %ld: the body does not read again: %s", l->line,
                          na_errmsg()))
        return NA_OK;
    text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (text == NULL)
        return na_err(NA_ERR_NOMEM, "out of memory");
    http = na_oai_parse(kind, text, strlen(text), &chat, NULL, &r, &e);
    free(text);
    if (http == 0) {
        na_oai_req_free(&r);
        out = json_pack("{s:s}", "object", "text_completion");
        http = 200;
    } else {
        out = na_oai_error_json(&e);
        fuzz_expect(out != NULL, "line %ld: the error body of '%s' does not build",
                         l->line, e.message);
    }
    if (out == NULL)
        return NA_OK;
    st = na_batch_out_write(o, l, http, out, NULL, NULL);
    json_decref(out);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fuzz_text_dir();
    char in_path[1200], out_path[1200];
    na_batch_in_t *in = NULL;
    na_batch_out_t *o = NULL;
    na_batch_out_info_t info;
    long i, written = 0;
    na_status_t st;

    if (dir == NULL)
        return fuzz_text_done();
    snprintf(in_path, sizeof(in_path), "%s/input.jsonl", dir);
    snprintf(out_path, sizeof(out_path), "%s/results.jsonl", dir);
    if (na_test_write_file(in_path, data, size) != 0)
        return fuzz_text_done();
    st = na_batch_in_load(in_path, &in);
    if (st != NA_OK) {
        fuzz_expect(st != NA_ERR_INTERNAL && in == NULL, "load: %s: %s",
                         na_status_string(st), na_errmsg());
        return fuzz_text_done();
    }
    unlink(out_path);
    st = na_batch_out_open(out_path, &o, &info);
    if (fuzz_expect(st == NA_OK, "open the results: %s", na_errmsg())) {
        for (i = 0; i < in->n; i++) {
            if (na_batch_out_done(o, &in->lines[i]))
                continue;                  /* a key already written (as the job skips it) */
            st = fuzz_record(o, in, &in->lines[i]);
            if (fuzz_expect(st == NA_OK, "line %ld: the record is not written: %s",
                                 in->lines[i].line, na_errmsg()))
                written++;
        }
        na_batch_out_close(o);
        o = NULL;
        st = na_batch_out_open(out_path, &o, &info);
        fuzz_expect(st == NA_OK && info.records == written,
                         "reopen the results: %s, %ld records of %ld written",
                         st == NA_OK ? "ok" : na_errmsg(), info.records, written);
        for (i = 0; st == NA_OK && i < in->n; i++)
            fuzz_expect(na_batch_out_done(o, &in->lines[i]),
                             "line %ld has no record after a reopen", in->lines[i].line);
        na_batch_out_close(o);
    }
    na_batch_in_destroy(in);
    return fuzz_text_done();
}

#ifndef NA_LIBFUZZER
static const char *const seeds[] = {
    "{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/completions\","
    "\"body\":{\"prompt\":\"Once\",\"max_tokens\":4}}\n"
    "\n"
    "{\"custom_id\":\"b\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\","
    "\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}}\r\n",
    "{not json\n"
    "{\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{}}\n"
    "{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{}}\n"
    "{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{}}\n",
    "{\"custom_id\":\"c\",\"method\":\"POST\",\"url\":\"/v1/embeddings\",\"body\":{}}\n"
    "{\"custom_id\":\"d\",\"method\":\"GET\",\"url\":\"/v1/completions\",\"body\":{}}\n"
    "{\"custom_id\":\"e\",\"method\":\"POST\",\"url\":\"/v1/completions\"}\n"
    "[1,2]\n"
    "{\"custom_id\":\"f\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":\"x\"}",
    "{\"custom_id\":\"u\",\"method\":\"POST\",\"url\":\"/v1/completions\","
    "\"body\":{\"prompt\":\"\\\xc3\xa9\"}}\n"
    "{\"custom_id\":\"caf\\u00e9\",\"method\":\"POST\",\"url\":\"/v1/completions\","
    "\"body\":{\"prompt\":[1,2,3],\"stop\":[\"\\n\"],\"n\":2}}\n",
    NULL
};

const fuzz_text_target_t fuzz_text_target = { "fuzz_batch", seeds, 8000 };
#endif
