/* cli/cmd_serve.c — `nearattn serve`: the OpenAI-compatible HTTP server
 * (serve/http.h) over the long-lived generation front end (serve/gen.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/gen_opts.h"
#include "common/log.h"
#include "serve/gen.h"
#include "serve/http.h"

static void na_serve_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn serve [--config F] [--model F] [--tokenizer F]\n"
        "                      [--mode offload|monolithic|kv-fetch] [--cluster start|connect|inproc]\n"
        "                      [--host 127.0.0.1] [--port 8080] [--api-key-file F] [--max-queue N]\n"
        "                      [--max-body BYTES] [--timeout S] [--idle-timeout S]\n"
        "                      [--request-timeout S] [--max-conns-per-ip N]\n"
        "                      [--chat-template NAME] [--threads N] [--batch N] [--ctx N]\n"
        "                      [--batches-in-flight N] [--no-adaptive-batches]\n"
        "                      [--backend cpu|ref]\n\n"
        "Serve the model over an OpenAI-compatible HTTP API (docs/serve.md):\n"
        "POST /v1/completions, POST /v1/chat/completions (stream: true gives\n"
        "server-sent events), GET /v1/models, GET /health, GET /metrics (Prometheus).\n"
        "Every request joins the running continuous batch. Prints \"READY\n"
        "http://HOST:PORT\" on stderr once it listens; SIGINT/SIGTERM stop it.\n\n"
        "  --config F        cluster layout (default cluster-configs/local.yaml); its\n"
        "                    model/tokenizer are used unless --model is given\n"
        "  --model F         llama2.c checkpoint or GGUF file\n"
        "  --tokenizer F     tokenizer.bin or GGUF (default: as `nearattn run`)\n"
        "  --mode M          offload (default): attention on the storage nodes;\n"
        "                    kv-fetch: the KV fetched from them every step;\n"
        "                    monolithic: one process (the layout's slots in-process)\n"
        "  --cluster C       start (default): the layout's storage nodes started here,\n"
        "                    private to this server; connect: a running cluster;\n"
        "                    inproc: the slots inside this process\n"
        "  --host H          address to listen on (default 127.0.0.1; another address\n"
        "                    without --api-key-file gives a warning)\n"
        "  --port P          TCP port (default 8080; 0: any free port)\n"
        "  --api-key-file F  a file whose first line is the key clients must send as\n"
        "                    \"Authorization: Bearer KEY\" (every route but /health);\n"
        "                    readable by its owner only (chmod 600), 8 to 4095 bytes\n"
        "  --max-queue N     requests held at once, running or waiting (default 64);\n"
        "                    the next one gets 429 with Retry-After\n"
        "  --max-body B      request body limit in bytes (default 1048576): 413 past it\n"
        "  --timeout S       per-request limit in seconds (default 600): cancelled after\n"
        "  --idle-timeout S  a connection that makes no progress is closed (default 60)\n"
        "  --request-timeout S  a connection must send each complete request (header\n"
        "                    and body) within S seconds of opening or of its previous\n"
        "                    response, or is closed (default 30; slow clients)\n"
        "  --max-conns-per-ip N  connections from one client address (default:\n"
        "                    max-queue + 8); 16 connections are always kept free\n"
        "  --chat-template T llama2, llama3, chatml, gemma, zephyr or phi3 (default: the\n"
        "                    GGUF's tokenizer.chat_template; none: chat requests get 400)\n"
        "  --threads N       compute threads (default: all cores)\n"
        "  --batch N         requests per batch (default: the layout's parallel.max_batch)\n"
        "  --batches-in-flight N  batches the engine keeps going at once (default: 1 in\n"
        "                    monolithic mode, else the layout's parallel.batches_in_flight;\n"
        "                    with parallel.adaptive_batches the most, used where faster)\n"
        "  --no-adaptive-batches  always every batch in flight (default: the layout's\n"
        "                    parallel.adaptive_batches, on; docs/offload.md)\n"
        "  --no-prefix-reuse every prompt is prefilled whole (default: the layout's\n"
        "                    kv.prefix_reuse, on; docs/prefix-reuse.md)\n"
        "  --ctx N           model context in tokens (default: the model file's)\n"
        "  --backend B       kernels: cpu (default) or ref\n");
}

/* Parse argv; 0 to go on, -1 after --help, 2 after a usage error. */
static int na_serve_parse(int argc, char **argv, na_sg_opts_t *go, na_srv_opts_t *so,
                          const char **key_file)
{
    int i;

    for (i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        int r;

        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            na_serve_usage(stdout);
            return -1;
        }
        r = na_cli_gen_opt("serve", go, f, v);     /* what batch takes alike */
        if (r == -2)
            return 2;
        if (r > 0) {
            i += r - 1;
            continue;
        }
        if (v == NULL || f[0] != '-') {
            fprintf(stderr, "nearattn serve: %s '%s' (try 'nearattn serve --help')\n",
                    f[0] == '-' ? "missing the value of" : "unexpected argument", f);
            return 2;
        }
        i++;
        if (!strcmp(f, "--host")) so->host = v;
        else if (!strcmp(f, "--api-key-file")) *key_file = v;
        else if (!strcmp(f, "--chat-template")) so->chat_template = v;
        else {
            static const struct { const char *flag; long lo, hi; } nums[] = {
                { "--port", 0, 65535 }, { "--max-queue", 1, 100000 },
                { "--max-body", 64, 1L << 30 }, { "--timeout", 1, 86400 },
                { "--idle-timeout", 1, 86400 }, { "--ctx", 1, 1L << 20 },
                { "--request-timeout", 1, 86400 }, { "--max-conns-per-ip", 1, 100000 },
                { "--batches-in-flight", 1, 8 },
            };
            size_t k;
            for (k = 0; k < sizeof(nums) / sizeof(nums[0]); k++)
                if (!strcmp(f, nums[k].flag))
                    break;
            if (k == sizeof(nums) / sizeof(nums[0])) {
                fprintf(stderr, "nearattn serve: unknown option '%s' (try 'nearattn serve "
                        "--help')\n", f);
                return 2;
            }
            if (na_cli_int("serve", f, v, nums[k].lo, nums[k].hi, &n) != NA_OK)
                return 2;
            switch (k) {
            case 0: so->port = (int)n; break;
            case 1: so->max_queue = (int)n; break;
            case 2: so->max_body = (size_t)n; break;
            case 3: so->timeout_s = (int)n; break;
            case 4: so->idle_s = (int)n; break;
            case 5: go->ctx = (int)n; break;
            case 6: so->request_s = (int)n; break;
            case 7: so->max_per_ip = (int)n; break;
            default: go->batches_in_flight = (int)n; break;
            }
        }
    }
    return na_cli_gen_check("serve", go);
}

