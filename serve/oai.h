/* serve/oai.h — the OpenAI HTTP API's JSON (jansson): request bodies of
 * /v1/completions and /v1/chat/completions turned into job parameters, and
 * the response objects (completion, chat.completion, their stream chunks,
 * the model list, errors).
 *
 * Requests. Fields read: model (string, echoed), prompt (completions: a
 * string, a list of one string, or a list of token ids), messages (chat:
 * role system/user/assistant, content a string or a list of {"type":
 * "text"} parts; rendered with the model's chat template, serve/chat.h),
 * max_tokens (or max_completion_tokens; any integer: <= 0 or past the
 * context means "up to the context", ending with finish_reason "length"),
 * temperature [0, 2], top_p (0, 1], seed, stop (a string or a list of at
 * most 4), n (1 only), stream, stream_options.include_usage. Other fields
 * are ignored, as OpenAI does; null is "not given". A field of the wrong
 * type or out of range is refused with the OpenAI error shape (HTTP 400,
 * type invalid_request_error, param naming the field). */
#ifndef NA_SERVE_OAI_H
#define NA_SERVE_OAI_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "serve/chat.h"
#include "serve/gen.h"

#define NA_OAI_MAX_STOP 4

typedef enum { NA_OAI_COMPLETION = 0, NA_OAI_CHAT = 1 } na_oai_kind_t;

/* A parsed request: the buffers it owns and the job they make. */
typedef struct {
    na_oai_kind_t kind;
    char     *text;                    /* the prompt text (chat: rendered), or NULL: */
    na_tok_span_t *special;            /* chat: the template parts of text (serve/chat.h) */
    int      *ids;                     /* completions: the prompt as token ids */
    char     *model;                   /* as given, or NULL */
    char     *stop[NA_OAI_MAX_STOP + 1];   /* + the chat template's end of turn */
    int       stream;
    int       include_usage;           /* stream_options.include_usage */
    /* The job's parameters (na_sg_submit): max_tokens (<= 0: up to the
     * context), temperature, top_p, seed, and prompt / n_prompt, text,
     * special / n_special, stop / n_stop pointing at the buffers above
     * (keep the request until it is submitted); on_text, on_end, user
     * are the caller's to set. */
    na_sg_params_t job;
} na_oai_req_t;

typedef struct {
    int         http;                  /* HTTP status */
    const char *type;                  /* "invalid_request_error", ... */
    const char *code;                  /* or NULL */
    char        param[64];             /* the field, or "" */
    char        message[512];
} na_oai_error_t;

/* Fill e; returns e->http. */
int  na_oai_error_set(na_oai_error_t *e, int http, const char *type, const char *code,
                      const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Parse body[0..len) of a request of kind. chat: the model's template, or
 * NULL when it has none (chat then fails with chat_err, a 400). Returns 0
 * and fills *r (na_oai_req_free), or the HTTP status with *err filled. */
int  na_oai_parse(na_oai_kind_t kind, const char *body, size_t len, const na_chat_t *chat,
                  const char *chat_err, na_oai_req_t *r, na_oai_error_t *err);
void na_oai_req_free(na_oai_req_t *r);

/* Builders (new references; NULL only when out of memory). text is valid
 * UTF-8 of len bytes. */
json_t *na_oai_error_json(const na_oai_error_t *e);
/* usage: prompt, completion and total tokens, and as OpenAI's API has it
 * prompt_tokens_details.cached_tokens: the prompt tokens whose KV came from
 * the prefix cache (docs/prefix-reuse.md), not computed for this request. */
json_t *na_oai_usage(int prompt_tokens, int cached_tokens, int completion_tokens);
/* A whole response: "text_completion" or "chat.completion". */
json_t *na_oai_response(na_oai_kind_t kind, const char *id, long created, const char *model,
                        const char *text, size_t len, const char *finish, json_t *usage);
/* A stream chunk: text (may be NULL) as the choice's text / delta content;
 * role_first: chat's first chunk says role "assistant"; finish or NULL;
 * usage (stolen) or NULL; no_choices: the usage-only chunk (choices []). */
json_t *na_oai_chunk(na_oai_kind_t kind, const char *id, long created, const char *model,
                     const char *text, size_t len, int role_first, const char *finish,
                     json_t *usage, int no_choices);
json_t *na_oai_models(const char *model, long created);
/* Compact JSON text of j (malloc'd), j released. NULL when out of memory. */
char   *na_oai_dump(json_t *j);

#endif /* NA_SERVE_OAI_H */
