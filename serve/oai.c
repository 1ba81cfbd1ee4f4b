/* serve/oai.c — OpenAI request parsing and response building (see oai.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/oai.h"

/* Make the NUL-terminated s (in a buffer of cap bytes) valid UTF-8: invalid
 * bytes become U+FFFD, and what no longer fits is cut at a character
 * boundary. A message quoting the input (jansson's error text holds the bad
 * token, cut at its own limit, maybe inside a character) would otherwise
 * make the error body unbuildable: json_pack refuses invalid UTF-8. */
static void oai_utf8_fix(char *s, size_t cap)
{
    size_t n = strlen(s), i;
    char *t = malloc(3 * n + 1);

    if (t == NULL) {
        for (i = 0; i < n; i++)
            if ((unsigned char)s[i] >= 0x80)
                s[i] = '?';
        return;
    }
    n = na_sg_utf8_clean(s, n, t);
    if (n >= cap)
        n = na_sg_utf8_complete(t, cap - 1);
    memcpy(s, t, n);
    s[n] = '\0';
    free(t);
}

int na_oai_error_set(na_oai_error_t *e, int http, const char *type, const char *code,
                     const char *param, const char *fmt, ...)
{
    va_list ap;
    e->http = http;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof(e->param), "%s", param != NULL ? param : "");
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    oai_utf8_fix(e->message, sizeof(e->message));
    oai_utf8_fix(e->param, sizeof(e->param));
    return http;
}

