/* cli/cmd_tokenize.c — `nearattn tokenize`: the token ids of a text, or of
 * every string of a llama.cpp tokenizer test-vector file (.inp), optionally
 * checked against its .out. */
#define _GNU_SOURCE             /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/tokenizer.h"

#define NA_INP_SEP "\n__ggml_vocab_test__\n"

static void na_tokenize_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn tokenize --model FILE [--prompt TEXT | --inp FILE [--check FILE]]\n"
        "                         [--no-bos] [--special]\n\n"
        "Print the token ids of a text, space-separated on one line, with the tokenizer of a\n"
        "GGUF file (a model or a vocabulary: tokenizer.ggml.model llama or gpt2).\n"
        "BOS/EOS are added as the file asks (tokenizer.ggml.add_bos_token / add_eos_token;\n"
        "SentencePiece: BOS).\n\n"
        "options:\n"
        "  --model FILE    the GGUF file\n"
        "  --prompt TEXT   the text (default: all of stdin)\n"
        "  --no-bos        add neither BOS nor EOS\n"
        "  --special       control tokens written in the text (<|im_start|>, <|eot_id|>)\n"
        "                  are tokens; without it they are text (user-defined tokens always\n"
        "                  are tokens)\n"
        "  --inp FILE      a llama.cpp test-vector file (models/ggml-vocab-*.gguf.inp:\n"
        "                  strings separated by a line __ggml_vocab_test__): one line per\n"
        "                  string, each id preceded by a space as in the .out files, encoded\n"
        "                  as llama.cpp's test-tokenizer-0 does (no BOS/EOS)\n"
        "  --check FILE    with --inp: compare with the .out file instead of printing; say\n"
        "                  whether every id matches, else each string that differs (exit 1)\n"
        "  --help          this text\n\n"
        "examples:\n"
        "  nearattn tokenize --model model.gguf --prompt 'Hello world'\n"
        "  nearattn tokenize --model ggml-vocab-gpt-2.gguf --inp ggml-vocab-gpt-2.gguf.inp \\\n"
        "      --check ggml-vocab-gpt-2.gguf.out\n");
}

/* Read a whole file ("-": stdin) into a NUL-terminated buffer. */
static char *na_tokenize_slurp(const char *path, size_t *len_p)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    size_t cap = 1 << 16, len = 0, got;
    char *buf = NULL, *p;

    if (f == NULL)
        return NULL;
    for (;;) {
        if ((p = realloc(buf, cap + 1)) == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = p;
        got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len < cap)
            break;
        cap *= 2;
    }
    if (buf != NULL && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    if (f != stdin)
        fclose(f);
    if (buf != NULL) {
        buf[len] = 0;
        *len_p = len;
    }
    return buf;
}

/* Encode text[0..len); *ids_p (malloc'd) gets *n_p ids. */
static na_status_t na_tokenize_one(const na_tokenizer_t *t, const char *text, size_t len,
                                   unsigned flags, int **ids_p, size_t *n_p)
{
    size_t cap = na_tokenizer_max_tokens(len);
    int *ids = malloc(cap * sizeof(int));
    na_status_t st;

    if (ids == NULL)
        return na_err(NA_ERR_NOMEM, "no memory for %zu tokens", cap);
    st = na_tokenizer_encode_ex(t, text, len, flags, NULL, 0, ids, cap, n_p);
    if (st != NA_OK) {
        free(ids);
        return st;
    }
    *ids_p = ids;
    return NA_OK;
}

/* The strings of an .inp file, cut in place (llama.cpp's read_tests). */
static size_t na_tokenize_split_inp(char *buf, size_t len, char ***s_p, size_t **l_p)
{
    size_t n = 0, cap = 64, pos = 0, sl = strlen(NA_INP_SEP);
    char **s = malloc(cap * sizeof(char *));
    size_t *l = malloc(cap * sizeof(size_t));

    while (s != NULL && l != NULL && pos < len) {
        char *next = memmem(buf + pos, len - pos, NA_INP_SEP, sl);
        size_t e = next ? (size_t)(next - buf) : len;
        if (n == cap) {
            char **s2 = realloc(s, 2 * cap * sizeof(char *));
            size_t *l2 = s2 ? realloc(l, 2 * cap * sizeof(size_t)) : NULL;
            if (s2 != NULL)
                s = s2;
            if (l2 == NULL)
                break;
            l = l2;
            cap *= 2;
        }
        s[n] = buf + pos;
        l[n++] = e - pos;
        pos = next ? e + sl : len;
    }
    *s_p = s;
    *l_p = l;
    return s != NULL && l != NULL ? n : 0;
}

/* Compare ids with one .out line (" 1 2 3"); 0 when equal. */
static int na_tokenize_cmp_line(const char *line, const int *ids, size_t n)
{
    const char *p = line;
    size_t k = 0;
    for (;;) {
        char *e;
        long v;
        while (*p == ' ' || *p == '\r')
            p++;
        if (*p == 0 || *p == '\n')
            return k == n ? 0 : 1;
        v = strtol(p, &e, 10);
        if (e == p || k >= n || v != ids[k])
            return 1;
        k++;
        p = e;
    }
}

