/* common/genmodel.c — write deterministic random-weight models (genmodel.h).
 *
 * Element i of tensor (kind, layer) is a counter-based normal draw from
 * (seed, kind, layer, i), so each writer streams its tensors in its own order,
 * a chunk of rows at a time, and both files hold the same values. */
#include "genmodel.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "genvocab.h"
#include "gguf.h"
#include "model.h"
#include "quantize.h"

#define NA_GM_CHUNK (1u << 20)       /* floats generated per step */
#define NA_GM_PIECE_MAX 48           /* bytes of a piece: <= 16 chars (genvocab.c), ' ' -> 3-byte U+2581 */

typedef enum {
    NA_GM_TOK, NA_GM_ATTN_NORM, NA_GM_WQ, NA_GM_WK, NA_GM_WV, NA_GM_WO, NA_GM_FFN_NORM,
    NA_GM_W1, NA_GM_W2, NA_GM_W3, NA_GM_OUT_NORM, NA_GM_WCLS,
    /* the architectures' optional tensors (after the others: their draws stay) */
    NA_GM_BQ, NA_GM_BK, NA_GM_BV, NA_GM_QNORM, NA_GM_KNORM, NA_GM_ROPE_FREQS,
    NA_GM_KINDS
} na_gm_kind_t;

static const char *const na_gm_arch_names[NA_GENMODEL_ARCH_COUNT] = {
    "llama", "llama3", "qwen2", "qwen3",
};

int na_genmodel_arch_parse(const char *name)
{
    int i;
    for (i = 0; i < NA_GENMODEL_ARCH_COUNT; i++)
        if (!strcmp(name, na_gm_arch_names[i]))
            return i;
    return -1;
}

const char *na_genmodel_arch_name(na_genmodel_arch_t arch)
{
    return (int)arch >= 0 && arch < NA_GENMODEL_ARCH_COUNT ? na_gm_arch_names[arch] : "?";
}

void na_genmodel_set_arch(na_genmodel_opts_t *o, na_genmodel_arch_t arch)
{
    o->arch = arch;
    o->rope_theta = arch == NA_GENMODEL_LLAMA3 ? 500000.0f
                  : arch == NA_GENMODEL_LLAMA ? 10000.0f : 1000000.0f;
    if (arch != NA_GENMODEL_LLAMA) {
        o->write_llama2c = 0;
        o->write_gguf = 1;
    }
}

/* head_dim of o. */
static int na_gm_hd(const na_genmodel_opts_t *o)
{
    return o->head_dim > 0 ? o->head_dim : o->dim / o->n_heads;
}

/* Whether tensor kind k is written for o's architecture. */
static int na_gm_has(const na_genmodel_opts_t *o, na_gm_kind_t k)
{
    switch (k) {
    case NA_GM_BQ: case NA_GM_BK: case NA_GM_BV: return o->arch == NA_GENMODEL_QWEN2;
    case NA_GM_QNORM: case NA_GM_KNORM:           return o->arch == NA_GENMODEL_QWEN3;
    case NA_GM_ROPE_FREQS:                        return o->arch == NA_GENMODEL_LLAMA3;
    case NA_GM_WCLS:                              return !o->shared_classifier;
    default:                                      return 1;
    }
}

/* Vectors stored as f32 whatever the dtype. */
static int na_gm_is_vector(na_gm_kind_t k)
{
    return k == NA_GM_ATTN_NORM || k == NA_GM_FFN_NORM || k == NA_GM_OUT_NORM || k == NA_GM_BQ ||
           k == NA_GM_BK || k == NA_GM_BV || k == NA_GM_QNORM || k == NA_GM_KNORM ||
           k == NA_GM_ROPE_FREQS;
}

/* Progress over all bytes of one file. */
typedef struct {
    const char *file;
    uint64_t    total, done;
    int         last_pct;
    int         on;
} na_gm_progress_t;

void na_genmodel_defaults(na_genmodel_opts_t *o)
{
    static const na_genmodel_opts_t defaults = {
        .dim = 64, .hidden_dim = 172, .n_layers = 2, .n_heads = 8, .n_kv_heads = 4,
        .vocab_size = 512, .seq_len = 256, .dtype = NA_DTYPE_F32, .seed = 1,
        .rope_theta = 10000.0f, .rms_eps = 1e-5f,
        .shared_classifier = 1, .write_llama2c = 1, .write_gguf = 1,
    };
    *o = defaults;
}

void na_genmodel_shape(na_genmodel_opts_t *o, int dim, int hidden_dim, int n_layers, int n_heads,
                       int n_kv_heads, int vocab_size, int seq_len)
{
    na_genmodel_defaults(o);
    o->dim = dim, o->hidden_dim = hidden_dim, o->n_layers = n_layers;
    o->n_heads = n_heads, o->n_kv_heads = n_kv_heads;
    o->vocab_size = vocab_size, o->seq_len = seq_len, o->write_gguf = 0;
}

static na_status_t na_gm_bound(const char *field, int v, int lo, int hi)
{
    if (v < lo || v > hi)
        return na_err(NA_ERR_INVALID, "gen-model: %s = %d out of range [%d, %d]", field, v, lo,
                      hi);
    return NA_OK;
}