int na_cmd_serve(int argc, char **argv)
{
    na_sg_opts_t go;
    na_srv_opts_t so;
    const char *key_file = NULL;
    char cfg[4096], key[NA_CLI_KEY_MAX];
    na_sg_t *g = NULL;
    na_srv_t *s = NULL;
    na_status_t st;
    int rc;

    na_sg_opts_default(&go);
    na_srv_opts_default(&so);
    rc = na_serve_parse(argc, argv, &go, &so, &key_file);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    if (key_file != NULL) {
        st = na_cli_read_key(key_file, "--api-key-file", key, sizeof(key));
        if (st != NA_OK)
            return na_cli_fail("serve", st);
        so.api_key = key;
    }
    if (go.config_path == NULL) {
        snprintf(cfg, sizeof(cfg), "%s/cluster-configs/local.yaml", na_cli_source_dir());
        go.config_path = cfg;
    }
    na_cli_catch_stop(0);
    signal(SIGPIPE, SIG_IGN);
    go.stop = &na_cli_stop;
    st = na_sg_create(&go, &g);
    if (st == NA_OK)
        st = na_srv_create(g, &so, &s);
    if (st == NA_OK) {
        fprintf(stderr, "READY http://%s:%d (model %s, mode %s, %s)\n", so.host,
                na_srv_port(s), na_sg_model_name(g), go.mode, na_sg_how(g));
        st = na_srv_run(s, &na_cli_stop);
    }
    na_srv_destroy(s);
    na_sg_destroy(g);
    if (st != NA_OK)
        return na_cli_fail("serve", st);
    if (na_cli_stop)
        fprintf(stderr, "nearattn serve: stopped by signal %d\n", (int)na_cli_stop);
    return 0;
}
