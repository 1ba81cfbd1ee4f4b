/* common/tokenizer.h — SentencePiece-style BPE tokenizer with byte fallback,
 * read from a llama2.c tokenizer.bin or from a GGUF file's tokenizer.ggml.*
 * metadata (tokenizer.ggml.model = "llama").
 *
 * Encoding follows llama2.c's run.c semantics: a dummy prefix space is added
 * to non-empty text, every UTF-8 code point that is a vocabulary piece becomes
 * that token, other bytes become their <0xNN> byte tokens, then adjacent pairs
 * are merged greedily by the best score of the merged piece.
 * Decoding one token given the previous one: after BOS a leading space is
 * stripped (also a lone <0x20> byte token); a <0xNN> piece decodes to that raw byte. Pieces hold real spaces
 * (GGUF's U+2581 "▁" is converted to ' ' at load). */
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
 * .eos_token_id (defaults 1 / 2). Requires tokenizer.ggml.model = "llama" when
 * present. Copies what it needs: the gguf may be destroyed afterwards. */
na_status_t na_tokenizer_create_gguf(const struct na_gguf *gguf, na_tokenizer_t **tok_p);

/* Open a tokenizer file of either kind: a GGUF file (by its magic) or a
 * llama2.c tokenizer.bin with vocab_size tokens (vocab_size must be > 0 then;
 * for GGUF it is checked against the file's vocabulary when > 0). */
na_status_t na_tokenizer_open(const char *path, int vocab_size, na_tokenizer_t **tok_p);

/* Free everything; NULL is a no-op. */
void na_tokenizer_destroy(na_tokenizer_t *tok);

int na_tokenizer_vocab_size(const na_tokenizer_t *tok);
int na_tokenizer_bos(const na_tokenizer_t *tok);
int na_tokenizer_eos(const na_tokenizer_t *tok);

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

/* The text of `token` following `prev_token` (pass -1 for none): a
 * NUL-terminated piece owned by the tokenizer. Strips the leading space when
 * prev_token is BOS; a <0xNN> byte token gives a 1-byte string (the raw byte,
 * which may be 0x00: then the string is "" — use na_tokenizer_decode_len).
 * Control tokens (BOS/EOS/unk, type 2/3 in GGUF) decode to "". An id outside
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

/* The raw vocabulary piece of a token (spaces as ' ', byte tokens as "<0xNN>"),
 * and its score; NULL / 0 for an id out of range. */
const char *na_tokenizer_piece(const na_tokenizer_t *tok, int token);
float       na_tokenizer_score(const na_tokenizer_t *tok, int token);

#endif /* NA_TOKENIZER_H */
