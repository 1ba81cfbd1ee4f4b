/* cli/cli.h — the subcommands of the nearattn program and small helpers
 * they share for argument parsing. Each subcommand lives in cli/cmd_<name>.c,
 * takes (argc, argv) with argv[0] = the subcommand name, prints its own
 * --help, and returns the process exit code (0 ok, 1 runtime error, 2 usage). */
#ifndef NA_CLI_H
#define NA_CLI_H

#include <signal.h>
#include <stdio.h>

#include "common/dtype.h"
#include "common/status.h"

typedef struct {
    const char *name;
    const char *summary;
    int (*main)(int argc, char **argv);
} na_cli_cmd_t;

int na_cmd_run(int argc, char **argv);          /* cli/cmd_run.c */
int na_cmd_check_config(int argc, char **argv); /* cli/cmd_check_config.c */
int na_cmd_bench(int argc, char **argv);        /* cli/cmd_bench.c */
int na_cmd_gen_model(int argc, char **argv);    /* cli/cmd_gen_model.c */
int na_cmd_node(int argc, char **argv);         /* cli/cmd_node.c */
int na_cmd_launch(int argc, char **argv);       /* cli/cmd_launch.c */
int na_cmd_serve(int argc, char **argv);        /* cli/cmd_serve.c */
int na_cmd_csd_xclbin(int argc, char **argv);   /* cli/cmd_csd_xclbin.c */
int na_cmd_batch(int argc, char **argv);        /* cli/cmd_batch.c */
int na_cmd_perplexity(int argc, char **argv);   /* cli/cmd_perplexity.c */
int na_cmd_tokenize(int argc, char **argv);     /* cli/cmd_tokenize.c */

/* Parse a whole decimal integer / float from a flag value; on failure print
 * "nearattn <cmd>: <flag> expects ..." to stderr and return NA_ERR_INVALID. */
na_status_t na_cli_int(const char *cmd, const char *flag, const char *val,
                       long lo, long hi, long *out);
na_status_t na_cli_float(const char *cmd, const char *flag, const char *val,
                         double lo, double hi, double *out);
/* Options in a table instead of one branch each. A whole number: its flag,
 * its range and the int it goes to; a switch (no value): its flag, the int
 * it sets and the value it sets there. */
typedef struct {
    const char *flag;
    long        lo, hi;
    int        *v;
} na_cli_num_t;
typedef struct {
    const char *flag;
    int        *v;
    int         set;
} na_cli_switch_t;
/* If argv[*i] is the flag of one of t[0..n), parse its value argv[*i + 1]
 * (na_cli_int, errors as it says them) into its int and step *i past it: 1;
 * 0 when argv[*i] is none of them; 2 after a usage error (a bad or missing
 * value). */
int na_cli_num(const char *cmd, const na_cli_num_t *t, size_t n, int argc, char **argv, int *i);
/* If arg is the flag of one of t[0..n), set its int: 1; else 0. */
int na_cli_switch(const na_cli_switch_t *t, size_t n, const char *arg);
/* A string option in a table: its flag and the string it sets (argv's). */
typedef struct {
    const char  *flag;
    const char **v;
} na_cli_str_t;
/* As na_cli_num, for the strings of t[0..n): 1 taken, 0 none of them, 2
 * after "nearattn <cmd>: <flag> needs a value" on stderr. */
int na_cli_str(const char *cmd, const na_cli_str_t *t, size_t n, int argc, char **argv, int *i);
/* A comma-separated list of whole numbers in [lo, hi] ("1,2,4") into
 * v[0..cap): how many (0 for ""), or -1 when one is not such a number or
 * there are more than cap. */
int na_cli_ints(const char *s, long lo, long hi, int *v, int cap);
/* A list option in a table: its flag, the range of each number, and
 * v[0..cap) and *n that take the numbers and their count; zero: "0" stands
 * for none, else a list holds one at least. */
typedef struct {
    const char *flag;
    long        lo, hi;
    int        *v, cap, *n;
    int         zero;
} na_cli_list_opt_t;
/* As na_cli_num, for the lists of t[0..n): 1 taken, 0 none of them, 2
 * after "nearattn <cmd>: <flag> expects a list like 1,2,4 (each LO..HI, at
 * most CAP)" on stderr. */
int na_cli_list_opt(const char *cmd, const na_cli_list_opt_t *t, size_t n, int argc,
                    char **argv, int *i);
/* An API key from a file given by option flag: its first line without
 * surrounding blanks, at least 8 characters. The file must be a regular
 * file only its owner may read or write (a key others can read is no key);
 * a first line that does not fit in cap (NA_CLI_KEY_MAX) is refused, never
 * cut. Errors name flag and path. */
#define NA_CLI_KEY_MAX 4096
na_status_t na_cli_read_key(const char *path, const char *flag, char *key, size_t cap);
/* The signal that asked this command to stop (SIGINT, SIGTERM, or the one
 * more given to na_cli_catch_stop), 0 while none came; and catch them into
 * it (extra: another signal to catch, or 0). */
