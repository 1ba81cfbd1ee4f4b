/* serve/chat.c — chat template families (see chat.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "serve/chat.h"

static const struct {
    const char *name;
    const char *marker;     /* recognises the Jinja text */
    const char *end;        /* end-of-turn marker */
} na_chat_fam[NA_CHAT_COUNT] = {
    [NA_CHAT_LLAMA2] = { "llama2", "[INST]",              "</s>" },
    [NA_CHAT_LLAMA3] = { "llama3", "<|start_header_id|>", "<|eot_id|>" },
    [NA_CHAT_CHATML] = { "chatml", "<|im_start|>",        "<|im_end|>" },
    [NA_CHAT_GEMMA]  = { "gemma",  "<start_of_turn>",     "<end_of_turn>" },
    [NA_CHAT_ZEPHYR] = { "zephyr", "<|user|>",            "</s>" },
    [NA_CHAT_PHI3]   = { "phi3",   "<|end|>",             "<|end|>" },
};

#define NA_CHAT_NAMES "llama2, llama3, chatml, gemma, zephyr, phi3"

const char *na_chat_name(na_chat_t t)
{
    return (unsigned)t < NA_CHAT_COUNT ? na_chat_fam[t].name : "?";
}

const char *na_chat_end(na_chat_t t)
{
    return (unsigned)t < NA_CHAT_COUNT ? na_chat_fam[t].end : "";
}

na_status_t na_chat_lookup(const char *name, na_chat_t *t)
{
    int i;
    for (i = 0; i < NA_CHAT_COUNT; i++)
        if (!strcmp(name, na_chat_fam[i].name)) {
            *t = (na_chat_t)i;
            return NA_OK;
        }
    return na_err(NA_ERR_NOT_FOUND, "unknown chat template '%s' (known: %s)", name,
                  NA_CHAT_NAMES);
}

na_status_t na_chat_detect(const char *jinja, na_chat_t *t)
{
    /* most specific first: phi3 and zephyr both use <|user|> */
    static const na_chat_t order[] = { NA_CHAT_CHATML, NA_CHAT_LLAMA3, NA_CHAT_GEMMA,
                                       NA_CHAT_PHI3, NA_CHAT_ZEPHYR, NA_CHAT_LLAMA2 };
    size_t i;
    for (i = 0; i < sizeof(order) / sizeof(order[0]); i++)
        if (strstr(jinja, na_chat_fam[order[i]].marker) != NULL) {
            *t = order[i];
            return NA_OK;
        }
    return na_err(NA_ERR_NOT_FOUND, "the chat template is of no known family (%s)",
                  NA_CHAT_NAMES);
}

na_status_t na_chat_for_model(const na_model_t *m, const char *name, na_chat_t *t)
{
    na_gguf_str_t s;
    char *text;
    na_status_t st;

    if (name != NULL)
        return na_chat_lookup(name, t);
    if (m->gguf == NULL || na_gguf_get_str(m->gguf, "tokenizer.chat_template", &s) != NA_OK)
        return na_err(NA_ERR_NOT_FOUND, "the model has no chat template "
                      "(tokenizer.chat_template): start the server with --chat-template "
                      "NAME (%s) to serve chat completions", NA_CHAT_NAMES);
    text = malloc(s.len + 1);
    if (text == NULL)
        return na_err(NA_ERR_NOMEM, "out of memory");
    memcpy(text, s.data, s.len);
    text[s.len] = '\0';
    st = na_chat_detect(text, t);
    free(text);
    if (st != NA_OK)
        return na_err(NA_ERR_NOT_FOUND, "the model's chat template is of no known family: "
                      "start the server with --chat-template NAME (%s)", NA_CHAT_NAMES);
    return NA_OK;
}

/* llama-2: the system prompt folded into the first [INST]; each assistant
 * reply closed with </s><s>. */
static void na_chat_llama2(FILE *f, const na_chat_msg_t *m, int n)
{
    const char *sys = NULL;
    int i, first = 1;

    for (i = 0; i < n; i++) {
        if (!strcmp(m[i].role, "system")) {
            sys = m[i].content;
        } else if (!strcmp(m[i].role, "user")) {
            fputs(first ? "[INST] " : "<s>[INST] ", f);
            if (sys != NULL)
                fprintf(f, "<<SYS>>\n%s\n<</SYS>>\n\n", sys);
            fprintf(f, "%s [/INST]", m[i].content);
            sys = NULL;
            first = 0;
        } else {
            fprintf(f, " %s </s>", m[i].content);
        }
    }
}

na_status_t na_chat_render(na_chat_t t, const na_chat_msg_t *m, int n, char **text_p)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f;
    int i;

    *text_p = NULL;
    if (n < 1)
        return na_err(NA_ERR_INVALID, "messages must hold at least one message");
    for (i = 0; i < n; i++)
        if (m[i].role == NULL || m[i].content == NULL ||
            (strcmp(m[i].role, "system") && strcmp(m[i].role, "user") &&
             strcmp(m[i].role, "assistant")))
            return na_err(NA_ERR_INVALID, "messages[%d].role must be system, user or "
                          "assistant", i);
    f = open_memstream(&buf, &len);
    if (f == NULL)
        return na_err(NA_ERR_NOMEM, "out of memory");
    switch (t) {
    case NA_CHAT_LLAMA2:
        na_chat_llama2(f, m, n);
        break;
    case NA_CHAT_LLAMA3:
        for (i = 0; i < n; i++)
            fprintf(f, "<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>", m[i].role,
                    m[i].content);
        fputs("<|start_header_id|>assistant<|end_header_id|>\n\n", f);
        break;
    case NA_CHAT_CHATML:
        for (i = 0; i < n; i++)
            fprintf(f, "<|im_start|>%s\n%s<|im_end|>\n", m[i].role, m[i].content);
        fputs("<|im_start|>assistant\n", f);
        break;
    case NA_CHAT_GEMMA: {
        const char *sys = NULL;
        for (i = 0; i < n; i++) {
            if (!strcmp(m[i].role, "system")) {
                sys = m[i].content;
                continue;
            }
            fprintf(f, "<start_of_turn>%s\n", !strcmp(m[i].role, "user") ? "user" : "model");
            if (sys != NULL && !strcmp(m[i].role, "user")) {
                fprintf(f, "%s\n\n", sys);
                sys = NULL;
            }
            fprintf(f, "%s<end_of_turn>\n", m[i].content);
        }
        fputs("<start_of_turn>model\n", f);
        break;
    }
    case NA_CHAT_ZEPHYR:
    case NA_CHAT_PHI3:
        for (i = 0; i < n; i++)
            fprintf(f, "<|%s|>\n%s%s\n", m[i].role, m[i].content, na_chat_end(t));
        fputs("<|assistant|>\n", f);
        break;
    default:
        fclose(f);
        free(buf);
        return na_err(NA_ERR_INVALID, "unknown chat template %d", (int)t);
    }
    if (fclose(f) != 0 || buf == NULL) {
        free(buf);
        return na_err(NA_ERR_NOMEM, "out of memory rendering a chat of %d messages", n);
    }
    *text_p = buf;
    return NA_OK;
}