static int na_tokenize_inp(const char *cmd, const na_tokenizer_t *t, const char *inp,
                           const char *check, unsigned flags)
{
    size_t len = 0, olen = 0, n, i, bad = 0;
    char *buf = na_tokenize_slurp(inp, &len), *out = NULL, *line;
    char **s = NULL;
    size_t *l = NULL;
    int rc = 0;

    if (buf == NULL) {
        fprintf(stderr, "nearattn %s: %s: cannot read\n", cmd, inp);
        return 1;
    }
    if (check != NULL && (out = na_tokenize_slurp(check, &olen)) == NULL) {
        fprintf(stderr, "nearattn %s: %s: cannot read\n", cmd, check);
        free(buf);
        return 1;
    }
    n = na_tokenize_split_inp(buf, len, &s, &l);
    line = out;
    for (i = 0; i < n && rc == 0; i++) {
        int *ids = NULL;
        size_t k, m = 0;
        na_status_t st = na_tokenize_one(t, s[i], l[i], flags, &ids, &m);
        if (st != NA_OK) {
            rc = na_cli_fail(cmd, st);
            break;
        }
        if (out == NULL) {
            for (k = 0; k < m; k++)
                printf(" %d", ids[k]);
            putchar('\n');
        } else if (line == NULL || *line == 0) {
            fprintf(stderr, "nearattn %s: %s has fewer lines than %s has strings (%zu)\n", cmd,
                    check, inp, n);
            rc = 1;
        } else {
            char *eol = strchr(line, '\n');
            if (na_tokenize_cmp_line(line, ids, m) != 0) {
                bad++;
                printf("string %zu '%.*s': expected%.*s\n  got     ", i + 1, (int)l[i], s[i],
                       (int)(eol ? eol - line : (long)strlen(line)), line);
                for (k = 0; k < m; k++)
                    printf(" %d", ids[k]);
                putchar('\n');
            }
            line = eol ? eol + 1 : line + strlen(line);
        }
        free(ids);
    }
    if (rc == 0 && out != NULL) {
        if (bad == 0)
            printf("%s: %zu strings, every id matches %s\n", inp, n, check);
        else
            printf("%s: %zu of %zu strings differ from %s\n", inp, bad, n, check);
        rc = bad != 0;
    }
    free(s);
    free(l);
    free(buf);
    free(out);
    return rc;
}

int na_cmd_tokenize(int argc, char **argv)
{
    static const char *const cmd = "tokenize";
    const char *model = NULL, *prompt = NULL, *inp = NULL, *check = NULL;
    int no_bos = 0, special = 0, i, rc = 0;
    unsigned flags = 0;
    na_tokenizer_t *t = NULL;
    na_status_t st;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            na_tokenize_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--model") && i + 1 < argc) {
            model = argv[++i];
        } else if (!strcmp(a, "--prompt") && i + 1 < argc) {
            prompt = argv[++i];
        } else if (!strcmp(a, "--inp") && i + 1 < argc) {
            inp = argv[++i];
        } else if (!strcmp(a, "--check") && i + 1 < argc) {
            check = argv[++i];
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = 1;
        } else if (!strcmp(a, "--special")) {
            special = 1;
        } else {
            fprintf(stderr, "nearattn %s: unknown option or missing value: %s\n", cmd, a);
            na_tokenize_usage(stderr);
            return 2;
        }
    }
    if (model == NULL || (prompt != NULL && inp != NULL) || (check != NULL && inp == NULL)) {
        fprintf(stderr, "nearattn %s: %s\n", cmd, model == NULL ? "--model FILE is required" :
                check != NULL && inp == NULL ? "--check needs --inp" :
                "--prompt and --inp exclude each other");
        na_tokenize_usage(stderr);
        return 2;
    }
    st = na_tokenizer_open(model, 0, &t);
    if (st != NA_OK)
        return na_cli_fail(cmd, st);
    if (special)
        flags |= NA_TOK_PARSE_SPECIAL;
    if (inp != NULL) {
        rc = na_tokenize_inp(cmd, t, inp, check, flags);
    } else {
        size_t len = 0, n = 0, k;
        char *text = prompt != NULL ? NULL : na_tokenize_slurp("-", &len);
        int *ids = NULL;
        if (prompt != NULL)
            len = strlen(prompt);
        if (!no_bos)
            flags |= (na_tokenizer_add_bos(t) ? NA_TOK_ADD_BOS : 0) |
                     (na_tokenizer_add_eos(t) ? NA_TOK_ADD_EOS : 0);
        if (prompt == NULL && text == NULL) {
            fprintf(stderr, "nearattn %s: cannot read stdin\n", cmd);
            rc = 1;
        } else if ((st = na_tokenize_one(t, prompt ? prompt : text, len, flags, &ids, &n)) !=
                   NA_OK) {
            rc = na_cli_fail(cmd, st);
        } else {
            for (k = 0; k < n; k++)
                printf(k ? " %d" : "%d", ids[k]);
            putchar('\n');
        }
        free(ids);
        free(text);
    }
    na_tokenizer_destroy(t);
    if (fflush(stdout) != 0 && rc == 0)
        rc = 1;
    return rc;
}