/* A 400 invalid_request_error about param. */
#define BAD(param, ...) \
    na_oai_error_set(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

void na_oai_req_free(na_oai_req_t *r)
{
    int k;
    free(r->text);
    free(r->special);
    free(r->ids);
    free(r->model);
    for (k = 0; k < r->job.n_stop; k++)
        free(r->stop[k]);
    memset(r, 0, sizeof(*r));
}

/* The field key of o when present and not null, else NULL. */
static json_t *oai_get(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v != NULL && !json_is_null(v) ? v : NULL;
}

static int oai_stop(json_t *v, na_oai_req_t *r, na_oai_error_t *err)
{
    size_t i;
    json_t *s;

    if (json_is_string(v)) {
        if (json_string_length(v) == 0)
            return BAD("stop", "stop must not be an empty string");
        r->stop[r->job.n_stop] = strdup(json_string_value(v));
        if (r->stop[r->job.n_stop] == NULL)
            return na_oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        r->job.n_stop++;
        return 0;
    }
    if (!json_is_array(v))
        return BAD("stop", "stop must be a string or a list of strings");
    if (json_array_size(v) > NA_OAI_MAX_STOP)
        return BAD("stop", "stop holds at most %d strings", NA_OAI_MAX_STOP);
    json_array_foreach(v, i, s) {
        int rc;
        if (!json_is_string(s))
            return BAD("stop", "stop must be a string or a list of strings");
        rc = oai_stop(s, r, err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Sampling and length fields common to both kinds. */
static int oai_common(json_t *o, na_oai_req_t *r, na_oai_error_t *err)
{
    json_t *v;

    if ((v = oai_get(o, "model")) != NULL) {
        if (!json_is_string(v))
            return BAD("model", "model must be a string");
        r->model = strdup(json_string_value(v));
    }
    v = oai_get(o, "max_tokens");
    if (v == NULL)
        v = oai_get(o, "max_completion_tokens");
    if (v != NULL) {
        json_int_t n;
        if (!json_is_integer(v))
            return BAD("max_tokens", "max_tokens must be an integer");
        n = json_integer_value(v);
        r->job.max_tokens = n <= 0 ? 0 : n > 1000000000 ? 1000000000 : (int)n;
    }
    if ((v = oai_get(o, "temperature")) != NULL) {
        if (!json_is_number(v))
            return BAD("temperature", "temperature must be a number");
        r->job.temperature = json_number_value(v);
        if (!(r->job.temperature >= 0.0 && r->job.temperature <= 2.0))
            return BAD("temperature", "temperature must be between 0 and 2");
    }
    if ((v = oai_get(o, "top_p")) != NULL) {
        if (!json_is_number(v))
            return BAD("top_p", "top_p must be a number");
        r->job.top_p = json_number_value(v);
        if (!(r->job.top_p > 0.0 && r->job.top_p <= 1.0))
            return BAD("top_p", "top_p must be greater than 0 and at most 1");
    }
    if ((v = oai_get(o, "seed")) != NULL) {
        if (!json_is_integer(v))
            return BAD("seed", "seed must be an integer");
        r->job.seed = (uint64_t)json_integer_value(v);
        r->job.seed_given = 1;
    }
    if ((v = oai_get(o, "n")) != NULL) {
        if (!json_is_integer(v))
            return BAD("n", "n must be an integer");
        if (json_integer_value(v) != 1)
            return BAD("n", "only n = 1 is supported");
    }
    if ((v = oai_get(o, "stream")) != NULL) {
        if (!json_is_boolean(v))
            return BAD("stream", "stream must be a boolean");
        r->stream = json_is_true(v);
    }
    if ((v = oai_get(o, "stream_options")) != NULL) {
        json_t *u;
        if (!json_is_object(v))
            return BAD("stream_options", "stream_options must be an object");
        if ((u = oai_get(v, "include_usage")) != NULL) {
            if (!json_is_boolean(u))
                return BAD("stream_options.include_usage", "include_usage must be a boolean");
            r->include_usage = json_is_true(u);
        }
    }
    if ((v = oai_get(o, "stop")) != NULL)
        return oai_stop(v, r, err);
    return 0;
}

static int oai_prompt(json_t *o, na_oai_req_t *r, na_oai_error_t *err)
{
    json_t *v = oai_get(o, "prompt"), *e;
    size_t i;

    if (v == NULL)
        return BAD("prompt", "prompt is required");
    if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)))
        v = json_array_get(v, 0);
    if (json_is_string(v)) {
        r->text = strdup(json_string_value(v));
        return r->text != NULL ? 0 :
               na_oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    if (!json_is_array(v) || json_array_size(v) == 0)
        return BAD("prompt", "prompt must be a string, a list of one string or a non-empty "
                   "list of token ids (several prompts per request are not supported)");
    r->ids = malloc(json_array_size(v) * sizeof(int));
    if (r->ids == NULL)
        return na_oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    json_array_foreach(v, i, e) {
        json_int_t t;
        if (!json_is_integer(e))
            return BAD("prompt", "prompt must be a string, a list of one string or a list "
                       "of token ids");
        t = json_integer_value(e);
        if (t < 0 || t > 0x7fffffff)
            return BAD("prompt", "prompt token %zu = %lld is not a token id", i, (long long)t);
        r->ids[i] = (int)t;
    }
    r->job.n_prompt = (int)json_array_size(v);
    return 0;
}

/* A message's content: a string, or the concatenation of its text parts. */
static int oai_content(json_t *c, size_t idx, char **out, na_oai_error_t *err)
{
    char param[64];
    size_t i, len = 0;
    json_t *p;

    snprintf(param, sizeof(param), "messages[%zu].content", idx);
    if (c == NULL) {
        *out = strdup("");
        return 0;
    }
    if (json_is_string(c)) {
        *out = strdup(json_string_value(c));
        return 0;
    }
    if (!json_is_array(c))
        return BAD(param, "%s must be a string or a list of text parts", param);
    json_array_foreach(c, i, p) {
        json_t *t = json_object_get(p, "text");
        if (!json_is_object(p) || !json_is_string(json_object_get(p, "type")) ||
            strcmp(json_string_value(json_object_get(p, "type")), "text") != 0 ||
            !json_is_string(t))
            return BAD(param, "%s: only parts of type \"text\" are supported", param);
        len += json_string_length(t);
    }
    *out = malloc(len + 1);
    if (*out == NULL)
        return na_oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    len = 0;
    json_array_foreach(c, i, p) {
        json_t *t = json_object_get(p, "text");
        memcpy(*out + len, json_string_value(t), json_string_length(t));
        len += json_string_length(t);
    }
    (*out)[len] = '\0';
    return 0;
}

static int oai_messages(json_t *o, const na_chat_t *chat, const char *chat_err,
                        na_oai_req_t *r, na_oai_error_t *err)
{
    json_t *v = oai_get(o, "messages"), *m;
    na_chat_msg_t *msgs;
    char **texts;
    size_t i, n;
    int rc = 0;

    if (v == NULL || !json_is_array(v) || json_array_size(v) == 0)
        return BAD("messages", "messages must be a non-empty list");
    if (chat == NULL)
        return BAD("messages", "%s", chat_err != NULL ? chat_err :
                   "the model has no chat template");
    n = json_array_size(v);
    msgs = calloc(n, sizeof(*msgs));
    texts = calloc(n, sizeof(*texts));
    if (msgs == NULL || texts == NULL) {
        free(msgs);
        free(texts);
        return na_oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    json_array_foreach(v, i, m) {
        json_t *role = json_object_get(m, "role");
        char param[64];
        snprintf(param, sizeof(param), "messages[%zu].role", i);
        if (!json_is_object(m) || !json_is_string(role)) {
            rc = BAD(param, "messages[%zu] must be an object with a string role", i);
            break;
        }
        rc = oai_content(oai_get(m, "content"), i, &texts[i], err);
        if (rc != 0)
            break;
        if (texts[i] == NULL) {
            rc = na_oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            break;
        }
        msgs[i].role = json_string_value(role);
        msgs[i].content = texts[i];
    }
    if (rc == 0 && na_chat_render_spans(*chat, msgs, (int)n, &r->text, &r->special,
                                        &r->job.n_special) != NA_OK)
        rc = BAD("messages", "%s", na_errmsg());
    for (i = 0; i < n; i++)
        free(texts[i]);
    free(texts);
    free(msgs);
    if (rc == 0) {
        r->stop[r->job.n_stop] = strdup(na_chat_end(*chat));
        if (r->stop[r->job.n_stop] == NULL)
            return na_oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        r->job.n_stop++;
    }
    return rc;
}

int na_oai_parse(na_oai_kind_t kind, const char *body, size_t len, const na_chat_t *chat,
                 const char *chat_err, na_oai_req_t *r, na_oai_error_t *err)
{
    json_error_t je;
    json_t *o;
    int rc;

    memset(r, 0, sizeof(*r));
    r->kind = kind;
    na_sg_params_default(&r->job);
    r->job.max_tokens = kind == NA_OAI_COMPLETION ? 16 : 0;   /* OpenAI's defaults */
    o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (o == NULL)
        return BAD(NULL, "the body is not valid JSON (%s at line %d column %d)", je.text,
                   je.line, je.column);
    if (!json_is_object(o)) {
        json_decref(o);
        return BAD(NULL, "the body must be a JSON object");
    }
    rc = oai_common(o, r, err);
    if (rc == 0)
        rc = kind == NA_OAI_COMPLETION ? oai_prompt(o, r, err) :
             oai_messages(o, chat, chat_err, r, err);
    json_decref(o);
    if (rc != 0) {
        na_oai_req_free(r);
        return rc;
    }
    r->job.prompt = r->ids;             /* the job points into r */
    r->job.text = r->text;
    r->job.special = r->special;
    r->job.stop = (const char *const *)r->stop;
    return 0;
}

/* ---- builders ------------------------------------------------------------- */

json_t *na_oai_error_json(const na_oai_error_t *e)
{
    return json_pack("{s:{s:s, s:s, s:o, s:o}}", "error",
                     "message", e->message,
                     "type", e->type != NULL ? e->type : "server_error",
                     "param", e->param[0] ? json_string(e->param) : json_null(),
                     "code", e->code != NULL ? json_string(e->code) : json_null());
}

json_t *na_oai_usage(int prompt_tokens, int cached_tokens, int completion_tokens)
{
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", prompt_tokens,
                     "completion_tokens", completion_tokens,
                     "total_tokens", prompt_tokens + completion_tokens,
                     "prompt_tokens_details", "cached_tokens", cached_tokens);
}

/* The choice of a response or chunk. */
static json_t *oai_choice(na_oai_kind_t kind, const char *text, size_t len, int role_first,
                          const char *finish, int chunk)
{
    json_t *c = json_pack("{s:i, s:o}", "index", 0,
                          "finish_reason", finish != NULL ? json_string(finish) : json_null());
    json_t *s = text != NULL ? json_stringn(text, len) : NULL;

    if (c == NULL)
        return NULL;
    if (kind == NA_OAI_COMPLETION) {
        json_object_set_new(c, "text", s != NULL ? s : json_string(""));
        json_object_set_new(c, "logprobs", json_null());
    } else {
        json_t *m = json_object();
        if (role_first || !chunk)
            json_object_set_new(m, "role", json_string("assistant"));
        if (s != NULL)
            json_object_set_new(m, "content", s);
        else if (!chunk)
            json_object_set_new(m, "content", json_string(""));
        json_object_set_new(c, chunk ? "delta" : "message", m);
        json_object_set_new(c, "logprobs", json_null());
    }
    return c;
}

static json_t *oai_head(const char *object, const char *id, long created, const char *model)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", id, "object", object, "created",
                     (json_int_t)created, "model", model);
}

