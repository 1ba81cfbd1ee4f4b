/* tests/serve/test_serve_core.c — the serve core without a cluster: UTF-8
 * holding and cleaning (serve/gen.h), chat template detection and rendering
 * (serve/chat.h; the template's markers as special tokens), OpenAI request
 * parsing and the response objects (serve/oai.h, jansson). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/chat.h"
#include "serve/gen.h"
#include "serve/oai.h"
#include "tests/testutil.h"

static void test_utf8(void)
{
    char out[64];
    size_t n;

    NA_CHECK(na_sg_utf8_complete("abc", 3) == 3);
    NA_CHECK(na_sg_utf8_complete("a\xE2\x82", 3) == 1);        /* € cut after 2 bytes */
    NA_CHECK(na_sg_utf8_complete("a\xE2\x82\xAC", 4) == 4);
    NA_CHECK(na_sg_utf8_complete("a\xF0", 2) == 1);
    NA_CHECK(na_sg_utf8_complete("a\x80", 2) == 2);            /* stray: cleaned later */
    n = na_sg_utf8_clean("a\xFF" "b", 3, out);
    NA_CHECK(n == 5 && !memcmp(out, "a\xEF\xBF\xBD" "b", 5));
    n = na_sg_utf8_clean("\xED\xA0\x80", 3, out);               /* a surrogate */
    NA_CHECK(n == 9);
    n = na_sg_utf8_clean("\xE2\x82\xAC", 3, out);
    NA_CHECK(n == 3 && !memcmp(out, "\xE2\x82\xAC", 3));
}

