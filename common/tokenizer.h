/* common/tokenizer.h — the tokenizers of a model: SentencePiece-style BPE
 * with byte fallback, read from a llama2.c tokenizer.bin or from a GGUF
 * file's tokenizer.ggml.* metadata (tokenizer.ggml.model = "llama"), and
 * GPT-2-style byte-level BPE from a GGUF file (tokenizer.ggml.model =
 * "gpt2", below).
 *
 * Encoding follows llama2.c's run.c semantics: a dummy prefix space is added
 * to non-empty text, every UTF-8 code point that is a vocabulary piece becomes
 * that token, other bytes become their <0xNN> byte tokens, then adjacent pairs
 * are merged greedily by the best score of the merged piece.
 * Decoding one token given the previous one: after BOS a leading space is
 * stripped (also a lone <0x20> byte token); a <0xNN> piece decodes to that raw byte. Pieces hold real spaces
 * (GGUF's U+2581 "▁" is converted to ' ' at load).
 *
 * Byte-level BPE (llama.cpp's LLAMA_VOCAB_TYPE_BPE, the same ids): the text
 * is cut at special tokens (user-defined ones always, control ones such as
 * <|im_start|> only when asked: NA_TOK_PARSE_SPECIAL or spans), each raw
 * part is split into words by the pre-tokenizer of tokenizer.ggml.pre
 * (common/tok_pretok.h, PCRE2), and each word's bytes are merged by the rank
 * of tokenizer.ggml.merges (common/tok_bpe.c). No dummy prefix. A normal
 * token decodes to its bytes (GPT-2's byte-to-unicode mapping undone), which
 * may end inside a UTF-8 character: a front end holds such bytes until the
 * character completes (serve/gen.c does; `run` writes bytes as they come).
 * Control and padding tokens decode to "", user-defined ones to their text.
 * BOS/EOS are what the file names (-1 when it names none). */
#ifndef NA_TOKENIZER_H
#define NA_TOKENIZER_H

#include <stddef.h>

#include "status.h"

struct na_gguf;
typedef struct na_tokenizer na_tokenizer_t;

/* Read a llama2.c tokenizer.bin (int32 max_token_length, then per token:
 * f32 score, int32 length, bytes) holding exactly vocab_size tokens.
 * BOS = 1, EOS = 2 (llama convention). Every length is checked against the
 * file size. Fails with NA_ERR_IO / NA_ERR_FORMAT / NA_ERR_RANGE / NA_ERR_NOMEM
 * (message names the file and the field). On success *tok_p is owned by the
 * caller (na_tokenizer_destroy). */
na_status_t na_tokenizer_create_llama2c(const char *path, int vocab_size,
                                        na_tokenizer_t **tok_p);

/* Build a tokenizer from parsed GGUF metadata: tokenizer.ggml.tokens (required),
 * .scores (optional, default 0), .token_type (optional), .bos_token_id /
 * .eos_token_id (defaults 1 / 2). tokenizer.ggml.model "llama" (or absent):
 * SentencePiece; "gpt2": byte-level BPE, also reading .merges, .pre,
 * .add_bos_token / .add_eos_token (bool; default: add BOS for the llama3
 * pre-tokenizer only, as llama.cpp). Fails with NA_ERR_UNSUPPORTED for
 * another model or an unknown pre-tokenizer, NA_ERR_FORMAT for a merge that
 * names no token; every message names the file and the field. Copies what
 * it needs: the gguf may be destroyed afterwards. */
na_status_t na_tokenizer_create_gguf(const struct na_gguf *gguf, na_tokenizer_t **tok_p);

/* Open a tokenizer file of either kind: a GGUF file (by its magic) or a
 * llama2.c tokenizer.bin with vocab_size tokens (vocab_size must be > 0 then;
 * for GGUF it is checked against the file's vocabulary when > 0). */
na_status_t na_tokenizer_open(const char *path, int vocab_size, na_tokenizer_t **tok_p);

/* The tokenizer of model m (opened from model_path), as every front end finds
 * it: `given` when not NULL, else the GGUF's own vocabulary, else for a
 * llama2.c checkpoint P.bin the file P.tok.bin, else tokenizer.bin in the
 * checkpoint's folder; NA_ERR_NOT_FOUND saying to give --tokenizer when none
 * is there. used[used_cap] gets the path opened ("" for the GGUF's own); it
 * may be the same buffer as `given`. */
struct na_model;
na_status_t na_tokenizer_open_for_model(const struct na_model *m, const char *model_path,
                                        const char *given, char *used, size_t used_cap,
                                        na_tokenizer_t **tok_p);

/* Free everything; NULL is a no-op. */
void na_tokenizer_destroy(na_tokenizer_t *tok);