na_status_t na_genmodel_check(const na_genmodel_opts_t *o)
{
    na_status_t st;
    int hd;

    if ((st = na_gm_bound("dim", o->dim, 2, NA_MODEL_MAX_DIM)) != NA_OK ||
        (st = na_gm_bound("hidden", o->hidden_dim, 1, NA_MODEL_MAX_HIDDEN)) != NA_OK ||
        (st = na_gm_bound("layers", o->n_layers, 1, NA_MODEL_MAX_LAYERS)) != NA_OK ||
        (st = na_gm_bound("heads", o->n_heads, 1, NA_MODEL_MAX_HEADS)) != NA_OK ||
        (st = na_gm_bound("kv-heads", o->n_kv_heads, 1, o->n_heads)) != NA_OK ||
        (st = na_gm_bound("vocab", o->vocab_size, NA_GENMODEL_MIN_VOCAB,
                          NA_MODEL_MAX_VOCAB)) != NA_OK ||
        (st = na_gm_bound("seq-len", o->seq_len, 1, NA_MODEL_MAX_SEQ)) != NA_OK)
        return st;
    if ((int)o->arch < 0 || o->arch >= NA_GENMODEL_ARCH_COUNT)
        return na_err(NA_ERR_INVALID, "gen-model: invalid arch %d", (int)o->arch);
    if (o->head_dim <= 0 && o->dim % o->n_heads != 0)
        return na_err(NA_ERR_INVALID, "gen-model: heads = %d does not divide dim = %d",
                      o->n_heads, o->dim);
    if (o->n_heads % o->n_kv_heads != 0)
        return na_err(NA_ERR_INVALID, "gen-model: kv-heads = %d does not divide heads = %d",
                      o->n_kv_heads, o->n_heads);
    hd = na_gm_hd(o);
    if (o->rope_dims < 0 || o->rope_dims % 2 != 0 || o->rope_dims > hd)
        return na_err(NA_ERR_INVALID, "gen-model: rope-dims = %d must be even and <= head_dim "
                      "%d", o->rope_dims, hd);
    if (o->rope_scaling != NULL && ((strcmp(o->rope_scaling, "linear") &&
                                     strcmp(o->rope_scaling, "yarn")) ||
                                    !(o->rope_scaling_factor > 0.0f)))
        return na_err(NA_ERR_INVALID, "gen-model: rope scaling '%s' factor %g: expected linear "
                      "or yarn with a factor > 0", o->rope_scaling, (double)o->rope_scaling_factor);
    if (o->write_llama2c && (o->arch != NA_GENMODEL_LLAMA || hd != o->dim / o->n_heads ||
                             (o->rope_dims != 0 && o->rope_dims != hd) ||
                             o->rope_scaling != NULL))
        return na_err(NA_ERR_INVALID, "gen-model: arch %s with these head/RoPE options has no "
                      "llama2.c form (use --format gguf)", na_genmodel_arch_name(o->arch));
    if (hd % 2 != 0 || hd > NA_MODEL_MAX_HEAD_DIM)
        return na_err(NA_ERR_INVALID, "gen-model: head_dim = dim / heads = %d must be even and "
                      "<= %d", hd, NA_MODEL_MAX_HEAD_DIM);
    if ((int)o->dtype < 0 || o->dtype >= NA_DTYPE_COUNT)
        return na_err(NA_ERR_INVALID, "gen-model: invalid dtype %d", (int)o->dtype);
    if (na_dtype_block(o->dtype) == 32 && (o->dim % 32 != 0 || o->hidden_dim % 32 != 0))
        return na_err(NA_ERR_INVALID, "gen-model: %s needs dim (%d) and hidden (%d) to be "
                      "multiples of 32", na_dtype_name(o->dtype), o->dim, o->hidden_dim);
    if (o->quant_mix != NA_GENMODEL_MIX_NONE &&
        !(o->quant_mix == NA_GENMODEL_MIX_Q4_K_M && o->dtype == NA_DTYPE_Q4_K))
        return na_err(NA_ERR_INVALID, "gen-model: quant mix %d needs dtype q4_k", o->quant_mix);
    if (!(o->rope_theta > 0.0f) || !(o->rms_eps > 0.0f && o->rms_eps < 1.0f))
        return na_err(NA_ERR_INVALID, "gen-model: rope theta must be > 0 and eps in (0, 1)");
    if (!o->write_llama2c && !o->write_gguf)
        return na_err(NA_ERR_INVALID, "gen-model: no output format selected");
    return NA_OK;
}

int na_genmodel_parse_dtype(const char *s, na_dtype_t *dtype, int *mix)
{
    int t = na_dtype_parse(s);
    *mix = NA_GENMODEL_MIX_NONE;
    if (t < 0 && strcasecmp(s, "q4_k_m") == 0) {
        t = NA_DTYPE_Q4_K;
        *mix = NA_GENMODEL_MIX_Q4_K_M;
    }
    if (t < 0)
        return -1;
    *dtype = (na_dtype_t)t;
    return t;
}

/* ---- values ------------------------------------------------------------- */

static uint64_t na_gm_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Elements [first, first+n) of tensor (kind, layer) into out. */
static void na_gm_values(const na_genmodel_opts_t *o, na_gm_kind_t kind, int layer,
                         uint64_t first, size_t n, float *out)
{
    uint64_t key = na_gm_mix(o->seed * 0x9E3779B97F4A7C15ull + (uint64_t)kind * 1000003u +
                             (uint64_t)layer * 7919u + 1);
    float std;
    size_t i;

    switch (kind) {
    case NA_GM_TOK: case NA_GM_WCLS:
        std = 1.0f / sqrtf((float)o->dim); break;
    case NA_GM_ATTN_NORM: case NA_GM_FFN_NORM: case NA_GM_OUT_NORM:
        std = 0.05f; break;
    case NA_GM_WO:
        std = 1.0f / sqrtf((float)o->dim); break;
    case NA_GM_W2:
        std = 1.0f / sqrtf((float)o->hidden_dim); break;
    case NA_GM_BQ: case NA_GM_BK: case NA_GM_BV:
        std = 0.2f; break;
    case NA_GM_QNORM: case NA_GM_KNORM:
        std = 0.2f; break;
    default:
        std = 1.0f / sqrtf((float)o->dim); break;
    }
    for (i = 0; i < n; i++) {
        uint64_t r = na_gm_mix(key ^ ((first + i) * 0xD6E8FEB86659FD93ull));
        /* Box-Muller from two 24-bit uniforms in (0, 1] */
        float u1 = ((float)((r >> 40) & 0xffffff) + 1.0f) / 16777216.0f;
        float u2 = (float)((r >> 8) & 0xffffff) / 16777216.0f;
        float z = sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
        out[i] = (kind == NA_GM_ATTN_NORM || kind == NA_GM_FFN_NORM || kind == NA_GM_OUT_NORM ||
                  kind == NA_GM_QNORM || kind == NA_GM_KNORM) ? 1.0f + std * z : std * z;
    }
}

