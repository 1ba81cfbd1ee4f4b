/* cli/gen_opts.h — the options of the generation front end (serve/gen.h)
 * that `nearattn serve` and `nearattn batch` take alike: one parser and one
 * check for both commands. */
#ifndef NA_CLI_GEN_OPTS_H
#define NA_CLI_GEN_OPTS_H

#include "serve/gen.h"

/* If f is one of --no-prefix-reuse, --no-adaptive-batches (no value), --config, --model,
 * --tokenizer, --mode, --cluster, --backend (a string), --threads N or
 * --batch N, take it into *go; v is the argument after f (NULL when f came
 * last). Returns the arguments taken (1 or 2); 0 when f is none of them;
 * -1 when it is one that needs a value and v is NULL (nothing said: the
 * command says it its own way); -2 after "nearattn <cmd>: ..." on stderr for
 * a bad number. */
int na_cli_gen_opt(const char *cmd, na_sg_opts_t *go, const char *f, const char *v);
/* go's mode and cluster are ones the front end knows: 0; else 2 after
 * "nearattn <cmd>: unknown mode ..." or "unknown --cluster ..." on stderr. */
int na_cli_gen_check(const char *cmd, const na_sg_opts_t *go);

#endif /* NA_CLI_GEN_OPTS_H */
