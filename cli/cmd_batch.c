/* cli/cmd_batch.c — `nearattn batch --input jobs.jsonl --output results.jsonl`:
 * an OpenAI batch file run as one continuously batched job on the
 * long-lived engine (serve/gen.h, set up as `nearattn serve` does), with a
 * progress report on stderr and resume: the files are serve/batch_io.h,
 * the job serve/batch_run.h, the report serve/batch_progress.h. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/gen_opts.h"
#include "common/config.h"
#include "serve/batch_io.h"
#include "serve/batch_progress.h"
#include "serve/batch_run.h"
#include "serve/chat.h"
#include "serve/gen.h"

/* The last SIGINT / SIGTERM and how many arrived (serve/batch_run.h). */
static volatile sig_atomic_t na_batch_sig, na_batch_nsig;

static void na_batch_on_signal(int sig)
{
    na_batch_sig = sig;
    na_batch_nsig++;
}

typedef struct {
    const char *input, *output, *chat_template;
    na_sg_opts_t go;                 /* --config --model ... as serve takes them */
    long        ctx, max_in_flight;
    double      interval_s;
    int         plain;               /* --progress plain */
    int         quiet;               /* --progress none */
} na_batch_args_t;

static void na_batch_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn batch --input FILE --output FILE [--config F] [--model F]\n"
        "                      [--tokenizer F] [--mode offload|monolithic|kv-fetch]\n"
        "                      [--cluster start|connect|inproc] [--chat-template NAME]\n"
        "                      [--threads N] [--batch N] [--ctx N] [--max-in-flight N]\n"
        "                      [--progress auto|plain|none] [--progress-interval S]\n\n"
        "Run an OpenAI batch file: each input line {\"custom_id\", \"method\": \"POST\",\n"
        "\"url\": \"/v1/completions\" | \"/v1/chat/completions\", \"body\"} becomes a\n"
        "request of one continuously batched job on the engine `nearattn serve` uses;\n"
        "each result is appended to the output as the line {\"id\", \"custom_id\",\n"
        "\"response\": {\"status_code\", \"request_id\", \"body\"}, \"error\"} when its request\n"
        "ends (so in the order they end, not the input's). A bad line (not JSON, a\n"
        "missing field, another url, a repeated custom_id) or a refused body becomes\n"
        "an error record; the job goes on. A body without \"seed\" is sampled with a\n"
        "seed made from its custom_id, so runs are reproducible.\n\n"
        "Resume: run the same command again. Lines whose record is in the output are\n"
        "skipped; the output is only appended to, a whole line at a time, and a last\n"
        "line cut by a crash is repaired (completed or cut off, and said so).\n"
        "Ctrl-C (SIGINT) stops admitting and lets the requests in flight finish (a\n"
        "second Ctrl-C cancels them); SIGTERM cancels them at once. Either way the\n"
        "exit status is 128 + the signal and the output is ready to resume.\n\n"
        "  --input F          the batch file (JSON Lines)\n"
        "  --output F         the results file (created, or resumed)\n"
        "  --config F         cluster layout (default cluster-configs/local.yaml)\n"
        "  --model F          model (default: the layout's)\n"
        "  --tokenizer F      tokenizer (default: as `nearattn run`)\n"
        "  --mode M           offload (default), monolithic or kv-fetch\n"
        "  --cluster C        start (default), connect or inproc, as `nearattn run`\n"
        "  --chat-template N  chat template family instead of the model's own\n"
        "                     (llama2, llama3, chatml, gemma, zephyr, phi3)\n"
        "  --threads N        compute threads (default: all cores)\n"
        "  --batch N          requests per batch (default: the layout's max_batch)\n"
        "  --no-prefix-reuse  every prompt is prefilled whole (default: the layout's\n"
        "                     kv.prefix_reuse, on; docs/prefix-reuse.md)\n"
        "  --no-adaptive-batches  always every batch in flight (default: the layout's\n"
        "                     parallel.adaptive_batches, on; docs/offload.md)\n"
        "  --ctx N            model context in tokens (default: the model file's)\n"
        "  --max-in-flight N  requests submitted at once (default: what the engine runs\n"
        "                     at once: max_batch x its batches in flight, 1 batch in\n"
        "                     monolithic mode)\n"
        "  --progress P       auto: a bar redrawn in place on a terminal, plain lines\n"
        "                     otherwise (default); plain; none\n"
        "  --progress-interval S  seconds between plain lines (default 5)\n\n"
        "Exit status: 0 when every line has its record (error records included), 1 on\n"
        "an error (the output stays resumable), 2 on a usage error, 130/143 when\n"
        "stopped by SIGINT/SIGTERM.\n");
}