json_t *na_oai_response(na_oai_kind_t kind, const char *id, long created, const char *model,
                        const char *text, size_t len, const char *finish, json_t *usage)
{
    json_t *o = oai_head(kind == NA_OAI_COMPLETION ? "text_completion" : "chat.completion",
                         id, created, model);
    if (o == NULL) {
        json_decref(usage);
        return NULL;
    }
    json_object_set_new(o, "choices",
                        json_pack("[o]", oai_choice(kind, text, len, 1, finish, 0)));
    json_object_set_new(o, "usage", usage != NULL ? usage : json_null());
    return o;
}

json_t *na_oai_chunk(na_oai_kind_t kind, const char *id, long created, const char *model,
                     const char *text, size_t len, int role_first, const char *finish,
                     json_t *usage, int no_choices)
{
    json_t *o = oai_head(kind == NA_OAI_COMPLETION ? "text_completion" :
                         "chat.completion.chunk", id, created, model);
    if (o == NULL) {
        json_decref(usage);
        return NULL;
    }
    json_object_set_new(o, "choices", no_choices ? json_array() :
                        json_pack("[o]", oai_choice(kind, text, len, role_first, finish, 1)));
    if (usage != NULL)
        json_object_set_new(o, "usage", usage);
    return o;
}

json_t *na_oai_models(const char *model, long created)
{
    return json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data",
                     "id", model, "object", "model", "created", (json_int_t)created,
                     "owned_by", "nearattn");
}

char *na_oai_dump(json_t *j)
{
    char *s;
    if (j == NULL)
        return NULL;
    s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}