/* rope_freqs as convert_hf_to_gguf.py writes it for Llama-3.x's rope scaling
 * "llama3" (factor 32, low/high frequency factors 1/4, original context
 * 8192): per-pair divisors of the frequency. */
static void na_gm_llama3_factors(const na_genmodel_opts_t *o, float *out, int n)
{
    const double factor = 32.0, low = 1.0, high = 4.0, old_ctx = 8192.0;
    const double low_wl = old_ctx / low, high_wl = old_ctx / high;
    int dims = o->rope_dims > 0 ? o->rope_dims : na_gm_hd(o), i;

    for (i = 0; i < n; i++) {
        double freq = 1.0 / pow((double)o->rope_theta, (double)(2 * i) / dims);
        double wl = 2.0 * M_PI / freq;
        if (wl < high_wl) {
            out[i] = 1.0f;
        } else if (wl > low_wl) {
            out[i] = (float)factor;
        } else {
            double smooth = (old_ctx / wl - low) / (high - low);
            out[i] = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
        }
    }
}

/* Shape (rows, cols) of a tensor kind for one layer. */
static void na_gm_shape(const na_genmodel_opts_t *o, na_gm_kind_t kind, int *rows, int *cols)
{
    int hd = na_gm_hd(o), q = o->n_heads * hd, kv = o->n_kv_heads * hd;
    *rows = 1;
    *cols = o->dim;
    switch (kind) {
    case NA_GM_BQ:  *cols = q; break;
    case NA_GM_BK: case NA_GM_BV: *cols = kv; break;
    case NA_GM_QNORM: case NA_GM_KNORM: *cols = hd; break;
    case NA_GM_ROPE_FREQS: *cols = (o->rope_dims > 0 ? o->rope_dims : hd) / 2; break;
    case NA_GM_TOK: case NA_GM_WCLS: *rows = o->vocab_size; break;
    case NA_GM_WQ:  *rows = q; break;
    case NA_GM_WK: case NA_GM_WV: *rows = kv; break;
    case NA_GM_WO:  *rows = o->dim; *cols = q; break;
    case NA_GM_W1: case NA_GM_W3: *rows = o->hidden_dim; break;
    case NA_GM_W2:  *rows = o->dim; *cols = o->hidden_dim; break;
    default: break;
    }
}

static void na_gm_progress(na_gm_progress_t *p, uint64_t bytes)
{
    int pct;
    p->done += bytes;
    if (!p->on || p->total < ((uint64_t)64 << 20))
        return;                           /* quiet for small files */
    pct = (int)(p->done * 100 / p->total);
    if (pct / 10 != p->last_pct / 10 || pct == 100) {
        if (pct != p->last_pct)
            fprintf(stderr, "gen-model: %s: %3d%% (%.1f / %.1f MiB)\n", p->file, pct,
                    (double)p->done / 1048576.0, (double)p->total / 1048576.0);
        p->last_pct = pct;
    }
}

/* ---- llama2.c ----------------------------------------------------------- */

static na_status_t na_gm_fwrite(FILE *f, const char *path, const void *p, size_t n)
{
    if (fwrite(p, 1, n, f) != n)
        return na_err(NA_ERR_IO, "%s: write: %s", path, strerror(errno));
    return NA_OK;
}

/* Stream one tensor (kind, layer) as f32. */
static na_status_t na_gm_l2c_tensor(FILE *f, const char *path, const na_genmodel_opts_t *o,
                                    na_gm_kind_t kind, int layer, float *buf,
                                    na_gm_progress_t *p)
{
    int rows, cols;
    uint64_t n, i;
    na_status_t st;

    na_gm_shape(o, kind, &rows, &cols);
    n = (uint64_t)rows * (uint64_t)cols;
    for (i = 0; i < n; i += NA_GM_CHUNK) {
        size_t k = (size_t)(n - i < NA_GM_CHUNK ? n - i : NA_GM_CHUNK);
        na_gm_values(o, kind, layer, i, k, buf);
        if ((st = na_gm_fwrite(f, path, buf, k * 4)) != NA_OK)
            return st;
        na_gm_progress(p, k * 4);
    }
    return NA_OK;
}

/* Bytes of the llama2.c file (for progress). */
static uint64_t na_gm_l2c_size(const na_genmodel_opts_t *o)
{
    uint64_t d = (uint64_t)o->dim, h = (uint64_t)o->hidden_dim, hd = d / (uint64_t)o->n_heads;
    uint64_t kv = (uint64_t)o->n_kv_heads * hd;
    uint64_t n = (uint64_t)o->vocab_size * d * (o->shared_classifier ? 1 : 2) + d +
                 (uint64_t)o->n_layers * (2 * d + 2 * d * d + 2 * d * kv + 3 * d * h) +
                 (uint64_t)o->seq_len * hd;
    return 28 + 4 * n;
}

