/* tests/unit/test_arch.c — the architectures of common/model_arch.c through
 * the compute node's forward pass (compute-node/slices.c on the cpu and ref
 * backends), against a plain reference written here from the model struct
 * alone: double accumulation, its own RoPE angles (theta, rope_freqs,
 * linear / yarn scaling as llama.cpp's rope_yarn, partial and NEOX pairing),
 * q/k/v biases, per-head q/k norms. Files come from gen-model (llama,
 * llama3, qwen2, qwen3, and llama variants with key_length != dim/heads,
 * partial RoPE, linear and yarn scaling). Offload = monolithic for these
 * models: tests/cluster/test_offload_inproc.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/genmodel.h"
#include "common/model.h"
#include "compute-node/engine.h"
#include "kernels/rope.h"
#include "tests/testutil.h"

#define N_PRE  5        /* prompt rows of the first step */
#define N_DEC  4        /* then single-token steps */
#define N_TOK  (N_PRE + N_DEC)

/* ---- the plain reference ------------------------------------------------ */

typedef struct {
    const na_model_t *m;
    double *kc, *vc;         /* [layer][pos][kv_dim] */
} ref_t;

static double wat(const na_tensor_t *t, int r, int c)
{
    return ((const float *)t->data)[(size_t)r * (size_t)t->cols + (size_t)c];   /* f32 files */
}

static void matvec(const na_tensor_t *w, const double *x, double *y)
{
    int r, c;
    for (r = 0; r < w->rows; r++) {
        double s = 0.0;
        for (c = 0; c < w->cols; c++)
            s += wat(w, r, c) * x[c];
        y[r] = s;
    }
}

static void rmsnorm(double *o, const double *x, const na_tensor_t *w, int n, double eps)
{
    double ss = 0.0;
    int i;
    for (i = 0; i < n; i++)
        ss += x[i] * x[i];
    ss = 1.0 / sqrt(ss / n + eps);
    for (i = 0; i < n; i++)
        o[i] = x[i] * ss * wat(w, 0, i);
}

