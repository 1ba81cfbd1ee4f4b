/* common/tok_pretok.c — PCRE2 pre-tokenizers of byte-level BPE vocabularies
 * (see tok_pretok.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tok_pretok.h"
#include "common/grow.h"

#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NA_PRETOK_MAX_RE 6

/* The expressions, from llama.cpp's src/llama-vocab.cpp (llm_tokenizer_bpe).
 * Where llama.cpp adapted the tokenizer.json pattern for std::regex
 * ("(?i:'s|...)" spelled out as "'[sS]|..."), its adapted text is used, so
 * that the two agree on every input. */
#define NA_RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define NA_RE_LLAMA3 \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define NA_RE_QWEN2 \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define NA_RE_DEEPSEEK_LLM_LETTERS \
    "\\s?[A-Za-z\xc2\xb5\xc3\x80-\xc3\x96\xc3\x98-\xc3\xb6\xc3\xb8-\xc6\xba\xc6\xbc-\xc6\xbf" \
    "\xc7\x84-\xca\x93\xca\x95-\xca\xaf\xcd\xb0-\xcd\xb3\xcd\xb6\xcd\xb7\xcd\xbb-\xcd\xbd\xcd" \
    "\xbf\xce\x86\xce\x88-\xce\x8a\xce\x8c\xce\x8e-\xce\xa1\xce\xa3-\xcf\xb5\xcf\xb7-\xd2\x81" \
    "\xd2\x8a-\xd4\xaf\xd4\xb1-\xd5\x96\xe1\x82\xa0-\xe1\x83\x85\xe1\x8e\xa0-\xe1\x8f\xb5\xe1" \
    "\x8f\xb8-\xe1\x8f\xbd\xe1\xb2\x90-\xe1\xb2\xba\xe1\xb2\xbd-\xe1\xb2\xbf\xe1\xb4\x80-\xe1" \
    "\xb4\xab\xe1\xb5\xab-\xe1\xb5\xb7\xe1\xb5\xb9-\xe1\xb6\x9a\xe1\xb8\x80-\xe1\xbc\x95\xe1" \
    "\xbc\x98-\xe1\xbc\x9d\xe1\xbc\xa0-\xe1\xbd\x85\xe1\xbd\x88-\xe1\xbd\x8d\xe1\xbd\x90-\xe1" \
    "\xbd\x97\xe1\xbd\x99\xe1\xbd\x9b\xe1\xbd\x9d\xe1\xbd\x9f-\xe1\xbd\xbd\xe1\xbe\x80-\xe1" \
    "\xbe\xb4\xe1\xbe\xb6-\xe1\xbe\xbc\xe1\xbe\xbe\xe1\xbf\x82-\xe1\xbf\x84\xe1\xbf\x86-\xe1" \
    "\xbf\x8c\xe1\xbf\x90-\xe1\xbf\x93\xe1\xbf\x96-\xe1\xbf\x9b\xe1\xbf\xa0-\xe1\xbf\xac\xe1" \
    "\xbf\xb2-\xe1\xbf\xb4\xe1\xbf\xb6-\xe1\xbf\xbc\xe2\x84\x82\xe2\x84\x87\xe2\x84\x8a-\xe2" \
    "\x84\x93\xe2\x84\x95\xe2\x84\x99-\xe2\x84\x9d\xe2\x84\xa4\xe2\x84\xa6\xe2\x84\xa8\xe2" \
    "\x84\xaa-\xe2\x84\xad\xe2\x84\xaf-\xe2\x84\xb4\xe2\x84\xb9\xe2\x84\xbc-\xe2\x84\xbf\xe2" \
    "\x85\x85-\xe2\x85\x89\xe2\x85\x8e\xe2\x86\x83\xe2\x86\x84\xe2\xb0\x80-\xe2\xb1\xbb\xe2" \
    "\xb1\xbe-\xe2\xb3\xa4\xe2\xb3\xab-\xe2\xb3\xae\xe2\xb3\xb2\xe2\xb3\xb3\xea\x99\x80-\xea" \
    "\x99\xad\xea\x9a\x80-\xea\x9a\x9b\xea\x9c\xa2-\xea\x9d\xaf\xea\x9d\xb1-\xea\x9e\x87\xea" \
    "\x9e\x8b-\xea\x9e\x8e\xea\xad\xb0-\xea\xae\xbf\xef\xac\x80-\xef\xac\x86\xef\xac\x93-\xef" \
    "\xac\x97\xef\xbc\xa1-\xef\xbc\xba\xef\xbd\x81-\xef\xbd\x9a\xf0\x90\x90\x80-\xf0\x90\x91" \
    "\x8f\xf0\x90\x92\xb0-\xf0\x90\x93\x93\xf0\x90\x93\x98-\xf0\x90\x93\xbb\xf0\x90\xb2\x80-" \
    "\xf0\x90\xb2\xb2\xf0\x90\xb3\x80-\xf0\x90\xb3\xb2\xf0\x91\xa2\xa0-\xf0\x91\xa3\x9f\xf0" \
    "\x9e\xa4\x80-\xf0\x9e\xa5\x83]+"
