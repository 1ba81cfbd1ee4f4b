/* tests/tools/greedy_common.h — what both sides of scripts/llama_agree.sh
 * share: tests/tools/greedy_top.c (this engine) and tests/tools/llama_greedy.c
 * (llama.cpp; compiled alone by the script against a llama.cpp build, so
 * everything here is static and needs only libc). One command line
 * (PROG MODEL N_NEW ID [ID ...]), one set of variables (PREFIX_FORCE,
 * PREFIX_LOGITS, PREFIX_TRACE with PREFIX NA_GREEDY or NA_LLAMA), one output
 * format: the two outputs are compared line by line. */
#ifndef NA_GREEDY_COMMON_H
#define NA_GREEDY_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "greedy_top2.h"

typedef struct {
    const char *prog;           /* "na_greedy_top", "llama_greedy": messages */
    int         n_new, n_prompt;
    int        *toks;           /* n_prompt + n_new: the prompt's ids, then the new ones */
    int         tstep;          /* PREFIX_TRACE=STEP:DIR: the step (-1: no trace) */
    const char *tdir;           /* ... and DIR */
    int        *forced;         /* PREFIX_FORCE=FILE: its ids, fed as the new tokens */
    int         n_forced;
    const char *lpath;          /* PREFIX_LOGITS=FILE: every step's logits, a line each */
    const char *fpath;          /* PREFIX_FORCE=FILE (messages) */
    FILE       *lf;
} greedy_run_t;

static const char *greedy_env(const char *prefix, const char *name)
{
    char var[64];
    snprintf(var, sizeof(var), "%s_%s", prefix, name);
    return getenv(var);
}

static int greedy_close(greedy_run_t *g);

/* greedy_open's reading, leaving what it allocated in g. */
static int greedy_parse(greedy_run_t *g, const char *prog, const char *prefix, int argc,
                        char **argv)
{
    const char *force = greedy_env(prefix, "FORCE"), *trace = greedy_env(prefix, "TRACE");
    int i;

    memset(g, 0, sizeof(*g));
    g->prog = prog;
    g->fpath = force;
    g->tstep = -1;
    g->lpath = greedy_env(prefix, "LOGITS");
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL N_NEW ID [ID ...]\n", prog);
        return 2;
    }
    g->n_new = atoi(argv[2]);
    g->n_prompt = argc - 3;
    if (g->n_new <= 0 || g->n_new > 100000) {
        fprintf(stderr, "%s: N_NEW '%s' is not a count in 1..100000\n", prog, argv[2]);
        return 2;
    }
    g->toks = calloc((size_t)(g->n_prompt + g->n_new), sizeof(int));
    if (g->toks == NULL) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 1;
    }
    for (i = 0; i < g->n_prompt; i++) {
        char *end;
        long t = strtol(argv[3 + i], &end, 10);
        if (*end != '\0' || end == argv[3 + i] || t < 0 || t > 1000000000L) {
            fprintf(stderr, "%s: token id '%s' is not a whole number\n", prog, argv[3 + i]);
            return 2;
        }
        g->toks[i] = (int)t;
    }
    if (trace != NULL) {
        g->tstep = atoi(trace);
        g->tdir = strchr(trace, ':');
        if (g->tdir == NULL || g->tstep < 0) {
            fprintf(stderr, "%s: %s_TRACE '%s' is not STEP:DIR\n", prog, prefix, trace);
            return 2;
        }
        g->tdir++;
    }
    if (force != NULL) {
        FILE *f = fopen(force, "r");
        int t;
        g->forced = calloc((size_t)g->n_new, sizeof(int));
        if (f == NULL || g->forced == NULL) {
            fprintf(stderr, "%s: cannot read %s\n", prog, force);
            if (f != NULL)
                fclose(f);
            return 1;
        }
        while (g->n_forced < g->n_new && fscanf(f, "%d", &t) == 1)
            g->forced[g->n_forced++] = t;
        fclose(f);
    }
    if (g->lpath != NULL && (g->lf = fopen(g->lpath, "w")) == NULL) {
        fprintf(stderr, "%s: cannot write %s\n", prog, g->lpath);
        return 1;
    }
    return 0;
}

/* The command line and the variables PREFIX_* into g: 0, or the exit status
 * after a message (2: bad usage, 1: out of memory, a file not read or not
 * written), g then freed. */
static int greedy_open(greedy_run_t *g, const char *prog, const char *prefix, int argc,
                       char **argv)
{
    int rc = greedy_parse(g, prog, prefix, argc, argv);
    if (rc != 0)
        greedy_close(g);
    return rc;
}

/* bytes of p into DIR/NAME-L.f32 (a traced step's tensors): 0, or -1 said. */
static int greedy_dump(const greedy_run_t *g, const char *name, int l, const void *p,
                       size_t bytes)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s-%d.f32", g->tdir, name, l);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "%s: cannot write %s\n", g->prog, path);
        if (f != NULL)
            fclose(f);
        return -1;
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* Step i's logits l (v of them): print "step id logit id2 logit2" (the
 * argmax and the runner-up; when forced, then the logit of the forced id),
 * the logits line, and take the next token (the forced one while there are,
 * else the argmax). 0, or -1 after a message for a forced id outside the
 * vocabulary. */
static int greedy_step(greedy_run_t *g, int i, const float *l, int v)
{
    int i2, i1 = greedy_top2(l, v, &i2), j;

    if (i < g->n_forced && (g->forced[i] < 0 || g->forced[i] >= v)) {
        fprintf(stderr, "%s: forced id %d (step %d of %s) is not in the vocabulary of %d\n",
                g->prog, g->forced[i], i, g->fpath, v);
        return -1;
    }
    printf("%d %d %.6f %d %.6f", i, i1, (double)l[i1], i2, (double)l[i2]);
    if (i < g->n_forced)                 /* the logit of the id it is fed */
        printf(" %.6f", (double)l[g->forced[i]]);
    putchar('\n');
    if (g->lf != NULL) {
        for (j = 0; j < v; j++)
            fprintf(g->lf, j ? " %.6f" : "%.6f", (double)l[j]);
        fputc('\n', g->lf);
    }
    g->toks[g->n_prompt + i] = i < g->n_forced ? g->forced[i] : i1;
    return 0;
}

/* Close the logits file and free g: 0, or -1 after a message when the
 * logits file could not be written. */
static int greedy_close(greedy_run_t *g)
{
    int rc = 0;

    if (g->lf != NULL && fclose(g->lf) != 0) {
        fprintf(stderr, "%s: cannot write %s\n", g->prog, g->lpath);
        rc = -1;
    }
    g->lf = NULL;
    free(g->forced);
    free(g->toks);
    g->forced = g->toks = NULL;
    return rc;
}

#endif /* NA_GREEDY_COMMON_H */