extern volatile sig_atomic_t na_cli_stop;
void na_cli_catch_stop(int extra);
/* A command's tokenizer for model m (opened from model_path): the
 * --tokenizer file given (NULL: none), else tok_path when a default or the
 * layout set it, else what na_tokenizer_open_for_model finds (the GGUF's
 * own, P.tok.bin or tokenizer.bin beside a checkpoint P.bin); the path
 * opened into tok_path[cap]. NA_ERR_FORMAT when its vocabulary is not the
 * model's (*tok is set all the same: the caller destroys it). */
struct na_model;
struct na_tokenizer;
na_status_t na_cli_open_tokenizer(const char *given, const struct na_model *m,
                                  const char *model_path, char *tok_path, size_t cap,
                                  struct na_tokenizer **tok);
/* --kv-dtype's value v: f16, bf16 or f32 into *dt; else "nearattn <cmd>:
 * --kv-dtype expects f16, bf16 or f32, got 'V'" on stderr and NA_ERR_INVALID. */
na_status_t na_cli_kv_dtype(const char *cmd, const char *v, int *dt);
/* v is one of names[0..n) (a name ending in ":N", like "cuda:N", stands
 * for every value that starts with what comes before the N): 0; else 2
 * after "nearattn <cmd>: unknown <what> 'V' (use A, B or C)" on stderr.
 * And the choices that run, perplexity, serve and batch take alike. */
int na_cli_one_of(const char *cmd, const char *what, const char *v, const char *const *names,
                  int n);
extern const char *const na_cli_modes[3];      /* offload, monolithic, kv-fetch */
extern const char *const na_cli_clusters[3];   /* start, connect, inproc */
extern const char *const na_cli_backends[4];   /* cpu, ref, cuda, cuda:N */
/* The options run and perplexity take alike to make their engine (serve
 * and batch: cli/gen_opts.h): --mode, --config, --cluster, --model,
 * --tokenizer, --backend (kept as given), --threads N (1..1024) and
 * --kv-dtype. na_cli_engine_flag: whether f is one of them;
 * na_cli_engine_opt: take f's value v (not NULL) into e: 0, or 2 after
 * "nearattn <cmd>: ..." on stderr for a bad value. */
typedef struct {
    const char *mode, *config, *cluster, *model, *tokenizer, *backend;
    long        threads;
    na_dtype_t  kv_dtype;
    int         kv_dtype_given;
} na_cli_engine_args_t;
int na_cli_engine_flag(const char *f);
int na_cli_engine_opt(const char *cmd, na_cli_engine_args_t *e, const char *f, const char *v);
/* Print "nearattn <cmd>: <na_errmsg()>" (or the status name) to stderr; return 1. */
int na_cli_fail(const char *cmd, na_status_t st);
/* A command's request (what: "request", "chunk") number id + 1 ended with
 * status st: count it in *failed and print "nearattn <cmd>: <what> <id+1>
 * failed (<status name>): <why>" to stderr (the engines' on_error). */
void na_cli_request_failed(const char *cmd, const char *what, int id, na_status_t st,
                           const char *why, int *failed);
/* Run the entry of table (ended by a NULL name) named argv[1], with argv
 * shifted by one; else say "PROG: unknown WHAT 'X' (try 'PROG --help')" and
 * return 2. And list a table's names (padded to width) and summaries. */
int  na_cli_dispatch(const na_cli_cmd_t *table, const char *prog, const char *what, int argc,
                     char **argv);
void na_cli_list(FILE *f, const na_cli_cmd_t *table, int width);
/* Take arg as cmd's one FILE operand into *file_p: 0, or 2 (said so) when
 * *file_p was given already, or when arg is an option cmd did not take
 * (unknown or missing its value: said so, then usage(stderr)). */
int  na_cli_one_file(const char *cmd, const char **file_p, const char *arg,
                     void (*usage)(FILE *f));
/* names[i] for 0 <= i < n, else "?"; and the index of s in names[0..n), or -1. */
const char *na_cli_name(const char *const *names, int n, int i);
int na_cli_lookup(const char *const *names, int n, const char *s);
/* The shared/ folder: $NA_SHARED_DIR, else ../shared relative to the
 * executable's repository, else ../shared relative to the cwd. Static buffer. */
const char *na_cli_shared_dir(void);
/* The source tree holding cluster-configs/: $NA_SOURCE_DIR, else "." when it has
 * cluster-configs/local.yaml, else above the executable (build/cli/nearattn). Static buffer. */
const char *na_cli_source_dir(void);
/* Write a fresh random cluster secret (64 hex digits) to path, mode 0600
 * (a run's private layout). NA_ERR_IO naming the path. */
na_status_t na_cli_write_secret(const char *path);

#endif /* NA_CLI_H */