#define NA_RE_PORO \
    " ?[^(\\s|.,!?\xe2\x80\xa6\xe3\x80\x82\xef\xbc\x8c\xe3\x80\x81\xe0\xa5\xa4\xdb\x94\xd8\x8c)]+"
/* tekken (Mistral NeMo and later): llama.cpp's std::regex form of the
 * tokenizer.json pattern, which spells [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] as
 * "a letter that is not a-z" and [\p{Ll}\p{Lm}\p{Lo}\p{M}] as "a letter that
 * is not A-Z": a letter outside ASCII is of both kinds and marks of neither,
 * as on llama.cpp's collapsed text (every non-ASCII letter one code there) */
#define NA_RE_TEKKEN \
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|" \
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|" \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define NA_RE_CJK "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+"

typedef struct {
    const char *name;                    /* canonical */
    const char *names;                   /* every accepted value, '|'-separated */
    int         ignore_merges, add_bos;
    const char *re[NA_PRETOK_MAX_RE];
} na_pretok_fam_t;

static const na_pretok_fam_t na_pretok_fams[] = {
    { "default", "default", 0, 0,
      { "[\\p{P}\\$\\+<=>\\^~\\|]+", NA_RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]" } },
    { "llama3", "llama3|llama-v3|llama-bpe|falcon3", 1, 1, { NA_RE_LLAMA3 } },
    { "dbrx", "dbrx|smaug-bpe", 0, 0, { NA_RE_LLAMA3 } },
    { "qwen2", "qwen2|deepseek-r1-qwen|stablelm2|megrez", 0, 0, { NA_RE_QWEN2 } },
    { "gpt-2", "gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v1-en|jina-v2-es|jina-v2-de|"
               "jina-v2-code|roberta-bpe|mpt|olmo|jais", 0, 0, { NA_RE_GPT2 } },
    { "starcoder", "starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b", 0, 0,
      { "\\p{N}", NA_RE_GPT2 } },
    { "falcon", "falcon", 0, 0,
      { "[\\p{P}\\$\\+<=>\\^~\\|`]+", NA_RE_GPT2, "[0-9][0-9][0-9]" } },
    { "deepseek-llm", "deepseek-llm", 0, 0,
      { "[\r\n]",
        NA_RE_DEEPSEEK_LLM_LETTERS,
        "\\s?[!-/:-~\xef\xbc\x81-\xef\xbc\x8f\xef\xbc\x9a-\xef\xbd\x9e\xe2\x80\x98-\xe2\x80\x9f"
        "\xe3\x80\x80-\xe3\x80\x82]+",
        "\\s+$", NA_RE_CJK, "\\p{N}+" } },
    { "deepseek-coder", "deepseek-coder", 0, 0,
      { "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", NA_RE_CJK, "\\p{N}" } },
    { "deepseek-v3", "deepseek-v3", 0, 0,
      { "\\p{N}{1,3}",
        "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
        "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+" } },
    { "poro", "poro-chat|bloom|gpt3-finnish", 0, 0,
      { NA_RE_PORO } },
    { "viking", "viking", 0, 0,
      { NA_RE_PORO,
        "\\p{N}" } },
    { "tekken", "tekken", 1, 1, { NA_RE_TEKKEN } },
    /* chameleon: the upstream pre-tokenizer's sequence; its sentinel and
     * image-token expressions only split what the special-token partition
     * would split anyway (llama.cpp keeps them for the same reason) */
    { "chameleon", "chameleon", 0, 1,
      { "<sentinel:[0-9]+>",
        "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
        "([\\t\\n]|    |  )",
        "\\p{N}",
        "[\\p{P}!-/:-@\\[-`{-~]",
        NA_RE_GPT2 } },
};

#define NA_PRETOK_NAMES "default, llama3 (llama-bpe), qwen2, gpt-2, starcoder, falcon, " \
    "deepseek-llm, deepseek-coder, deepseek-v3, dbrx, poro-chat, viking, tekken, chameleon " \
    "and their aliases"

struct na_pretok {
    const na_pretok_fam_t *fam;
    int                    n;
    pcre2_code            *re[NA_PRETOK_MAX_RE];
};

/* Whether `names` ('|'-separated) holds name[0..len). */
static int na_pretok_has(const char *names, const char *name, size_t len)
{
    const char *p = names;
    for (;;) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == len && memcmp(p, name, len) == 0)
            return 1;
        if (e == NULL)
            return 0;
        p = e + 1;
    }
}

void na_pretok_destroy(na_pretok_t *p)
{
    int i;
    if (p == NULL)
        return;
    for (i = 0; i < p->n; i++)
        pcre2_code_free(p->re[i]);
    free(p);
}