/* Parse argv; 0 to go on, -1 after --help, 2 after a usage error. */
static int na_batch_parse(int argc, char **argv, na_batch_args_t *a)
{
    static const char *const sf[] = { "--input", "--output", "--chat-template", "--progress" };
    const char *progress = "auto";
    const char **sd[] = { &a->input, &a->output, &a->chat_template, &progress };
    int i, k, r;

    memset(a, 0, sizeof(*a));
    na_sg_opts_default(&a->go);
    a->interval_s = 5;
    for (i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            na_batch_usage(stdout);
            return -1;
        }
        r = na_cli_gen_opt("batch", &a->go, f, v);     /* what serve takes alike */
        if (r == -2)
            return 2;
        if (r > 0) {
            i += r - 1;
            continue;
        }
        for (k = 0; k < 4 && strcmp(f, sf[k]); k++)
            ;
        if (r == 0 && k == 4 && strcmp(f, "--ctx") && strcmp(f, "--max-in-flight") &&
            strcmp(f, "--progress-interval")) {
            fprintf(stderr, "nearattn batch: unknown option '%s' (try 'nearattn batch --help')\n",
                    f);
            return 2;
        }
        if (v == NULL) {
            fprintf(stderr, "nearattn batch: %s needs a value\n", f);
            return 2;
        }
        i++;
        if (k < 4)
            *sd[k] = v;
        else if (!strcmp(f, "--ctx") ? na_cli_int("batch", f, v, 1, 1 << 24, &a->ctx) :
                 !strcmp(f, "--max-in-flight") ?
                 na_cli_int("batch", f, v, 1, 65536, &a->max_in_flight) :
                 na_cli_float("batch", f, v, 0.1, 86400, &a->interval_s))
            return 2;
    }
    if (a->input == NULL || a->output == NULL) {
        fprintf(stderr, "nearattn batch: --input and --output are required (try 'nearattn "
                "batch --help')\n");
        return 2;
    }
    if (na_cli_gen_check("batch", &a->go) != 0)
        return 2;
    if (!strcmp(progress, "plain"))
        a->plain = 1;
    else if (!strcmp(progress, "none"))
        a->quiet = 1;
    else if (strcmp(progress, "auto")) {
        fprintf(stderr, "nearattn batch: --progress expects auto, plain or none\n");
        return 2;
    }
    return 0;
}

/* The results file is a regular file or does not exist yet: a FIFO, device or
 * directory is refused before anything opens it (opening a FIFO with no
 * reader would block for ever; appending to a device is no results file).
 * Returns 0, or 1 with the reason on stderr. */
static int na_batch_output_kind(const char *path)
{
    struct stat sb;

    if (stat(path, &sb) != 0 || S_ISREG(sb.st_mode))
        return 0;                          /* absent (created later) or a file */
    fprintf(stderr, "nearattn batch: --output %s is not a regular file (it is %s): give "
            "the path of a results file\n", path,
            S_ISFIFO(sb.st_mode) ? "a FIFO" : S_ISDIR(sb.st_mode) ? "a directory" :
            S_ISCHR(sb.st_mode) ? "a character device" : S_ISBLK(sb.st_mode) ?
            "a block device" : S_ISSOCK(sb.st_mode) ? "a socket" : "not a file");
    return 1;
}

/* Say how the results file was found. */
static void na_batch_say_output(const char *path, const na_batch_out_info_t *oi,
                                const na_batch_in_t *in, long before)
{
    if (oi->cut_bytes > 0)
        fprintf(stderr, "nearattn batch: %s ended with a partial line (%ld bytes, from an "
                "interrupted write): cut off; its request runs again\n", path, oi->cut_bytes);
    if (oi->repaired)
        fprintf(stderr, "nearattn batch: %s ended with a whole record without its newline: "
                "newline added\n", path);
    if (before > 0)
        fprintf(stderr, "nearattn batch: resuming: %ld of %ld requests have their record in "
                "%s already; %ld left\n", before, in->n, path, in->n - before);
    if (oi->records > before)
        fprintf(stderr, "nearattn batch: warning: %s holds %ld records of requests that are "
                "not in the input (another input's results?)\n", path, oi->records - before);
}

/* The front end's options from a. */
static void na_batch_gen_opts(const na_batch_args_t *a, const char *cfg, na_sg_opts_t *go)
{
    *go = a->go;
    go->config_path = cfg;
    go->ctx = (int)a->ctx;
    go->stop = &na_batch_sig;
}

