/* tests/fuzz/fuzz_oai.c — hostile request bodies for the OpenAI request
 * parser of `nearattn serve` and `nearattn batch` (serve/oai.c).
 *
 * Each input is parsed as a completion and as a chat request, with a chat
 * template (chatml, all six families in turn) and without one. A body that
 * parses must give a job pointing at its buffers and a prompt; one that
 * does not must give a status of 400..599 and an error body that builds
 * (na_oai_error_json + dump, non-NULL) and parses back as JSON: a NULL body
 * made serve close the connection without an answer, and made batch stop at
 * that line on every rerun (issue 22 item 9). Crashes and leaks are caught
 * by the sanitizer builds. Driver and builds: tests/fuzz/fuzz_text.h;
 * default 50000 iterations under ctest. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "serve/oai.h"
#include "tests/fuzz/fuzz_text.h"

static void fuzz_parse(na_oai_kind_t kind, const char *body, size_t size, const na_chat_t *chat)
{
    na_oai_req_t r;
    na_oai_error_t e;
    int rc = na_oai_parse(kind, body, size, chat, chat == NULL ? "no chat template" : NULL,
                          &r, &e);

    if (rc == 0) {
        fuzz_expect(r.text != NULL || r.job.n_prompt > 0, "parsed without a prompt");
        fuzz_expect(r.job.n_stop >= 0 && r.job.n_stop <= NA_OAI_MAX_STOP + 1, "n_stop %d",
                         r.job.n_stop);
        fuzz_expect(r.job.text == r.text && r.job.prompt == r.ids &&
                    r.job.special == r.special && r.job.stop == (const char *const *)r.stop,
                    "the job does not point at the request's buffers");
        na_oai_req_free(&r);
        return;
    }
    fuzz_expect(rc >= 400 && rc < 600 && rc == e.http, "status %d (http %d)", rc, e.http);
    {
        char *s = na_oai_dump(na_oai_error_json(&e));
        json_t *back = s != NULL ? json_loads(s, 0, NULL) : NULL;
        fuzz_expect(s != NULL, "the error body of '%s' does not build", e.message);
        fuzz_expect(s == NULL || json_is_object(json_object_get(back, "error")),
                         "the error body does not parse back: %s", s ? s : "");
        json_decref(back);
        free(s);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned turn;
    na_chat_t chat = (na_chat_t)(turn++ % NA_CHAT_COUNT);

    fuzz_parse(NA_OAI_COMPLETION, (const char *)data, size, NULL);
    fuzz_parse(NA_OAI_CHAT, (const char *)data, size, &chat);
    fuzz_parse(NA_OAI_CHAT, (const char *)data, size, NULL);
    return fuzz_text_done();
}

#ifndef NA_LIBFUZZER
static const char *const seeds[] = {
    "{\"model\":\"m\",\"prompt\":\"Once upon a time\",\"max_tokens\":5,\"temperature\":0,"
    "\"seed\":7,\"stop\":[\"a\",\"b\"],\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
    "{\"prompt\":[1,2,3,400],\"max_tokens\":16,\"top_p\":0.9,\"n\":1}",
    "{\"prompt\":\"caf\\u00e9 \\ud83d\\ude00\",\"stop\":\"\\n\",\"temperature\":1.5}",
    "{\"messages\":[{\"role\":\"system\",\"content\":\"You are brief.\"},"
    "{\"role\":\"user\",\"content\":\"Hello!\"}],\"max_tokens\":8,\"stream\":false}",
    "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi\"}]},"
    "{\"role\":\"assistant\",\"content\":\"Hey\"},{\"role\":\"user\",\"content\":\"\\u00e9\"}],"
    "\"stop\":[\"x\",\"y\",\"z\"],\"seed\":18446744073709551615}",
    "{\"prompt\": \"\\\xc3\xa9\"}",
    NULL
};

const fuzz_text_target_t fuzz_text_target = { "fuzz_oai", seeds, 50000 };
#endif