na_status_t na_pretok_create(const char *name, size_t name_len, na_pretok_t **p_out,
                             int *ignore_merges_p, int *add_bos_p)
{
    const na_pretok_fam_t *fam = NULL;
    na_pretok_t *p;
    size_t i;

    *p_out = NULL;
    if (name == NULL || name_len == 0) {
        name = "default";
        name_len = 7;
    }
    for (i = 0; i < sizeof(na_pretok_fams) / sizeof(na_pretok_fams[0]); i++)
        if (na_pretok_has(na_pretok_fams[i].names, name, name_len))
            fam = &na_pretok_fams[i];
    if (fam == NULL)
        return na_err(NA_ERR_UNSUPPORTED, "unknown pre-tokenizer '%.*s' (known: %s)",
                      (int)(name_len > 64 ? 64 : name_len), name, NA_PRETOK_NAMES);
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return na_err(NA_ERR_NOMEM, "no memory for the pre-tokenizer");
    p->fam = fam;
    for (i = 0; i < NA_PRETOK_MAX_RE && fam->re[i] != NULL; i++) {
        int err = 0;
        PCRE2_SIZE at = 0;
        p->re[i] = pcre2_compile((PCRE2_SPTR)fam->re[i], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF |
                                 PCRE2_DOLLAR_ENDONLY, &err, &at, NULL);
        if (p->re[i] == NULL) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof(msg));
            na_pretok_destroy(p);
            return na_err(NA_ERR_INTERNAL, "pre-tokenizer '%s': expression %zu does not "
                          "compile at offset %zu: %s", fam->name, i, (size_t)at, (char *)msg);
        }
        p->n = (int)i + 1;
        (void)pcre2_jit_compile(p->re[i], PCRE2_JIT_COMPLETE);   /* else interpreted */
    }
    *ignore_merges_p = fam->ignore_merges;
    *add_bos_p = fam->add_bos;
    *p_out = p;
    return NA_OK;
}

const char *na_pretok_name(const na_pretok_t *p) { return p->fam->name; }

/* A growing list of pieces (offset, length). */
typedef struct {
    size_t *v;                 /* [2 * cap] */
    size_t  n, cap;
} na_pretok_list_t;

static int na_pretok_push(na_pretok_list_t *l, size_t off, size_t len)
{
    size_t *v = na_grow(l->v, &l->cap, l->n + 1, 2 * sizeof(size_t), 64);

    if (v == NULL)
        return -1;
    l->v = v;
    l->v[2 * l->n] = off;
    l->v[2 * l->n + 1] = len;
    l->n++;
    return 0;
}

/* Split the piece text[off .. off+len) by re into out (matches and gaps). */
static na_status_t na_pretok_one(const pcre2_code *re, pcre2_match_data *md, const char *text,
                                 size_t off, size_t len, na_pretok_list_t *out)
{
    PCRE2_SPTR s = (PCRE2_SPTR)(text + off);
    size_t pos = 0, last = 0;

    while (pos < len) {
        PCRE2_SIZE *ov;
        size_t ms, me;
        int rc = pcre2_match(re, s, len, pos, 0, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, s, len, pos, PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            return na_err(NA_ERR_INTERNAL, "pre-tokenizer: matching %zu bytes failed: %s", len,
                          (char *)msg);
        }
        ov = pcre2_get_ovector_pointer(md);
        ms = ov[0];
        me = ov[1];
        if (me <= ms) {                  /* an empty match: none of ours, but step on */
            pos = ms + 1;
            while (pos < len && (s[pos] & 0xC0) == 0x80)
                pos++;
            continue;
        }
        if ((ms > last && na_pretok_push(out, off + last, ms - last) != 0) ||
            na_pretok_push(out, off + ms, me - ms) != 0)
            return na_err(NA_ERR_NOMEM, "pre-tokenizer: no memory for the words");
        last = pos = me;
    }
    if (last < len && na_pretok_push(out, off + last, len - last) != 0)
        return na_err(NA_ERR_NOMEM, "pre-tokenizer: no memory for the words");
    return NA_OK;
}

na_status_t na_pretok_split(const na_pretok_t *p, const char *text, size_t len,
                            na_pretok_fn fn, void *user)
{
    na_pretok_list_t a = { 0 }, b = { 0 };
    pcre2_match_data *md = NULL;
    na_status_t st = NA_OK;
    size_t k;
    int r;

    if (len == 0)
        return NA_OK;
    if (na_pretok_push(&a, 0, len) != 0)
        return na_err(NA_ERR_NOMEM, "pre-tokenizer: no memory for the words");
    for (r = 0; r < p->n && st == NA_OK; r++) {
        na_pretok_list_t t;
        md = pcre2_match_data_create_from_pattern(p->re[r], NULL);
        if (md == NULL) {
            st = na_err(NA_ERR_NOMEM, "pre-tokenizer: no memory for match data");
            break;
        }
        b.n = 0;
        for (k = 0; k < a.n && st == NA_OK; k++)
            st = na_pretok_one(p->re[r], md, text, a.v[2 * k], a.v[2 * k + 1], &b);
        pcre2_match_data_free(md);
        t = a;
        a = b;
        b = t;
    }
    for (k = 0; k < a.n && st == NA_OK; k++)
        if (fn(user, a.v[2 * k], a.v[2 * k + 1]) != 0)
            st = NA_ERR_NOSPACE;
    free(a.v);
    free(b.v);
    return st;
}
