/* serve/chat.h — chat templates: a list of messages (role, content) turned
 * into the prompt text of a chat model.
 *
 * A model names its template in the GGUF key tokenizer.chat_template (a
 * Jinja text). We do not run Jinja: the text is recognised as one of the
 * common families by its markers (as llama.cpp does) and the family is
 * rendered here; `nearattn serve --chat-template NAME` chooses one instead.
 *
 *   llama2   <s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] ...
 *   llama3   <|start_header_id|>ROLE<|end_header_id|>\n\nTEXT<|eot_id|> ...
 *   chatml   <|im_start|>ROLE\nTEXT<|im_end|>\n ...
 *   gemma    <start_of_turn>user\nTEXT<end_of_turn>\n ... (system folded
 *            into the first user turn)
 *   zephyr   <|ROLE|>\nTEXT</s>\n ...
 *   phi3     <|ROLE|>\nTEXT<|end|>\n ...
 *
 * Every rendering ends with the opening of the assistant's turn. BOS is not
 * part of the text: the prompt is encoded with BOS first, as `nearattn run`
 * does (llama2's first "<s>" is that BOS). na_chat_render_spans also gives
 * the byte ranges of the template parts: a byte-level BPE vocabulary encodes
 * the markers found there as its special tokens (<|im_start|>, <|eot_id|>:
 * na_tokenizer_encode_ex), while the same text inside a message stays text.
 * A SentencePiece vocabulary encodes the markers as text. Each family's
 * end-of-turn marker is also a stop string (na_chat_end), so a reply ends
 * there even when the vocabulary has no special token for it. */
#ifndef NA_SERVE_CHAT_H
#define NA_SERVE_CHAT_H

#include "common/model.h"
#include "common/status.h"
#include "common/tokenizer.h"

typedef enum {
    NA_CHAT_LLAMA2 = 0,
    NA_CHAT_LLAMA3,
    NA_CHAT_CHATML,
    NA_CHAT_GEMMA,
    NA_CHAT_ZEPHYR,
    NA_CHAT_PHI3,
    NA_CHAT_COUNT
} na_chat_t;

typedef struct {
    const char *role;       /* "system", "user" or "assistant" */
    const char *content;
} na_chat_msg_t;

/* The family's name, and the one of that name (NA_ERR_NOT_FOUND naming the
 * known ones). */
const char *na_chat_name(na_chat_t t);
na_status_t na_chat_lookup(const char *name, na_chat_t *t);
/* The family of a Jinja template text by its markers; NA_ERR_NOT_FOUND. */
na_status_t na_chat_detect(const char *jinja, na_chat_t *t);
/* The template of a model: name when not NULL (--chat-template), else the
 * GGUF's tokenizer.chat_template. NA_ERR_NOT_FOUND with a message that says
 * what to do when the model has none or one of an unknown family. */
na_status_t na_chat_for_model(const na_model_t *m, const char *name, na_chat_t *t);
/* Render msgs[0..n) (n >= 1; roles system, user, assistant) into *text_p
 * (malloc'd, NUL-terminated). NA_ERR_INVALID naming a bad role (with its
 * index), NA_ERR_NOMEM. */
na_status_t na_chat_render(na_chat_t t, const na_chat_msg_t *msgs, int n, char **text_p);
/* na_chat_render, and the template parts of the text in *spans_p[0..*n_spans_p)
 * (malloc'd; NULL spans_p: not wanted), ordered, never inside a message. */
na_status_t na_chat_render_spans(na_chat_t t, const na_chat_msg_t *msgs, int n, char **text_p,
                                 na_tok_span_t **spans_p, size_t *n_spans_p);
/* The family's end-of-turn marker (a stop string for replies). */
const char *na_chat_end(na_chat_t t);

#endif /* NA_SERVE_CHAT_H */