/* The angle and magnitude of pair i at position p, from the config. */
static void ref_angle(const na_model_t *m, int i, int p, double *ang, double *mag)
{
    const na_model_config_t *c = &m->cfg;
    double nd = c->rope_dims, base = pow(c->rope_theta, -2.0 * i / nd), fs = c->rope_freq_scale;
    double extrap, interp;
    *mag = c->yarn_attn_factor;
    if (na_tensor_present(&m->rope_freqs))
        base /= ((const float *)m->rope_freqs.data)[i];
    extrap = p * base;
    interp = c->rope_scaling == NA_ROPE_SCALING_NONE ? extrap : fs * extrap;
    *ang = interp;
    if (c->rope_scaling == NA_ROPE_SCALING_YARN && c->yarn_ext_factor != 0.0f) {
        /* llama.cpp: corr dims from beta_fast / beta_slow, ramp over pair index */
        double lo = floor(nd * log(c->yarn_orig_ctx / (c->yarn_beta_fast * 2 * M_PI)) /
                          (2 * log(c->rope_theta)));
        double hi = ceil(nd * log(c->yarn_orig_ctx / (c->yarn_beta_slow * 2 * M_PI)) /
                         (2 * log(c->rope_theta)));
        double y, mix;
        lo = lo > 0 ? lo : 0;
        hi = hi < nd - 1 ? hi : nd - 1;
        y = (i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
        mix = (1.0 - (y < 0 ? 0 : y > 1 ? 1 : y)) * c->yarn_ext_factor;
        *ang = interp * (1 - mix) + extrap * mix;
        *mag *= 1.0 + 0.1 * log(1.0 / fs);
    }
}

static void ref_rope(const na_model_t *m, double *v, int n_heads, int p)
{
    const na_model_config_t *c = &m->cfg;
    int h, i, half = c->rope_dims / 2;
    for (h = 0; h < n_heads; h++)
        for (i = 0; i < half; i++) {
            double *x = v + (size_t)h * c->head_dim;
            int a = c->rope_style == NA_ROPE_NEOX ? i : 2 * i;
            int b = c->rope_style == NA_ROPE_NEOX ? i + half : 2 * i + 1;
            double ang, mag, x0 = x[a], x1 = x[b];
            ref_angle(m, i, p, &ang, &mag);
            x[a] = (x0 * cos(ang) - x1 * sin(ang)) * mag;
            x[b] = (x0 * sin(ang) + x1 * cos(ang)) * mag;
        }
}

static void add_bias(double *x, const na_tensor_t *b)
{
    int i;
    if (!na_tensor_present(b))
        return;
    for (i = 0; i < b->cols; i++)
        x[i] += wat(b, 0, i);
}

static void head_norm(double *x, const na_tensor_t *w, int n_heads, int hd, double eps)
{
    int h;
    if (!na_tensor_present(w))
        return;
    for (h = 0; h < n_heads; h++)
        rmsnorm(x + (size_t)h * hd, x + (size_t)h * hd, w, hd, eps);
}

/* Logits after token tok at position p (positions fed in order). */
static void ref_step(ref_t *r, int tok, int p, double *logits)
{
    const na_model_t *m = r->m;
    const na_model_config_t *c = &m->cfg;
    int hd = c->head_dim, q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
    int grp = c->n_heads / c->n_kv_heads, l, i, h, t;
    double eps = c->rms_eps;
    double *x = calloc((size_t)c->dim, 8), *xb = calloc((size_t)c->dim, 8);
    double *q = calloc((size_t)q_dim, 8), *att = calloc((size_t)q_dim, 8);
    double *hb = calloc((size_t)c->hidden_dim, 8), *hb2 = calloc((size_t)c->hidden_dim, 8);
    double *sc = calloc((size_t)c->seq_len, 8), *o = calloc((size_t)c->dim, 8);

    for (i = 0; i < c->dim; i++)
        x[i] = wat(&m->tok_embd, tok, i);
    for (l = 0; l < c->n_layers; l++) {
        const na_layer_weights_t *w = &m->layers[l];
        double *kp = r->kc + ((size_t)l * c->seq_len + p) * kv_dim;
        double *vp = r->vc + ((size_t)l * c->seq_len + p) * kv_dim;
        rmsnorm(xb, x, &w->attn_norm, c->dim, eps);
        matvec(&w->wq, xb, q);
        matvec(&w->wk, xb, kp);
        matvec(&w->wv, xb, vp);
        add_bias(q, &w->bq);
        add_bias(kp, &w->bk);
        add_bias(vp, &w->bv);
        head_norm(q, &w->q_norm, c->n_heads, hd, eps);
        head_norm(kp, &w->k_norm, c->n_kv_heads, hd, eps);
        ref_rope(m, q, c->n_heads, p);
        ref_rope(m, kp, c->n_kv_heads, p);
        for (h = 0; h < c->n_heads; h++) {
            int kh = h / grp;
            double mx = -1e300, sum = 0.0;
            for (t = 0; t <= p; t++) {
                const double *k = r->kc + ((size_t)l * c->seq_len + t) * kv_dim + kh * hd;
                double s = 0.0;
                for (i = 0; i < hd; i++)
                    s += q[h * hd + i] * k[i];
                sc[t] = s / sqrt((double)hd);
                mx = sc[t] > mx ? sc[t] : mx;
            }
            for (t = 0; t <= p; t++)
                sum += sc[t] = exp(sc[t] - mx);
            for (i = 0; i < hd; i++) {
                double a = 0.0;
                for (t = 0; t <= p; t++)
                    a += sc[t] * r->vc[((size_t)l * c->seq_len + t) * kv_dim + kh * hd + i];
                att[h * hd + i] = a / sum;
            }
        }
        matvec(&w->wo, att, o);
        add_bias(o, &w->bo);
        for (i = 0; i < c->dim; i++)
            x[i] += o[i];
        rmsnorm(xb, x, &w->ffn_norm, c->dim, eps);
        matvec(&w->w1, xb, hb);
        matvec(&w->w3, xb, hb2);
        for (i = 0; i < c->hidden_dim; i++)
            hb[i] = hb[i] / (1.0 + exp(-hb[i])) * hb2[i];
        matvec(&w->w2, hb, o);
        for (i = 0; i < c->dim; i++)
            x[i] += o[i];
    }
    rmsnorm(xb, x, &m->out_norm, c->dim, eps);
    matvec(&m->output, xb, logits);
    free(x), free(xb), free(q), free(att), free(hb), free(hb2), free(sc), free(o);
}

/* ---- the engine --------------------------------------------------------- */

/* Logits of the engine on backend: rows 0..N_PRE-1 as one step (logits of
 * the last), then one step per token: out[j] for positions N_PRE-1.. */
static na_status_t engine_logits(const na_model_t *m, const char *backend, const int *toks,
                                 float *out)
{
    na_engine_opts_t eo = { backend, 1, NA_DTYPE_F32, 0 };
    size_t v = (size_t)m->cfg.vocab_size;
    na_engine_t *e = NULL;
    na_acts_t *a = NULL;
    na_lkv_t *kv = NULL;
    int pos[N_TOK], i;
    na_status_t st;

    for (i = 0; i < N_TOK; i++)
        pos[i] = i;
    if ((st = na_engine_create(m, &eo, &e)) != NA_OK)
        return st;
    st = na_acts_create(e, N_PRE, 1, &a);
    if (st == NA_OK)
        st = na_lkv_create(&m->cfg, NA_DTYPE_F32, e->kern, e->kern->mem, &kv);
    for (i = 0; st == NA_OK && i <= N_DEC; i++) {
        int p0 = i == 0 ? 0 : N_PRE + i - 1, n = i == 0 ? N_PRE : 1;
        na_step_seg_t seg = { 0, n, p0, kv };
        na_step_t s = { n, 1, &toks[p0], &pos[p0], &seg };
        st = na_engine_forward(e, a, &s);
        if (st == NA_OK)
            memcpy(out + (size_t)i * v, a->logits, v * sizeof(float));
    }
    na_lkv_destroy(kv);
    na_acts_destroy(a);
    na_engine_destroy(e);
    return st;
}

typedef struct {
    const char        *name;
    na_genmodel_arch_t arch;
    int                dim, heads, kv_heads, head_dim, rope_dims;
    const char        *scaling;
    float              factor;
} variant_t;

static void check_variant(const char *dir, const variant_t *vt)
{
    na_genmodel_opts_t o;
    na_model_t *m;
    int toks[N_TOK], i, j, b;
    uint64_t rng = 99;
    size_t v;
    float *got[2];
    double *want, maxd[2] = { 0, 0 }, maxl = 0;
    ref_t r;
    static const char *const backends[2] = { "cpu", "ref" };

    na_genmodel_shape(&o, vt->dim, 96, 2, vt->heads, vt->kv_heads, 300, 64);
    na_genmodel_set_arch(&o, vt->arch);
    o.write_llama2c = 0;
    o.write_gguf = 1;
    o.head_dim = vt->head_dim;
    o.rope_dims = vt->rope_dims;
    o.rope_scaling = vt->scaling;
    o.rope_scaling_factor = vt->factor;
    o.seed = 3;
    m = na_test_genmodel_open(dir, vt->name, &o, "gguf");
    if (m == NULL) {
        NA_CHECK_MSG(0, "%s: %s", vt->name, na_errmsg());
        return;
    }
    v = (size_t)m->cfg.vocab_size;
    na_test_prompt(&rng, toks, N_TOK, m->cfg.vocab_size);
    r.m = m;
    r.kc = calloc((size_t)m->cfg.n_layers * m->cfg.seq_len * m->cfg.n_kv_heads *
                  m->cfg.head_dim, 8);
    r.vc = calloc((size_t)m->cfg.n_layers * m->cfg.seq_len * m->cfg.n_kv_heads *
                  m->cfg.head_dim, 8);
    want = calloc((N_DEC + 1) * v, 8);
    for (i = 0; i < N_TOK; i++) {
        double lg[4096];
        ref_step(&r, toks[i], i, lg);
        if (i >= N_PRE - 1)
            memcpy(want + (size_t)(i - N_PRE + 1) * v, lg, v * 8);
    }
    for (b = 0; b < 2; b++) {
        got[b] = calloc((N_DEC + 1) * v, 4);
        NA_CHECK_OK(engine_logits(m, backends[b], toks, got[b]));
    }
    for (j = 0; j < (int)((N_DEC + 1) * v); j++) {
        maxl = fabs(want[j]) > maxl ? fabs(want[j]) : maxl;
        for (b = 0; b < 2; b++) {
            double d = fabs(got[b][j] - want[j]);
            maxd[b] = d > maxd[b] ? d : maxd[b];
        }
    }
    fprintf(stderr, "%-14s arch %s head_dim %d rope %d/%s: max |logit| %.3f, |cpu - ref| %.2e, "
            "|ref backend - ref| %.2e\n", vt->name, m->cfg.arch, m->cfg.head_dim,
            m->cfg.rope_dims, m->cfg.rope_style == NA_ROPE_NEOX ? "neox" : "norm", maxl, maxd[0],
            maxd[1]);
    NA_CHECK(maxl > 0.1);
    NA_CHECK_MSG(maxd[0] < 2e-4 * (1 + maxl) && maxd[1] < 2e-4 * (1 + maxl),
                 "%s: the forward pass differs from the reference by %g / %g", vt->name,
                 maxd[0], maxd[1]);
    for (b = 0; b < 2; b++)
        free(got[b]);
    free(want);
    free(r.kc);
    free(r.vc);
    na_model_destroy(m);
}

/* The RoPE table: llama2.c's float formula bit for bit when nothing scales. */
static void check_table(void)
{
    na_rope_desc_t d;
    float f[64], ms;
    int i;
    na_rope_desc_plain(&d, 128, 10000.0f);
    NA_CHECK_OK(na_rope_table(&d, f, &ms));
    for (i = 0; i < 64; i++)
        NA_CHECK(f[i] == 1.0f / powf(10000.0f, (float)(2 * i) / 128.0f));
    NA_CHECK(ms == 1.0f);
    d.n_dims = 130;
    NA_CHECK(na_rope_table(&d, f, &ms) == NA_ERR_INVALID);
}

int main(void)
{
    static const variant_t vs[] = {
        /* name          arch                dim heads kv hd rope scaling factor */
        { "llama",      NA_GENMODEL_LLAMA,  128, 4, 2, 0,  0,  NULL,     0 },
        { "llama3",     NA_GENMODEL_LLAMA3, 128, 4, 2, 0,  0,  NULL,     0 },
        { "qwen2",      NA_GENMODEL_QWEN2,  128, 4, 2, 0,  0,  NULL,     0 },
        { "qwen3",      NA_GENMODEL_QWEN3,  128, 4, 2, 0,  0,  NULL,     0 },
        { "qwen3-hd48", NA_GENMODEL_QWEN3,  128, 4, 4, 48, 0,  NULL,     0 },
        { "llama-part", NA_GENMODEL_LLAMA,  128, 4, 2, 48, 32, "linear", 2 },
        { "llama-yarn", NA_GENMODEL_LLAMA,  128, 4, 2, 0,  0,  "yarn",   4 },
        { "qwen2-part", NA_GENMODEL_QWEN2,  128, 2, 1, 0,  40, "yarn",   8 },
    };
    char dir[512];
    size_t i;

    check_table();
    if (na_test_tmpdir(dir, sizeof(dir)) != 0)
        return 1;
    for (i = 0; i < sizeof(vs) / sizeof(vs[0]); i++)
        check_variant(dir, &vs[i]);
    na_test_rmtree(dir);
    return na_test_finish();
}