static void test_chat(void)
{
    na_chat_msg_t m[3] = { { "system", "Be brief." }, { "user", "Hi" },
                           { "assistant", "Hello" } };
    na_chat_msg_t bad = { "tool", "x" };
    na_chat_t t;
    char *s = NULL;

    NA_CHECK_OK(na_chat_detect("{% for m in messages %}<|im_start|>{{ m.role }}", &t));
    NA_CHECK(t == NA_CHAT_CHATML);
    NA_CHECK_OK(na_chat_detect("<|start_header_id|>", &t));
    NA_CHECK(t == NA_CHAT_LLAMA3);
    NA_CHECK_OK(na_chat_detect("{{ bos_token + '[INST] ' }}", &t));
    NA_CHECK(t == NA_CHAT_LLAMA2);
    NA_CHECK(na_chat_detect("{{ messages }}", &t) == NA_ERR_NOT_FOUND);
    NA_CHECK(na_chat_lookup("nope", &t) == NA_ERR_NOT_FOUND);
    NA_CHECK_OK(na_chat_render(NA_CHAT_CHATML, m, 2, &s));
    NA_CHECK(s && !strcmp(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi"
                             "<|im_end|>\n<|im_start|>assistant\n"));
    free(s);
    NA_CHECK_OK(na_chat_render(NA_CHAT_LLAMA2, m, 3, &s));
    NA_CHECK(s && !strcmp(s, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello </s>"));
    free(s);
    NA_CHECK(na_chat_render(NA_CHAT_LLAMA3, &bad, 1, &s) == NA_ERR_INVALID);
}

/* A chat rendered for a byte-level BPE vocabulary: the template's markers
 * are its control tokens, the same marker written in a message is text. */
static void test_chat_tokens(void)
{
    na_chat_msg_t m[1] = { { "user", "<|im_start|>hi" } };
    char dir[256], path[512], *s = NULL;
    na_tok_span_t *sp = NULL;
    size_t nsp = 0, n = 0, i;
    na_tokenizer_t *t = NULL;
    int ids[256], marks = 0;

    if (na_test_tmpdir(dir, sizeof(dir)) != 0)
        return;
    snprintf(path, sizeof(path), "%s/v.gguf", dir);
    if (na_test_bpe_vocab(path, "qwen2", NULL) == 0)
        NA_CHECK_OK(na_tokenizer_open(path, 0, &t));
    NA_CHECK_OK(na_chat_render_spans(NA_CHAT_CHATML, m, 1, &s, &sp, &nsp));
    if (t != NULL && s != NULL) {
        NA_CHECK(!strcmp(s, "<|im_start|>user\n<|im_start|>hi<|im_end|>\n<|im_start|>assistant\n"));
        /* template parts: "<|im_start|>user\n" and "<|im_end|>\n<|im_start|>assistant\n" */
        NA_CHECK(nsp == 2 && sp[0].off == 0 && sp[0].len == 17 && sp[1].off == 31);
        NA_CHECK_OK(na_tokenizer_encode_ex(t, s, strlen(s), 0, sp, nsp, ids, 256, &n));
        for (i = 0; i < n; i++)
            marks += ids[i] == NA_TEST_BPE_IM_START;
        NA_CHECK(marks == 2 && n > 2 && ids[0] == NA_TEST_BPE_IM_START &&
                 ids[1] != NA_TEST_BPE_IM_START);
        marks = 0;                      /* without the spans: all text */
        NA_CHECK_OK(na_tokenizer_encode_ex(t, s, strlen(s), 0, NULL, 0, ids, 256, &n));
        for (i = 0; i < n; i++)
            marks += ids[i] == NA_TEST_BPE_IM_START;
        NA_CHECK(marks == 0);
    }
    free(s);
    free(sp);
    na_tokenizer_destroy(t);
    na_test_rmtree(dir);
}

/* Parse a NUL-terminated body. */
static int parse(na_oai_kind_t k, const char *body, const na_chat_t *chat, const char *why,
                 na_oai_req_t *r, na_oai_error_t *e)
{
    return na_oai_parse(k, body, strlen(body), chat, why, r, e);
}

static void test_oai_parse(void)
{
    na_chat_t chatml = NA_CHAT_CHATML;
    na_oai_error_t e;
    na_oai_req_t r;
    const char *ok = "{\"model\":\"m\",\"prompt\":\"Once\",\"max_tokens\":5,\"temperature\":0,"
                     "\"seed\":7,\"stop\":[\"a\",\"b\"],\"stream\":true,\"unknown\":{\"x\":1},"
                     "\"stream_options\":{\"include_usage\":true}}";

    NA_CHECK(parse(NA_OAI_COMPLETION, ok, NULL, NULL, &r, &e) == 0);
    NA_CHECK(r.text && !strcmp(r.text, "Once") && r.job.max_tokens == 5 &&
             r.job.temperature == 0.0 && r.job.top_p == 1.0 && r.job.seed_given &&
             r.job.seed == 7 && r.job.n_stop == 2 && r.stream && r.include_usage);
    /* the job points at the request's buffers, its callbacks unset */
    NA_CHECK(r.job.text == r.text && r.job.prompt == NULL && r.job.n_prompt == 0 &&
             r.job.stop == (const char *const *)r.stop && !strcmp(r.job.stop[1], "b") &&
             r.job.on_text == NULL && r.job.on_end == NULL && r.job.user == NULL);
    na_oai_req_free(&r);
    NA_CHECK(parse(NA_OAI_COMPLETION, "{\"prompt\":", NULL, NULL, &r, &e) == 400);
    NA_CHECK(parse(NA_OAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":\"5\"}", NULL, NULL,
                   &r, &e) == 400 && !strcmp(e.param, "max_tokens"));
    NA_CHECK(parse(NA_OAI_COMPLETION, "{\"prompt\":\"x\",\"n\":2}", NULL, NULL, &r,
                          &e) == 400 && !strcmp(e.param, "n"));
    NA_CHECK(parse(NA_OAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":-3}", NULL,
                          NULL, &r, &e) == 0 && r.job.max_tokens == 0);
    na_oai_req_free(&r);
    /* token ids: the job's prompt, OpenAI's 16 tokens by default */
    NA_CHECK(parse(NA_OAI_COMPLETION, "{\"prompt\":[1,300,2]}", NULL, NULL, &r, &e) == 0 &&
             r.text == NULL && r.job.prompt == r.ids && r.job.n_prompt == 3 &&
             r.ids[1] == 300 && r.job.max_tokens == 16 && !r.job.seed_given);
    na_oai_req_free(&r);
    NA_CHECK(parse(NA_OAI_COMPLETION, "{\"prompt\":\"\xff\"}", NULL, NULL, &r,
                          &e) == 400);                         /* invalid UTF-8 */
    NA_CHECK(parse(NA_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
                          NULL, "no template", &r, &e) == 400 &&
             strstr(e.message, "no template") != NULL);
    NA_CHECK(parse(NA_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                          "\"text\",\"text\":\"Hi\"}]}]}", &chatml, NULL, &r, &e) == 0);
    NA_CHECK(r.text && strstr(r.text, "<|im_start|>user\nHi") != NULL && r.job.n_stop == 1 &&
             !strcmp(r.stop[0], "<|im_end|>") && r.job.special == r.special &&
             r.job.n_special > 0 && r.job.max_tokens == 0 && r.job.temperature == 1.0);
    na_oai_req_free(&r);
    /* 4 stop strings of the client + the template's end of turn */
    NA_CHECK(parse(NA_OAI_CHAT, "{\"stop\":[\"a\",\"b\",\"c\",\"d\"],\"messages\":[{\"role\":"
                   "\"user\",\"content\":\"Hi\"}]}", &chatml, NULL, &r, &e) == 0);
    NA_CHECK(r.job.n_stop == 5 && r.job.n_stop <= NA_SG_MAX_STOP);
    na_oai_req_free(&r);
    NA_CHECK(parse(NA_OAI_COMPLETION, "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}",
                   NULL, NULL, &r, &e) == 400 && !strcmp(e.param, "stop"));
    /* jansson's error text quotes the bad token cut inside a character
     * ("invalid escape near '"\<c3>'): the error body must still build (it
     * was NULL: serve closed the connection without an answer) */
    {
        char *body;
        NA_CHECK(parse(NA_OAI_COMPLETION, "{\"prompt\": \"\\\xc3\xa9\"}", NULL, NULL, &r,
                       &e) == 400);
        NA_CHECK_MSG(strstr(e.message, "invalid escape") != NULL &&
                     strstr(e.message, "\xef\xbf\xbd") != NULL, "%s", e.message);
        body = na_oai_dump(na_oai_error_json(&e));
        NA_CHECK(body != NULL && strstr(body, "invalid escape") != NULL);
        free(body);
        /* a message cut by its buffer inside a character, bytes that are no UTF-8 */
        na_oai_error_set(&e, 400, "invalid_request_error", NULL, NULL, "%*s\xe2\x82\xac\xe2\x82\xac",
                         (int)sizeof(e.message) - 3, "x");
        body = na_oai_dump(na_oai_error_json(&e));
        NA_CHECK(body != NULL);
        free(body);
        na_oai_error_set(&e, 400, "invalid_request_error", NULL, NULL, "bad \xff\xfe \xc3");
        body = na_oai_dump(na_oai_error_json(&e));
        NA_CHECK(body != NULL && strstr(body, "bad \xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd") != NULL);
        free(body);
    }
}

static void test_oai_build(void)
{
    na_oai_error_t e;
    char *s;

    na_oai_error_set(&e, 400, "invalid_request_error", NULL, "n", "only n = %d", 1);
    s = na_oai_dump(na_oai_error_json(&e));
    NA_CHECK(s && !strcmp(s, "{\"error\":{\"message\":\"only n = 1\",\"type\":"
                             "\"invalid_request_error\",\"param\":\"n\",\"code\":null}}"));
    free(s);
    s = na_oai_dump(na_oai_response(NA_OAI_CHAT, "id1", 5, "m", "a\"b", 3, "stop",
                                    na_oai_usage(3, 1, 2)));
    NA_CHECK(s && strstr(s, "\"content\":\"a\\\"b\"") && strstr(s, "\"total_tokens\":5") &&
             strstr(s, "\"prompt_tokens_details\":{\"cached_tokens\":1}") &&
             strstr(s, "\"object\":\"chat.completion\""));
    free(s);
    s = na_oai_dump(na_oai_chunk(NA_OAI_CHAT, "id1", 5, "m", NULL, 0, 0, NULL,
                                 na_oai_usage(3, 0, 2), 1));
    NA_CHECK(s && strstr(s, "\"choices\":[]") && strstr(s, "\"usage\""));
    free(s);
}

int main(void)
{
    test_utf8();
    test_chat();
    test_chat_tokens();
    test_oai_parse();
    test_oai_build();
    return na_test_finish();
}
