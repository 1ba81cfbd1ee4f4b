/* cli/main.c — the nearattn program: dispatch to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

/* One line per subcommand; each is implemented in cli/cmd_<name>.c. */
static const na_cli_cmd_t na_cli_cmds[] = {
    { "run",       "generate text (offload by default; --mode monolithic for one process)", na_cmd_run },
    { "check-config", "validate a cluster layout and print its plan", na_cmd_check_config },
    { "bench",     "measured comparisons beside in-run limits (nearattn bench --help)", na_cmd_bench },
    { "gen-model", "write a deterministic random-weight model (llama2.c and/or GGUF)", na_cmd_gen_model },
    { "node",      "run one node of a cluster layout (rank from --name/--rank or mpirun/srun)", na_cmd_node },
    { "launch",    "start every node of a layout (fork/exec here, or mpirun for several hosts)", na_cmd_launch },
    { "serve",     "OpenAI-compatible HTTP server over the long-lived engine (docs/serve.md)", na_cmd_serve },
    { "batch",     "run an OpenAI batch file (JSONL) with progress and resume", na_cmd_batch },
    { "perplexity", "perplexity of a model on a text file (llama-perplexity's chunks)", na_cmd_perplexity },
    { "tokenize",  "print the token ids of a text (or check llama.cpp's tokenizer test vectors)", na_cmd_tokenize },
    { "csd-xclbin", "write the metadata-only xclbin of the CSD kernel (XRT noop)", na_cmd_csd_xclbin },
    { NULL, NULL, NULL }
};

static void na_cli_usage(FILE *f)
{
    fprintf(f, "usage: nearattn <command> [options]   (nearattn <command> --help for details)\n\n"
               "nearattn: LLM inference with attention computed where the KV cache lives.\n\n"
               "commands:\n");
    na_cli_list(f, na_cli_cmds, 13);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        na_cli_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        na_cli_usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("nearattn 0.1.0\n");
        return 0;
    }
    return na_cli_dispatch(na_cli_cmds, "nearattn", "command", argc, argv);
}