int na_tokenizer_vocab_size(const na_tokenizer_t *tok);
int na_tokenizer_bos(const na_tokenizer_t *tok);   /* -1: none */
int na_tokenizer_eos(const na_tokenizer_t *tok);   /* -1: none */
/* Whether encoding a prompt should add BOS / EOS, as the file asks
 * (tokenizer.ggml.add_bos_token; SentencePiece and llama2.c: BOS yes, EOS
 * no). 0 when the vocabulary has no such token. */
int na_tokenizer_add_bos(const na_tokenizer_t *tok);
int na_tokenizer_add_eos(const na_tokenizer_t *tok);
/* The tokens that end a generation: EOS and BOS (as `run` always stopped),
 * then for byte-level BPE the control tokens that end a turn
 * (<|eot_id|>, <|eom_id|>, <|im_end|>, <|end|>, <end_of_turn>,
 * <|endoftext|>, <|end_of_text|>, as llama.cpp's end-of-generation set).
 * Writes at most cap ids (none negative, none twice); returns how many. */
int na_tokenizer_stop_ids(const na_tokenizer_t *tok, int *ids, int cap);
/* "spm" or "bpe". */
const char *na_tokenizer_kind(const na_tokenizer_t *tok);

/* Upper bound on the tokens encode can produce for a text of text_len bytes
 * (text_len + 3: dummy prefix, BOS, EOS). */
size_t na_tokenizer_max_tokens(size_t text_len);

/* Encode a NUL-terminated UTF-8 (or arbitrary byte) string into tokens[0..*n_p),
 * with BOS first when bos != 0 and EOS last when eos != 0. max_tokens is the
 * capacity of tokens; na_tokenizer_max_tokens(strlen(text)) always suffices.
 * Fails with NA_ERR_NOSPACE if the capacity is too small, NA_ERR_NOMEM.
 * Thread-safe (the tokenizer is only read). */
na_status_t na_tokenizer_encode(const na_tokenizer_t *tok, const char *text,
                                int bos, int eos, int *tokens, size_t max_tokens,
                                size_t *n_p);

/* Flags of na_tokenizer_encode_ex. */
enum {
    NA_TOK_ADD_BOS       = 1,
    NA_TOK_ADD_EOS       = 2,
    NA_TOK_PARSE_SPECIAL = 4,   /* control tokens anywhere in the text are tokens */
};

/* A byte range of a text. */
typedef struct {
    size_t off, len;
} na_tok_span_t;

/* Encode text[0..len) (may hold NULs). flags as above; control tokens are
 * also recognised when they lie wholly inside one of spans[0..n_spans) (the
 * template parts of a chat; NULL/0: none). User-defined tokens are found
 * anywhere. SentencePiece vocabularies have no special tokens in text: they
 * encode as na_tokenizer_encode. Errors as na_tokenizer_encode. */
na_status_t na_tokenizer_encode_ex(const na_tokenizer_t *tok, const char *text, size_t len,
                                   unsigned flags, const na_tok_span_t *spans, size_t n_spans,
                                   int *tokens, size_t max_tokens, size_t *n_p);

/* The text of `token` following `prev_token` (pass -1 for none): a
 * NUL-terminated piece owned by the tokenizer. Strips the leading space when
 * prev_token is BOS (SentencePiece only); a <0xNN> byte token gives a 1-byte
 * string (the raw byte, which may be 0x00: then the string is "" — use
 * na_tokenizer_decode_len). Control tokens (BOS/EOS/unk, type 2/3 in GGUF)
 * and padding tokens decode to "". An id outside
 * [0, vocab) gives "". Never fails. */
const char *na_tokenizer_decode(const na_tokenizer_t *tok, int prev_token, int token);

/* Like na_tokenizer_decode, also returning the byte length in *len_p
 * (1 for byte token 0x00). */
const char *na_tokenizer_decode_len(const na_tokenizer_t *tok, int prev_token, int token,
                                    size_t *len_p);

/* Decode a whole sequence (tokens[0] is decoded with prev_token = -1) into buf
 * (NUL-terminated, at most len-1 bytes). Returns NA_ERR_NOSPACE if truncated.
 * *out_len_p (may be NULL) gets the number of bytes written. */
na_status_t na_tokenizer_decode_all(const na_tokenizer_t *tok, const int *tokens, size_t n,
                                    char *buf, size_t len, size_t *out_len_p);

/* The raw vocabulary piece of a token (spaces as ' ', byte tokens as "<0xNN>";
 * BPE: the bytes of a normal token, the text of a special one), and its score;
 * NULL / 0 for an id out of range. */
const char *na_tokenizer_piece(const na_tokenizer_t *tok, int token);
float       na_tokenizer_score(const na_tokenizer_t *tok, int token);

#endif /* NA_TOKENIZER_H */
