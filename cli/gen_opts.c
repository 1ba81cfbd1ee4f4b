/* cli/gen_opts.c — the generation front end's options shared by serve and
 * batch (cli/gen_opts.h). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/gen_opts.h"

int na_cli_gen_opt(const char *cmd, na_sg_opts_t *go, const char *f, const char *v)
{
    const char **str[] = { &go->config_path, &go->model_path, &go->tokenizer_path, &go->mode,
                           &go->cluster, &go->backend };
    static const char *const str_flags[] = { "--config", "--model", "--tokenizer", "--mode",
                                             "--cluster", "--backend" };
    const na_cli_num_t num[] = { { "--threads", 1, 1024, &go->threads },
                                 { "--batch", 1, 4096, &go->max_batch } };
    size_t k;
    long n;

    if (!strcmp(f, "--no-prefix-reuse")) {
        go->no_prefix_reuse = 1;
        return 1;
    }
    if (!strcmp(f, "--no-adaptive-batches")) {
        go->no_adaptive_batches = 1;
        return 1;
    }
    for (k = 0; k < sizeof(str) / sizeof(str[0]); k++)
        if (!strcmp(f, str_flags[k])) {
            if (v == NULL)
                return -1;
            *str[k] = v;
            return 2;
        }
    for (k = 0; k < sizeof(num) / sizeof(num[0]); k++)
        if (!strcmp(f, num[k].flag)) {
            if (v == NULL)
                return -1;
            if (na_cli_int(cmd, f, v, num[k].lo, num[k].hi, &n) != NA_OK)
                return -2;
            *num[k].v = (int)n;
            return 2;
        }
    return 0;
}

int na_cli_gen_check(const char *cmd, const na_sg_opts_t *go)
{
    if (na_cli_one_of(cmd, "mode", go->mode, na_cli_modes, 3) != 0 ||
        na_cli_one_of(cmd, "--cluster", go->cluster, na_cli_clusters, 3) != 0)
        return 2;
    return 0;
}
