/* serve/chat.c — chat template families (see chat.h). */
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "common/strbuf.h"
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

/* The rendered text and the spans of its template parts. */
typedef struct {
    char          *buf;
    size_t         len, cap;
    na_tok_span_t *sp;
    size_t         n_sp, cap_sp;
    int            oom;
} na_chat_buf_t;

static void na_chat_add(na_chat_buf_t *b, const char *s, int tmpl)
{
    size_t l = strlen(s), off = b->len;
    if (b->oom)
        return;
    if (na_strbuf_append(&b->buf, &b->len, &b->cap, s, l) != 0) {
        b->oom = 1;
        return;
    }
    if (tmpl && l > 0) {
        if (b->n_sp > 0 && b->sp[b->n_sp - 1].off + b->sp[b->n_sp - 1].len == off) {
            b->sp[b->n_sp - 1].len += l;          /* joins the template part before */
        } else {
            if (b->n_sp == b->cap_sp) {
                size_t cap = 2 * b->cap_sp + 8;
                na_tok_span_t *sp = realloc(b->sp, cap * sizeof(*sp));
                if (sp == NULL) {
                    b->oom = 1;
                    return;
                }
                b->sp = sp;
                b->cap_sp = cap;
            }
            b->sp[b->n_sp++] = (na_tok_span_t){ off, l };
        }
    }
}

#define T(s) na_chat_add(b, (s), 1)   /* a template part */
#define C(s) na_chat_add(b, (s), 0)   /* content: never a special token */

/* llama-2: the system prompt folded into the first [INST]; each assistant
 * reply closed with </s><s>. */
static void na_chat_llama2(na_chat_buf_t *b, const na_chat_msg_t *m, int n)
{
    const char *sys = NULL;
    int i, first = 1;

    for (i = 0; i < n; i++) {
        if (!strcmp(m[i].role, "system")) {
            sys = m[i].content;
        } else if (!strcmp(m[i].role, "user")) {
            T(first ? "[INST] " : "<s>[INST] ");
            if (sys != NULL) {
                T("<<SYS>>\n");
                C(sys);
                T("\n<</SYS>>\n\n");
            }
            C(m[i].content);
            T(" [/INST]");
            sys = NULL;
            first = 0;
        } else {
            T(" ");
            C(m[i].content);
            T(" </s>");
        }
    }
}

static void na_chat_gemma(na_chat_buf_t *b, const na_chat_msg_t *m, int n)
{
    const char *sys = NULL;
    int i;

    for (i = 0; i < n; i++) {
        if (!strcmp(m[i].role, "system")) {
            sys = m[i].content;
            continue;
        }
        T("<start_of_turn>");
        T(!strcmp(m[i].role, "user") ? "user\n" : "model\n");
        if (sys != NULL && !strcmp(m[i].role, "user")) {
            C(sys);
            T("\n\n");
            sys = NULL;
        }
        C(m[i].content);
        T("<end_of_turn>\n");
    }
    T("<start_of_turn>model\n");
}

/* The templates of one turn per message: OPEN role MID content CLOSE
 * CLOSE2 for each message, then GEN (the assistant's turn, opened). */
static void na_chat_turns(na_chat_buf_t *b, const na_chat_msg_t *m, int n, const char *open,
                          const char *mid, const char *close, const char *close2,
                          const char *gen)
{
    int i;

    for (i = 0; i < n; i++) {
        T(open);
        T(m[i].role);
        T(mid);
        C(m[i].content);
        T(close);
        T(close2);
    }
    T(gen);
}

na_status_t na_chat_render_spans(na_chat_t t, const na_chat_msg_t *m, int n, char **text_p,
                                 na_tok_span_t **spans_p, size_t *n_spans_p)
{
    na_chat_buf_t bb = { 0 }, *b = &bb;
    int i;

    *text_p = NULL;
    if (spans_p != NULL) {
        *spans_p = NULL;
        *n_spans_p = 0;
    }
    if (n < 1)
        return na_err(NA_ERR_INVALID, "messages must hold at least one message");
    for (i = 0; i < n; i++)
        if (m[i].role == NULL || m[i].content == NULL ||
            (strcmp(m[i].role, "system") && strcmp(m[i].role, "user") &&
             strcmp(m[i].role, "assistant")))
            return na_err(NA_ERR_INVALID, "messages[%d].role must be system, user or "
                          "assistant", i);
    if ((unsigned)t >= NA_CHAT_COUNT)
        return na_err(NA_ERR_INVALID, "unknown chat template %d", (int)t);
    C("");                                  /* an empty text for an empty rendering */
    switch (t) {
    case NA_CHAT_LLAMA2:
        na_chat_llama2(b, m, n);
        break;
    case NA_CHAT_LLAMA3:
        na_chat_turns(b, m, n, "<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>", "",
                      "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case NA_CHAT_CHATML:
        na_chat_turns(b, m, n, "<|im_start|>", "\n", "<|im_end|>\n", "", "<|im_start|>assistant\n");
        break;
    case NA_CHAT_GEMMA:
        na_chat_gemma(b, m, n);
        break;
    case NA_CHAT_ZEPHYR:
    case NA_CHAT_PHI3:
        na_chat_turns(b, m, n, "<|", "|>\n", na_chat_end(t), "\n", "<|assistant|>\n");
        break;
    default:
        break;
    }
    if (b->oom) {
        free(b->buf);
        free(b->sp);
        return na_err(NA_ERR_NOMEM, "out of memory rendering a chat of %d messages", n);
    }
    *text_p = b->buf;
    if (spans_p != NULL) {
        *spans_p = b->sp;
        *n_spans_p = b->n_sp;
    } else {
        free(b->sp);
    }
    return NA_OK;
}

#undef T
#undef C

na_status_t na_chat_render(na_chat_t t, const na_chat_msg_t *m, int n, char **text_p)
{
    return na_chat_render_spans(t, m, n, text_p, NULL, NULL);
}