static na_status_t na_gm_write_llama2c(const char *path, const na_genmodel_opts_t *o, float *buf)
{
    static const na_gm_kind_t stacked[] = {
        NA_GM_ATTN_NORM, NA_GM_WQ, NA_GM_WK, NA_GM_WV, NA_GM_WO, NA_GM_FFN_NORM,
        NA_GM_W1, NA_GM_W2, NA_GM_W3,
    };
    int32_t hdr[7] = { o->dim, o->hidden_dim, o->n_layers, o->n_heads, o->n_kv_heads,
                       o->shared_classifier ? o->vocab_size : -o->vocab_size, o->seq_len };
    int hd = o->dim / o->n_heads, pos, i, l, part;
    na_gm_progress_t p = { path, 0, 0, -1, o->progress };
    na_status_t st = NA_OK;
    size_t s;
    FILE *f;

    p.total = (uint64_t)na_gm_l2c_size(o);
    f = fopen(path, "wb");
    if (f == NULL)
        return na_err(NA_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    if ((st = na_gm_fwrite(f, path, hdr, sizeof(hdr))) != NA_OK ||
        (st = na_gm_l2c_tensor(f, path, o, NA_GM_TOK, 0, buf, &p)) != NA_OK)
        goto err_close;
    for (s = 0; s < sizeof(stacked) / sizeof(stacked[0]); s++)
        for (l = 0; l < o->n_layers; l++)
            if ((st = na_gm_l2c_tensor(f, path, o, stacked[s], l, buf, &p)) != NA_OK)
                goto err_close;
    if ((st = na_gm_l2c_tensor(f, path, o, NA_GM_OUT_NORM, 0, buf, &p)) != NA_OK)
        goto err_close;
    /* freq_cis_real then freq_cis_imag: (seq_len, head_dim/2) */
    for (part = 0; part < 2; part++)
        for (pos = 0; pos < o->seq_len; pos++) {
            for (i = 0; i < hd / 2; i++) {
                double freq = pow((double)o->rope_theta, -2.0 * i / hd);
                buf[i] = (float)(part == 0 ? cos(pos * freq) : sin(pos * freq));
            }
            if ((st = na_gm_fwrite(f, path, buf, (size_t)hd / 2 * 4)) != NA_OK)
                goto err_close;
            na_gm_progress(&p, (uint64_t)hd / 2 * 4);
        }
    if (!o->shared_classifier &&
        (st = na_gm_l2c_tensor(f, path, o, NA_GM_WCLS, 0, buf, &p)) != NA_OK)
        goto err_close;
    if (fclose(f) != 0) {
        st = na_err(NA_ERR_IO, "%s: close: %s", path, strerror(errno));
        unlink(path);
        return st;
    }
    return NA_OK;

err_close:
    fclose(f);
    unlink(path);
    return st;
}

/* llama2.c tokenizer.bin: max_token_length, then (score, length, bytes). */
static na_status_t na_gm_write_tokbin(const char *path, const na_genvocab_t *v)
{
    int32_t max_len = 1, len;
    na_status_t st = NA_OK;
    FILE *f;
    int i;

    for (i = 0; i < v->n; i++)
        if ((int32_t)strlen(v->pieces[i]) > max_len)
            max_len = (int32_t)strlen(v->pieces[i]);
    f = fopen(path, "wb");
    if (f == NULL)
        return na_err(NA_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    st = na_gm_fwrite(f, path, &max_len, 4);
    for (i = 0; st == NA_OK && i < v->n; i++) {
        len = (int32_t)strlen(v->pieces[i]);
        if ((st = na_gm_fwrite(f, path, &v->scores[i], 4)) == NA_OK &&
            (st = na_gm_fwrite(f, path, &len, 4)) == NA_OK)
            st = na_gm_fwrite(f, path, v->pieces[i], (size_t)len);
    }
    if (fclose(f) != 0 && st == NA_OK)
        st = na_err(NA_ERR_IO, "%s: close: %s", path, strerror(errno));
    if (st != NA_OK)
        unlink(path);
    return st;
}

/* ---- GGUF --------------------------------------------------------------- */

static uint32_t na_gm_ggml_type(na_dtype_t t)
{
    switch (t) {
    case NA_DTYPE_F16:  return NA_GGML_TYPE_F16;
    case NA_DTYPE_BF16: return NA_GGML_TYPE_BF16;
    case NA_DTYPE_Q8_0: return NA_GGML_TYPE_Q8_0;
    case NA_DTYPE_Q4_0: return NA_GGML_TYPE_Q4_0;
    case NA_DTYPE_Q4_1: return NA_GGML_TYPE_Q4_1;
    case NA_DTYPE_Q5_0: return NA_GGML_TYPE_Q5_0;
    case NA_DTYPE_Q5_1: return NA_GGML_TYPE_Q5_1;
    case NA_DTYPE_Q4_K: return NA_GGML_TYPE_Q4_K;
    case NA_DTYPE_Q5_K: return NA_GGML_TYPE_Q5_K;
    case NA_DTYPE_Q6_K: return NA_GGML_TYPE_Q6_K;
    default:            return NA_GGML_TYPE_F32;
    }
}

/* Convert n f32 values (n % 32 == 0 for Q8_0) to dtype t into dst; returns bytes. */
static size_t na_gm_convert(na_dtype_t t, const float *src, size_t n, void *dst)
{
    size_t i, b, j;
    uint16_t *h = dst;
    uint8_t *q = dst;

    switch (t) {
    case NA_DTYPE_F16:
        for (i = 0; i < n; i++)
            h[i] = na_f32_to_f16(src[i]);
        return 2 * n;
    case NA_DTYPE_BF16:
        for (i = 0; i < n; i++)
            h[i] = na_f32_to_bf16(src[i]);
        return 2 * n;
    case NA_DTYPE_Q8_0:
        for (b = 0; b < n / NA_Q8_0_BLOCK; b++) {
            const float *x = src + b * NA_Q8_0_BLOCK;
            uint8_t *blk = q + b * NA_Q8_0_BLOCK_SIZE;
            float amax = 0.0f, d, id;
            uint16_t dh;
            for (j = 0; j < NA_Q8_0_BLOCK; j++)
                amax = fmaxf(amax, fabsf(x[j]));
            d = amax / 127.0f;
            id = d > 0.0f ? 1.0f / d : 0.0f;
            dh = na_f32_to_f16(d);
            memcpy(blk, &dh, 2);
            for (j = 0; j < NA_Q8_0_BLOCK; j++)
                blk[2 + j] = (uint8_t)(int8_t)lroundf(x[j] * id);
        }
        return n / NA_Q8_0_BLOCK * NA_Q8_0_BLOCK_SIZE;
    case NA_DTYPE_F32:
        memcpy(dst, src, 4 * n);
        return 4 * n;
    default:                             /* the other block formats */
        return na_quantize(t, src, n, dst);
    }
}

/* The dtype of tensor (kind, layer): norms f32; the matrices o->dtype, or
 * another by o->quant_mix, with llama-quantize's fallbacks (genmodel.h). */
static na_dtype_t na_gm_dtype(const na_genmodel_opts_t *o, na_gm_kind_t kind, int layer)
{
    int rows, cols, n = o->n_layers;
    na_dtype_t t = o->dtype;

    if (na_gm_is_vector(kind))
        return NA_DTYPE_F32;
    if (o->quant_mix == NA_GENMODEL_MIX_Q4_K_M) {
        int more = layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2;
        if (kind == NA_GM_WCLS || (kind == NA_GM_TOK && o->shared_classifier) ||
            ((kind == NA_GM_WV || kind == NA_GM_W2) && more))
            t = NA_DTYPE_Q6_K;
    }
    na_gm_shape(o, kind, &rows, &cols);
    if (cols % na_dtype_block(t) != 0) {
        t = t == NA_DTYPE_Q4_K ? NA_DTYPE_Q5_0 : t == NA_DTYPE_Q5_K ? NA_DTYPE_Q5_1
          : t == NA_DTYPE_Q6_K ? NA_DTYPE_Q8_0 : t;
        if (cols % na_dtype_block(t) != 0)
            t = NA_DTYPE_F16;
    }
    return t;
}

/* Declare tensor `name` of (rows, cols) in its dtype (na_gm_dtype). */
static na_status_t na_gm_declare(na_gguf_writer_t *w, const na_genmodel_opts_t *o,
                                 na_gm_kind_t kind, int layer, const char *name)
{
    int rows, cols;
    int norm = na_gm_is_vector(kind);
    uint64_t ne[2];

    na_gm_shape(o, kind, &rows, &cols);
    ne[0] = (uint64_t)cols;
    ne[1] = (uint64_t)rows;
    return na_gguf_writer_tensor(w, name, na_gm_ggml_type(na_gm_dtype(o, kind, layer)),
                                 norm ? 1 : 2, ne);
}

/* Stream one tensor's data in the GGUF dtype, a chunk of whole rows at a time. */
static na_status_t na_gm_gguf_tensor(na_gguf_writer_t *w, const na_genmodel_opts_t *o,
                                     na_gm_kind_t kind, int layer, float *buf, void *cvt,
                                     na_gm_progress_t *p)
{
    int rows, cols;
    na_dtype_t t = na_gm_dtype(o, kind, layer);
    uint64_t r, per;
    na_status_t st;

    na_gm_shape(o, kind, &rows, &cols);
    per = NA_GM_CHUNK / (uint64_t)cols;
    if (per == 0)
        per = 1;
    for (r = 0; r < (uint64_t)rows; r += per) {
        uint64_t nr = (uint64_t)rows - r < per ? (uint64_t)rows - r : per;
        size_t n = (size_t)(nr * (uint64_t)cols), bytes;
        if (kind == NA_GM_ROPE_FREQS)
            na_gm_llama3_factors(o, buf, (int)n);
        else
            na_gm_values(o, kind, layer, r * (uint64_t)cols, n, buf);
        bytes = na_gm_convert(t, buf, n, cvt);
        if ((st = na_gguf_writer_data(w, cvt, bytes)) != NA_OK)
            return st;
        na_gm_progress(p, bytes);
    }
    return NA_OK;
}

static const char *const na_gm_blk_names[NA_GM_KINDS] = {
    [NA_GM_ATTN_NORM] = "attn_norm", [NA_GM_WQ] = "attn_q", [NA_GM_WK] = "attn_k",
    [NA_GM_WV] = "attn_v", [NA_GM_WO] = "attn_output", [NA_GM_FFN_NORM] = "ffn_norm",
    [NA_GM_W1] = "ffn_gate", [NA_GM_W2] = "ffn_down", [NA_GM_W3] = "ffn_up",
    [NA_GM_BQ] = "attn_q", [NA_GM_BK] = "attn_k", [NA_GM_BV] = "attn_v",
    [NA_GM_QNORM] = "attn_q_norm", [NA_GM_KNORM] = "attn_k_norm",
};

/* The per-layer kinds in the order a GGUF file holds them. */
static const na_gm_kind_t na_gm_layer_kinds[] = {
    NA_GM_ATTN_NORM, NA_GM_WQ, NA_GM_BQ, NA_GM_WK, NA_GM_BK, NA_GM_WV, NA_GM_BV, NA_GM_QNORM,
    NA_GM_KNORM, NA_GM_WO, NA_GM_FFN_NORM, NA_GM_W1, NA_GM_W2, NA_GM_W3,
};
#define NA_GM_N_LAYER_KINDS (sizeof(na_gm_layer_kinds) / sizeof(na_gm_layer_kinds[0]))

/* The tokenizer.* keys of src (o->vocab_from), as they are there; our chat
 * template in place of its own when o has one. */
static na_status_t na_gm_copy_vocab(na_gguf_writer_t *w, const na_genmodel_opts_t *o,
                                    const na_gguf_t *src)
{
    na_status_t st = NA_OK;
    uint64_t i;

    for (i = 0; i < src->n_kv && st == NA_OK; i++) {
        const na_gguf_kv_t *kv = &src->kv[i];
        if (strncmp(kv->key, "tokenizer.", 10) != 0 ||
            (o->chat_template != NULL && !strcmp(kv->key, "tokenizer.chat_template")))
            continue;
        st = na_gguf_writer_kv_copy(w, kv);
    }
    if (st == NA_OK && o->chat_template != NULL)
        st = na_gguf_writer_kv_str(w, "tokenizer.chat_template", o->chat_template);
    return st;
}

/* Open o->vocab_from's header and check what gen-model relies on: the model
 * name and the token count (= vocab_size when n_expect > 0). */
static na_status_t na_gm_open_vocab(const char *path, int n_expect, na_gguf_t **g_p, int *n_p)
{
    na_gguf_str_t model;
    const na_gguf_kv_t *toks;
    na_gguf_t *g;
    na_status_t st;

    *g_p = NULL;
    if ((st = na_gguf_open_head(path, &g)) != NA_OK)
        return st;
    if ((st = na_gguf_get_str(g, "tokenizer.ggml.model", &model)) != NA_OK ||
        (st = na_gguf_get_arr(g, "tokenizer.ggml.tokens", NA_GGUF_STRING, &toks)) != NA_OK) {
        na_gguf_destroy(g);
        return na_err_prefix(st, "gen-model --vocab-from: ");
    }
    if (toks->v.arr.n < NA_GENMODEL_MIN_VOCAB || toks->v.arr.n > NA_MODEL_MAX_VOCAB ||
        (n_expect > 0 && toks->v.arr.n != (uint64_t)n_expect)) {
        st = na_err(NA_ERR_INVALID, "gen-model --vocab-from: %s: tokenizer.ggml.tokens has %llu "
                    "entries, %s", path, (unsigned long long)toks->v.arr.n,
                    n_expect > 0 && toks->v.arr.n != (uint64_t)n_expect
                    ? "not the count it had when checked" : "out of range [259, 1048576]");
        na_gguf_destroy(g);
        return st;
    }
    *n_p = (int)toks->v.arr.n;
    *g_p = g;
    return NA_OK;
}

na_status_t na_genmodel_vocab_from(const char *path, na_genmodel_opts_t *o)
{
    na_gguf_t *g;
    int n = 0;
    na_status_t st = na_gm_open_vocab(path, 0, &g, &n);

    if (st != NA_OK)
        return st;
    na_gguf_destroy(g);
    o->vocab_size = n;
    o->vocab_from = path;
    o->write_llama2c = 0;
    o->write_gguf = 1;
    return NA_OK;
}

/* Metadata: architecture, hyper-parameters, tokenizer. */
static na_status_t na_gm_gguf_meta(na_gguf_writer_t *w, const na_genmodel_opts_t *o,
                                   const na_genvocab_t *v, char **sp_pieces,
                                   const na_gguf_t *src)
{
    /* llama_ftype: q4_k, q5_k as their _S files, q4_k_m as MOSTLY_Q4_K_M */
    static const uint32_t ftype[NA_DTYPE_COUNT] = { 0, 1, 32, 7, 2, 3, 8, 9, 14, 16, 18 };
    const char *a = o->arch == NA_GENMODEL_QWEN2 ? "qwen2"
                  : o->arch == NA_GENMODEL_QWEN3 ? "qwen3" : "llama";
    int hd = na_gm_hd(o);
    char k[20][96];
    na_status_t st;

#define NA_GM_K(i, suffix) (snprintf(k[i], sizeof(k[i]), "%s." suffix, a), k[i])
    if ((st = na_gguf_writer_kv_str(w, "general.architecture", a)) != NA_OK ||
        (st = na_gguf_writer_kv_str(w, "general.name", "nearattn gen-model")) != NA_OK ||
        (st = na_gguf_writer_kv_u32(w, "general.alignment", NA_GGUF_DEFAULT_ALIGNMENT)) != NA_OK ||
        (st = na_gguf_writer_kv_u32(w, "general.file_type",
                                    o->quant_mix == NA_GENMODEL_MIX_Q4_K_M ? 15u
                                                                           : ftype[o->dtype])) != NA_OK ||
        (st = na_gguf_writer_kv_u32(w, NA_GM_K(0, "context_length"), (uint32_t)o->seq_len)) != NA_OK ||
        (st = na_gguf_writer_kv_u32(w, NA_GM_K(1, "embedding_length"), (uint32_t)o->dim)) != NA_OK ||
        (st = na_gguf_writer_kv_u32(w, NA_GM_K(2, "block_count"), (uint32_t)o->n_layers)) != NA_OK ||
        (st = na_gguf_writer_kv_u32(w, NA_GM_K(3, "feed_forward_length"),
                                    (uint32_t)o->hidden_dim)) != NA_OK ||
        (st = na_gguf_writer_kv_u32(w, NA_GM_K(4, "rope.dimension_count"),
                                    (uint32_t)(o->rope_dims > 0 ? o->rope_dims : hd))) != NA_OK ||
        (st = na_gguf_writer_kv_u32(w, NA_GM_K(5, "attention.head_count"),
                                    (uint32_t)o->n_heads)) != NA_OK ||
        (st = na_gguf_writer_kv_u32(w, NA_GM_K(6, "attention.head_count_kv"),
                                    (uint32_t)o->n_kv_heads)) != NA_OK ||
        (st = na_gguf_writer_kv_f32(w, NA_GM_K(7, "attention.layer_norm_rms_epsilon"),
                                    o->rms_eps)) != NA_OK ||
        (st = na_gguf_writer_kv_f32(w, NA_GM_K(8, "rope.freq_base"), o->rope_theta)) != NA_OK ||
        (st = na_gguf_writer_kv_u32(w, NA_GM_K(9, "vocab_size"), (uint32_t)o->vocab_size)) != NA_OK)
        return st;
    if ((o->arch == NA_GENMODEL_QWEN3 || hd != o->dim / o->n_heads) &&
        ((st = na_gguf_writer_kv_u32(w, NA_GM_K(10, "attention.key_length"),
                                     (uint32_t)hd)) != NA_OK ||
         (st = na_gguf_writer_kv_u32(w, NA_GM_K(11, "attention.value_length"),
                                     (uint32_t)hd)) != NA_OK))
        return st;
    if (o->rope_scaling != NULL &&
        ((st = na_gguf_writer_kv_str(w, NA_GM_K(12, "rope.scaling.type"), o->rope_scaling)) != NA_OK ||
         (st = na_gguf_writer_kv_f32(w, NA_GM_K(13, "rope.scaling.factor"),
                                     o->rope_scaling_factor)) != NA_OK ||
         (st = na_gguf_writer_kv_u32(w, NA_GM_K(14, "rope.scaling.original_context_length"),
                                     (uint32_t)o->seq_len)) != NA_OK))
        return st;
#undef NA_GM_K
    if (src != NULL)
        return na_gm_copy_vocab(w, o, src);
    if ((st = na_gguf_writer_kv_str(w, "tokenizer.ggml.model", "llama")) != NA_OK ||
        (st = na_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)sp_pieces,
                                        (uint64_t)v->n)) != NA_OK ||
        (st = na_gguf_writer_kv_arr_f32(w, "tokenizer.ggml.scores", v->scores,
                                        (uint64_t)v->n)) != NA_OK ||
        (st = na_gguf_writer_kv_arr_i32(w, "tokenizer.ggml.token_type", v->types,
                                        (uint64_t)v->n)) != NA_OK ||
        (st = na_gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", 1)) != NA_OK ||
        (st = na_gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", 2)) != NA_OK)
        return st;
    st = na_gguf_writer_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (st == NA_OK && o->chat_template != NULL)
        st = na_gguf_writer_kv_str(w, "tokenizer.chat_template", o->chat_template);
    return st;
}

/* Pieces with ' ' spelled U+2581, as SentencePiece GGUF vocabularies are. */
static char **na_gm_sp_pieces(const na_genvocab_t *v)
{
    char **out = calloc((size_t)v->n, sizeof(char *));
    int i;
    if (out == NULL)
        return NULL;
    for (i = 0; i < v->n; i++) {
        const char *p = v->pieces[i];
        char *q = malloc(3 * strlen(p) + 1), *o;
        if (q == NULL) {
            while (i-- > 0)
                free(out[i]);
            free(out);
            return NULL;
        }
        for (o = q; *p; p++) {
            if (*p == ' ') {
                memcpy(o, "\xe2\x96\x81", 3);
                o += 3;
            } else {
                *o++ = *p;
            }
        }
        *o = 0;
        out[i] = q;
    }
    return out;
}

/* Bytes of the GGUF tensor data (for progress and the space check). */
static uint64_t na_gm_gguf_data_size(const na_genmodel_opts_t *o)
{
    uint64_t total = 0;
    int rows, cols, kk, l;

    for (kk = 0; kk < NA_GM_KINDS; kk++) {
        int count = !na_gm_has(o, (na_gm_kind_t)kk) ? 0
                  : kk == NA_GM_TOK || kk == NA_GM_OUT_NORM || kk == NA_GM_WCLS ||
                    kk == NA_GM_ROPE_FREQS ? 1 : o->n_layers;
        na_gm_shape(o, (na_gm_kind_t)kk, &rows, &cols);
        for (l = 0; l < count; l++)      /* the type may differ by layer */
            total += na_dtype_bytes(na_gm_dtype(o, (na_gm_kind_t)kk, l),
                                    (size_t)rows * (size_t)cols);
    }
    return total;
}

static na_status_t na_gm_write_gguf(const char *path, const na_genmodel_opts_t *o,
                                    const na_genvocab_t *v, float *buf, void *cvt)
{
    na_gm_progress_t p = { path, 0, 0, -1, o->progress };
    na_gguf_writer_t *w;
    na_gguf_t *src = NULL;
    char name[64], **sp;
    na_status_t st;
    size_t k;
    int l;

    if (o->vocab_from != NULL) {
        int n = 0;
        sp = NULL;
        if ((st = na_gm_open_vocab(o->vocab_from, o->vocab_size, &src, &n)) != NA_OK)
            return st;
    } else if ((sp = na_gm_sp_pieces(v)) == NULL) {
        return na_err(NA_ERR_NOMEM, "%s: no memory for the vocabulary", path);
    }
    if ((st = na_gguf_writer_create(path, &w)) != NA_OK)
        goto out_free;
    if ((st = na_gm_gguf_meta(w, o, v, sp, src)) != NA_OK ||
        (st = na_gm_declare(w, o, NA_GM_TOK, 0, "token_embd.weight")) != NA_OK)
        goto err_abort;
    for (l = 0; l < o->n_layers; l++)
        for (k = 0; k < NA_GM_N_LAYER_KINDS; k++) {
            na_gm_kind_t kind = na_gm_layer_kinds[k];
            int bias = kind == NA_GM_BQ || kind == NA_GM_BK || kind == NA_GM_BV;
            if (!na_gm_has(o, kind))
                continue;
            const char *base = na_gm_blk_names[kind] != NULL ? na_gm_blk_names[kind] : "?";
            snprintf(name, sizeof(name), "blk.%d.%s.%s", l, base, bias ? "bias" : "weight");
            if ((st = na_gm_declare(w, o, kind, l, name)) != NA_OK)
                goto err_abort;
        }
    if ((st = na_gm_declare(w, o, NA_GM_OUT_NORM, 0, "output_norm.weight")) != NA_OK ||
        (na_gm_has(o, NA_GM_ROPE_FREQS) &&
         (st = na_gm_declare(w, o, NA_GM_ROPE_FREQS, 0, "rope_freqs.weight")) != NA_OK) ||
        (!o->shared_classifier &&
         (st = na_gm_declare(w, o, NA_GM_WCLS, 0, "output.weight")) != NA_OK))
        goto err_abort;
    p.total = na_gm_gguf_data_size(o);
    if ((st = na_gm_gguf_tensor(w, o, NA_GM_TOK, 0, buf, cvt, &p)) != NA_OK)
        goto err_abort;
    for (l = 0; l < o->n_layers; l++)
        for (k = 0; k < NA_GM_N_LAYER_KINDS; k++)
            if (na_gm_has(o, na_gm_layer_kinds[k]) &&
                (st = na_gm_gguf_tensor(w, o, na_gm_layer_kinds[k], l, buf, cvt, &p)) != NA_OK)
                goto err_abort;
    if ((st = na_gm_gguf_tensor(w, o, NA_GM_OUT_NORM, 0, buf, cvt, &p)) != NA_OK ||
        (na_gm_has(o, NA_GM_ROPE_FREQS) &&
         (st = na_gm_gguf_tensor(w, o, NA_GM_ROPE_FREQS, 0, buf, cvt, &p)) != NA_OK) ||
        (!o->shared_classifier &&
         (st = na_gm_gguf_tensor(w, o, NA_GM_WCLS, 0, buf, cvt, &p)) != NA_OK))
        goto err_abort;
    st = na_gguf_writer_finish(w);
    goto out_free;

err_abort:
    na_gguf_writer_abort(w);
out_free:
    if (sp != NULL)
        for (l = 0; l < v->n; l++)
            free(sp[l]);
    free(sp);
    na_gguf_destroy(src);
    return st;
}

/* ---- size and space ----------------------------------------------------- */

uint64_t na_genmodel_total_bytes(const na_genmodel_opts_t *o)
{
    /* vocabulary: tokenizer.bin and the GGUF metadata each hold every piece
     * (at most NA_GM_PIECE_MAX bytes) with a score/length; plus GGUF headers */
    uint64_t vocab = (uint64_t)o->vocab_size * (NA_GM_PIECE_MAX + 16);
    uint64_t total = 0;

    if (o->write_llama2c)
        total += na_gm_l2c_size(o) + vocab;
    if (o->write_gguf)
        total += na_gm_gguf_data_size(o) + vocab + ((uint64_t)o->n_layers + 4) * 128 + 65536;
    return total;
}

na_status_t na_genmodel_check_space(const char *prefix, const na_genmodel_opts_t *o)
{
    uint64_t need = na_genmodel_total_bytes(o), avail;
    const char *slash = strrchr(prefix, '/');
    char dir[4096];
    struct statvfs sv;

    if (need > NA_GENMODEL_MAX_BYTES)
        return na_err(NA_ERR_RANGE, "gen-model: these shapes need %.1f GiB of files, more than "
                      "the cap of %.0f GiB", need / 1073741824.0,
                      NA_GENMODEL_MAX_BYTES / 1073741824.0);
    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == prefix)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - prefix), prefix);
    if (statvfs(dir, &sv) != 0)
        return NA_OK;   /* no such directory: creating the first file reports it */
    avail = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    if (need > avail)
        return na_err(NA_ERR_NOSPACE, "gen-model: these shapes need %.2f GiB of files, the file "
                      "system of '%s' has %.2f GiB free", need / 1073741824.0, dir,
                      avail / 1073741824.0);
    return NA_OK;
}