int na_cmd_batch(int argc, char **argv)
{
    na_batch_args_t a;
    na_batch_in_t *in = NULL;
    na_batch_out_t *out = NULL;
    na_batch_out_info_t oi;
    na_batch_run_opts_t ro;
    na_batch_summary_t s;
    na_batch_progress_t bp;
    na_sg_opts_t go;
    na_sg_t *g = NULL;
    na_cfg_t *cfg = NULL;
    na_chat_t chat;
    char cfg_path[4096], chat_err[512];
    struct sigaction sa;
    na_status_t st;
    long before = 0, i;
    int rc;

    rc = na_batch_parse(argc, argv, &a);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    if (na_batch_output_kind(a.output) != 0)
        return 1;
    st = na_batch_in_load(a.input, &in);            /* cheap checks first */
    if (st == NA_OK)
        st = na_batch_out_open(a.output, &out, &oi);
    if (st != NA_OK)
        goto fail;
    for (i = 0; i < in->n; i++)
        before += na_batch_out_done(out, &in->lines[i]);
    na_batch_say_output(a.output, &oi, in, before);
    if (before == in->n) {
        fprintf(stderr, "nearattn batch: every one of the %ld requests has its record in %s: "
                "nothing to do\n", in->n, a.output);
        goto done;
    }
    if (a.go.config_path != NULL)
        snprintf(cfg_path, sizeof(cfg_path), "%s", a.go.config_path);
    else
        snprintf(cfg_path, sizeof(cfg_path), "%s/cluster-configs/local.yaml",
                 na_cli_source_dir());
    st = na_cfg_load(cfg_path, &cfg);
    if (st != NA_OK)
        goto fail;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = na_batch_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    na_batch_gen_opts(&a, cfg_path, &go);
    st = na_sg_create(&go, &g);
    if (st != NA_OK)
        goto fail;
    memset(&ro, 0, sizeof(ro));
    ro.gen = g;
    if (na_chat_for_model(na_sg_model(g), a.chat_template, &chat) == NA_OK) {
        ro.chat = &chat;
    } else {
        snprintf(chat_err, sizeof(chat_err), "%s", na_errmsg());
        ro.chat_err = chat_err;
        if (a.chat_template != NULL) {               /* asked for by name: a usage error */
            st = na_err(NA_ERR_NOT_FOUND, "%s", chat_err);
            goto fail;
        }
    }
    ro.max_in_flight = a.max_in_flight > 0 ? (int)a.max_in_flight : na_sg_capacity(g);
    ro.stop_sig = &na_batch_sig;
    ro.n_sigs = &na_batch_nsig;
    if (!a.quiet) {
        na_batch_progress_init(&bp, stderr, in->n, before, a.interval_s, a.plain);
        ro.progress = &bp;
    }
    st = na_batch_run(in, out, &ro, &s);
    if (ro.progress != NULL)
        na_batch_progress_end(&bp);
    fprintf(stderr, "nearattn batch: %ld requests: %ld written now (%ld ok, %ld error records), "
            "%ld before, %ld left; prompt tokens %ld, generated tokens %ld, %.1f tok/s, "
            "%.1f s (%s, %s)\n", s.total, s.ok + s.failed, s.ok, s.failed, s.before,
            s.not_started, s.prompt_tokens, s.completion_tokens,
            s.wall_s > 0 ? (double)s.completion_tokens / s.wall_s : 0.0, s.wall_s,
            go.mode, na_sg_how(g));
    if (st == NA_ERR_CANCELED && na_batch_sig != 0) {
        fprintf(stderr, "nearattn batch: interrupted by signal %d; %s holds %ld of %ld "
                "records; resume with the same command\n", (int)na_batch_sig, a.output,
                s.total - s.not_started, s.total);
        rc = 128 + (int)na_batch_sig;
        goto out;
    }
    if (st != NA_OK)
        goto fail;
done:
    rc = 0;
    goto out;
fail:
    rc = na_cli_fail("batch", st);
    if (out != NULL)
        fprintf(stderr, "nearattn batch: %s holds whole records only: resume with the same "
                "command\n", a.output);
    if (st == NA_ERR_CANCELED && na_batch_sig != 0)
        rc = 128 + (int)na_batch_sig;
out:
    na_sg_destroy(g);
    na_cfg_destroy(cfg);
    na_batch_out_close(out);
    na_batch_in_destroy(in);
    return rc;
}
