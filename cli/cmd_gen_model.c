/* cli/cmd_gen_model.c — `nearattn gen-model`: write a deterministic
 * random-weight model in llama2.c and/or GGUF format (common/genmodel.h). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/genmodel.h"
#include "common/model.h"

static void na_gen_model_usage(FILE *f, const na_genmodel_opts_t *d)
{
    fprintf(f,
        "usage: nearattn gen-model --out PREFIX [options]\n\n"
        "Write a LLaMA-shaped model with deterministic random weights and a matching\n"
        "BPE tokenizer: PREFIX.bin (llama2.c, f32) + PREFIX.tok.bin, and/or PREFIX.gguf\n"
        "(GGUF v3 in --dtype, tokenizer embedded). Same seed and shape give the same\n"
        "weights in both formats. The text such a model produces is meaningless.\n\n"
        "options:\n"
        "  --out PREFIX        output path prefix (required)\n"
        "  --dim N             model width (default %d)\n"
        "  --hidden N          FFN inner width (default %d)\n"
        "  --layers N          transformer blocks (default %d)\n"
        "  --heads N           query heads; must divide dim (default %d)\n"
        "  --kv-heads N        KV heads; must divide heads (default %d, or heads\n"
        "                      when --heads is given: multi-head attention)\n"
        "  --vocab N           vocabulary size, >= %d (default %d)\n"
        "  --seq-len N         maximum context (default %d)\n"
        "  --dtype T           GGUF weight type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0,\n"
        "                      q5_1, q4_k, q5_k, q6_k, or q4_k_m (llama-quantize's mix:\n"
        "                      q4_k with q6_k output, half of attn_v/ffn_down) (default %s)\n"
        "  --arch A            llama (default), llama3 (rope_freqs of Llama-3.x's\n"
        "                      scaling, theta 500000), qwen2 (q/k/v biases), qwen3\n"
        "                      (per-head q/k norms, key_length); all but llama write\n"
        "                      the GGUF file only, with theta 1e6 for qwen\n"
        "  --head-dim N        head width written as key_length (default dim/heads)\n"
        "  --rope-dims N       rotated elements per head (default head_dim: partial)\n"
        "  --rope-scaling T    linear or yarn (GGUF keys), --rope-factor X (default 4)\n"
        "  --seed S            random seed (default %llu)\n"
        "  --rope-theta X      RoPE base (default %g)\n"
        "  --rms-eps X         RMSNorm epsilon (default %g)\n"
        "  --untied            separate output classifier (default: tied to embeddings)\n"
        "  --format F          llama2c, gguf or both (default both)\n"
        "  --chat-template T   GGUF: store T as tokenizer.chat_template (Jinja text)\n"
        "  --vocab-from F      GGUF: copy the vocabulary of the GGUF file F (a model or\n"
        "                      a vocab-only file: every tokenizer.* key, e.g. a BPE\n"
        "                      vocabulary with its merges, pre-tokenizer, special ids\n"
        "                      and chat template) instead of generating one; --vocab\n"
        "                      becomes F's token count; GGUF only\n"
        "  --quiet             no progress lines\n"
        "  --help              this text\n\n"
        "example (the 15M-parameter shape of llama2.c's stories15M):\n"
        "  nearattn gen-model --out m15 --dim 288 --hidden 768 --layers 6 --heads 6 \\\n"
        "      --kv-heads 6 --vocab 32000 --seq-len 256\n",
        d->dim, d->hidden_dim, d->n_layers, d->n_heads, d->n_kv_heads,
        NA_GENMODEL_MIN_VOCAB, d->vocab_size, d->seq_len, na_dtype_name(d->dtype),
        (unsigned long long)d->seed, (double)d->rope_theta, (double)d->rms_eps);
}

int na_cmd_gen_model(int argc, char **argv)
{
    static const char *const cmd = "gen-model";
    na_genmodel_opts_t o, d;
    const char *out = NULL, *vocab_from = NULL;
    int i, quiet = 0, kv_given = 0, theta_given = 0, format_given = 0;
    na_status_t st;

    na_genmodel_defaults(&o);
    na_genmodel_defaults(&d);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        long v;
        double x;
        int *ip = NULL;
        long lo = 1, hi = 0;

        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            na_gen_model_usage(stdout, &d);
            return 0;
        }
        if (!strcmp(a, "--untied")) { o.shared_classifier = 0; continue; }
        if (!strcmp(a, "--quiet"))  { quiet = 1; continue; }
        if (!strcmp(a, "--dim"))           { ip = &o.dim;        hi = NA_MODEL_MAX_DIM; }
        else if (!strcmp(a, "--hidden"))   { ip = &o.hidden_dim; hi = NA_MODEL_MAX_HIDDEN; }
        else if (!strcmp(a, "--layers"))   { ip = &o.n_layers;   hi = NA_MODEL_MAX_LAYERS; }
        else if (!strcmp(a, "--heads"))    { ip = &o.n_heads;    hi = NA_MODEL_MAX_HEADS; }
        else if (!strcmp(a, "--kv-heads")) { ip = &o.n_kv_heads; hi = NA_MODEL_MAX_HEADS; }
        else if (!strcmp(a, "--vocab"))    { ip = &o.vocab_size; hi = NA_MODEL_MAX_VOCAB;
                                             lo = NA_GENMODEL_MIN_VOCAB; }
        else if (!strcmp(a, "--seq-len"))  { ip = &o.seq_len;    hi = NA_MODEL_MAX_SEQ; }
        else if (!strcmp(a, "--head-dim")) { ip = &o.head_dim;   hi = NA_MODEL_MAX_HEAD_DIM; }
        else if (!strcmp(a, "--rope-dims")) { ip = &o.rope_dims; hi = NA_MODEL_MAX_HEAD_DIM; }
        if (ip != NULL) {
            if (na_cli_int(cmd, a, val, lo, hi, &v) != NA_OK)
                return 2;
            *ip = (int)v;
            if (ip == &o.n_kv_heads)
                kv_given = 1;
            if (ip == &o.n_heads && !kv_given)
                o.n_kv_heads = (int)v;
            i++;
            continue;
        }
        if (val == NULL && (!strcmp(a, "--out") || !strcmp(a, "--dtype") ||
                            !strcmp(a, "--seed") || !strcmp(a, "--format") ||
                            !strcmp(a, "--rope-theta") || !strcmp(a, "--rms-eps") ||
                            !strcmp(a, "--chat-template") || !strcmp(a, "--arch") ||
                            !strcmp(a, "--rope-scaling") || !strcmp(a, "--rope-factor") ||
                            !strcmp(a, "--vocab-from"))) {
            fprintf(stderr, "nearattn %s: %s needs a value\n", cmd, a);
            return 2;
        }
        if (!strcmp(a, "--out")) {
            out = val;
        } else if (!strcmp(a, "--chat-template")) {
            o.chat_template = val;
        } else if (!strcmp(a, "--vocab-from")) {
            vocab_from = val;
        } else if (!strcmp(a, "--dtype")) {
            if (na_genmodel_parse_dtype(val, &o.dtype, &o.quant_mix) < 0) {
                fprintf(stderr, "nearattn %s: --dtype expects f32, f16, bf16, q8_0, q4_0, q4_1, "
                        "q5_0, q5_1, q4_k, q5_k, q6_k or q4_k_m, got '%s'\n", cmd, val);
                return 2;
            }
        } else if (!strcmp(a, "--arch")) {
            int ar = na_genmodel_arch_parse(val);
            float theta = o.rope_theta;
            int l2c = o.write_llama2c, gguf = o.write_gguf;
            if (ar < 0) {
                fprintf(stderr, "nearattn %s: --arch expects llama, llama3, qwen2 or qwen3, got "
                        "'%s'\n", cmd, val);
                return 2;
            }
            na_genmodel_set_arch(&o, (na_genmodel_arch_t)ar);
            if (theta_given)
                o.rope_theta = theta;
            if (format_given)
                o.write_llama2c = l2c, o.write_gguf = gguf;
        } else if (!strcmp(a, "--rope-scaling")) {
            if (strcmp(val, "linear") && strcmp(val, "yarn")) {
                fprintf(stderr, "nearattn %s: --rope-scaling expects linear or yarn, got '%s'\n",
                        cmd, val);
                return 2;
            }
            o.rope_scaling = val;
            if (!format_given)
                o.write_llama2c = 0;
        } else if (!strcmp(a, "--rope-factor")) {
            if (na_cli_float(cmd, a, val, 1e-3, 1e6, &x) != NA_OK)
                return 2;
            o.rope_scaling_factor = (float)x;
        } else if (!strcmp(a, "--seed")) {
            if (na_cli_int(cmd, a, val, 0, 0x7fffffffffffffffL, &v) != NA_OK)
                return 2;
            o.seed = (uint64_t)v;
        } else if (!strcmp(a, "--rope-theta")) {
            if (na_cli_float(cmd, a, val, 1.0, 1e9, &x) != NA_OK)
                return 2;
            o.rope_theta = (float)x;
            theta_given = 1;
        } else if (!strcmp(a, "--rms-eps")) {
            if (na_cli_float(cmd, a, val, 1e-12, 0.1, &x) != NA_OK)
                return 2;
            o.rms_eps = (float)x;
        } else if (!strcmp(a, "--format")) {
            o.write_llama2c = !strcmp(val, "llama2c") || !strcmp(val, "both");
            o.write_gguf = !strcmp(val, "gguf") || !strcmp(val, "both");
            format_given = 1;
            if (!o.write_llama2c && !o.write_gguf) {
                fprintf(stderr, "nearattn %s: --format expects llama2c, gguf or both, got '%s'\n",
                        cmd, val);
                return 2;
            }
        } else {
            fprintf(stderr, "nearattn %s: unknown option '%s' (try --help)\n", cmd, a);
            return 2;
        }
        i++;
    }
    if (out == NULL || out[0] == '\0') {
        fprintf(stderr, "nearattn %s: --out PREFIX is required (try --help)\n", cmd);
        return 2;
    }
    if (vocab_from != NULL) {
        if (format_given && o.write_llama2c) {
            fprintf(stderr, "nearattn %s: --vocab-from writes the GGUF file only (--format "
                    "gguf)\n", cmd);
            return 2;
        }
        if (na_genmodel_vocab_from(vocab_from, &o) != NA_OK) {
            fprintf(stderr, "nearattn %s: %s\n", cmd, na_errmsg());
            return 2;
        }
    }
    if (!format_given && (o.head_dim > 0 || o.rope_dims > 0))
        o.write_llama2c = 0;        /* only GGUF can say these */
    if (o.rope_scaling != NULL && o.rope_scaling_factor == 0.0f)
        o.rope_scaling_factor = 4.0f;
    if (na_genmodel_check(&o) != NA_OK) {
        fprintf(stderr, "nearattn %s\n", na_errmsg());   /* "gen-model: ..." */
        return 2;
    }
    o.progress = !quiet;
    st = na_genmodel_write(out, &o);
    if (st != NA_OK)
        return na_cli_fail(cmd, st);
    if (!quiet) {
        if (o.write_llama2c)
            printf("wrote %s.bin (f32) and %s.tok.bin\n", out, out);
        if (o.write_gguf)
            printf("wrote %s.gguf (%s, arch %s)\n", out,
                   o.quant_mix == NA_GENMODEL_MIX_Q4_K_M ? "q4_k_m" : na_dtype_name(o.dtype),
                   na_genmodel_arch_name(o.arch));
    }
    return 0;
}