na_status_t na_genmodel_write(const char *prefix, const na_genmodel_opts_t *o)
{
    size_t plen = strlen(prefix) + 16;
    char *path = malloc(plen);
    float *buf = malloc((size_t)NA_GM_CHUNK * 4 + 4096);
    void *cvt = malloc((size_t)NA_GM_CHUNK * 4 + 4096);
    na_genvocab_t v;
    na_status_t st;

    if (path == NULL || buf == NULL || cvt == NULL) {
        st = na_err(NA_ERR_NOMEM, "gen-model: no memory");
        goto out_free;
    }
    if ((st = na_genmodel_check(o)) != NA_OK ||
        (st = na_genmodel_check_space(prefix, o)) != NA_OK)
        goto out_free;
    memset(&v, 0, sizeof(v));
    if (o->vocab_from != NULL && o->write_llama2c) {
        st = na_err(NA_ERR_INVALID, "gen-model: --vocab-from writes the GGUF file only (a "
                    "llama2.c tokenizer.bin cannot hold %s's vocabulary)", o->vocab_from);
        goto out_free;
    }
    if (o->vocab_from == NULL && (st = na_genvocab_create(o->vocab_size, o->seed, &v)) != NA_OK)
        goto out_free;
    if (o->write_llama2c) {
        snprintf(path, plen, "%s.bin", prefix);
        if ((st = na_gm_write_llama2c(path, o, buf)) != NA_OK)
            goto out_vocab;
        snprintf(path, plen, "%s.tok.bin", prefix);
        if ((st = na_gm_write_tokbin(path, &v)) != NA_OK)
            goto out_vocab;
    }
    if (o->write_gguf) {
        snprintf(path, plen, "%s.gguf", prefix);
        st = na_gm_write_gguf(path, o, &v, buf, cvt);
    }
out_vocab:
    na_genvocab_destroy(&v);
out_free:
    free(path);
    free(buf);
    free(cvt);
    return st;
}
