/* tests/unit/test_model_header.c — na_model_read_config (the header-only
 * reader the storage node uses) against the full loader na_model_open: the
 * same config on every architecture and format, the same errors on broken
 * files, and a GGUF header larger than the first read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/genmodel.h"
#include "common/gguf.h"
#include "common/model.h"
#include "tests/testutil.h"

/* Both readers on path: the same status, the same config or message. */
static void check_same(const char *what, const char *path)
{
    na_model_config_t hc;
    na_model_t *m = NULL;
    char full_msg[1024];
    na_status_t sf, sh;

    memset(&hc, 0, sizeof(hc));
    sf = na_model_open(path, &m);
    snprintf(full_msg, sizeof(full_msg), "%s", na_errmsg());
    sh = na_model_read_config(path, &hc);
    NA_CHECK_MSG(sf == sh, "%s: full loader %s (%s), header reader %s (%s)", what,
                 na_status_string(sf), full_msg, na_status_string(sh), na_errmsg());
    if (sf == NA_OK && sh == NA_OK) {
        NA_CHECK_MSG(memcmp(&m->cfg, &hc, sizeof(hc)) == 0, "%s: configs differ (layers %d/%d "
                     "kv_heads %d/%d head_dim %d/%d seq %d/%d)", what, m->cfg.n_layers,
                     hc.n_layers, m->cfg.n_kv_heads, hc.n_kv_heads, m->cfg.head_dim,
                     hc.head_dim, m->cfg.seq_len, hc.seq_len);
        fprintf(stderr, "%-16s %s: layers %d heads %d kv %d head_dim %d seq %d\n", what,
                hc.arch, hc.n_layers, hc.n_heads, hc.n_kv_heads, hc.head_dim, hc.seq_len);
    } else if (sf != NA_OK) {
        NA_CHECK_MSG(strcmp(full_msg, na_errmsg()) == 0, "%s: messages differ:\n  full:   %s\n"
                     "  header: %s", what, full_msg, na_errmsg());
    }
    na_model_destroy(m);
}

/* A copy of src cut to n bytes at dst. */
static void truncated(const char *src, const char *dst, size_t n)
{
    size_t len;
    char *p = na_test_read_file(src, &len);
    NA_CHECK(p != NULL && len > n);
    if (p != NULL)
        NA_CHECK(na_test_write_file(dst, p, n < len ? n : len) == 0);
    free(p);
}

/* A GGUF of one tiny layer and a vocabulary of vocab as dir/name.gguf, its
 * path in path: 0, or -1 after a failed check (na_test_genmodel). */
static int tiny_gguf(const char *dir, const char *name, int vocab, char *path, size_t cap)
{
    na_genmodel_opts_t o;

    na_genmodel_shape(&o, 32, 32, 1, 2, 1, vocab, 64);
    o.write_llama2c = 0;
    o.write_gguf = 1;
    return na_test_genmodel(dir, name, &o, "gguf", path, cap);
}

int main(void)
{
    static const struct {
        const char        *name;
        na_genmodel_arch_t arch;
        int                heads, kv_heads, head_dim;
        const char        *ext;
    } vs[] = {
        { "llama-bin", NA_GENMODEL_LLAMA, 4, 2, 0,  "bin"  },
        { "llama",     NA_GENMODEL_LLAMA, 4, 2, 0,  "gguf" },
        { "qwen2",     NA_GENMODEL_QWEN2, 4, 2, 0,  "gguf" },
        { "qwen3",     NA_GENMODEL_QWEN3, 4, 2, 0,  "gguf" },
        { "qwen3-hd48", NA_GENMODEL_QWEN3, 4, 4, 48, "gguf" },
    };
    na_genmodel_opts_t o;
    char dir[512], path[600], cut[640];
    const char *stories;
    size_t i;

    if (na_test_tmpdir(dir, sizeof(dir)) != 0)
        return 1;
    for (i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
        na_genmodel_shape(&o, 128, 96, 3, vs[i].heads, vs[i].kv_heads, 300, 80);
        na_genmodel_set_arch(&o, vs[i].arch);
        o.write_llama2c = strcmp(vs[i].ext, "bin") == 0;
        o.write_gguf = !o.write_llama2c;
        o.head_dim = vs[i].head_dim;
        if (na_test_genmodel(dir, vs[i].name, &o, vs[i].ext, path, sizeof(path)) != 0)
            continue;
        check_same(vs[i].name, path);
        /* cut inside the weights, inside the tensor infos, inside the header */
        snprintf(cut, sizeof(cut), "%s.cut", path);
        truncated(path, cut, 4096);
        check_same("cut in weights", cut);
        truncated(path, cut, 300);
        check_same("cut in header", cut);
        truncated(path, cut, 10);
        check_same("cut in magic", cut);
    }
    /* a file under NA_GGUF_HEAD_FIRST is read whole: still no tensor data */
    if (tiny_gguf(dir, "tiny", 300, path, sizeof(path)) == 0) {
        na_gguf_t *g = NULL;
        NA_CHECK_OK(na_gguf_open_head(path, &g));
        NA_CHECK(g != NULL && g->n_tensors > 0 && g->data_offset < NA_GGUF_HEAD_FIRST);
        NA_CHECK(g != NULL && g->tensors[0].data == NULL &&
                 g->tensors[g->n_tensors - 1].data == NULL);
        na_gguf_destroy(g);
        check_same("tiny", path);
    }
    /* a GGUF header over NA_GGUF_HEAD_FIRST (vocabulary 120000): read again, longer */
    if (tiny_gguf(dir, "bigvocab", 120000, path, sizeof(path)) == 0) {
        na_gguf_t *g = NULL;
        NA_CHECK_OK(na_gguf_open_head(path, &g));
        if (g != NULL) {
            NA_CHECK_MSG(g->data_offset > NA_GGUF_HEAD_FIRST, "header of %llu bytes",
                         (unsigned long long)g->data_offset);
            NA_CHECK(g->n_tensors > 0 && g->tensors[0].data == NULL &&
                     g->tensors[g->n_tensors - 1].data == NULL);
        }
        na_gguf_destroy(g);
        check_same("bigvocab", path);
    }
    check_same("missing", "/nonexistent/model.gguf");
    stories = na_test_shared_model("stories260K.bin");
    if (stories != NULL)
        check_same("stories260K", stories);
    else
        fprintf(stderr, "stories260K.bin not in shared/models: that case skipped\n");
    na_test_rmtree(dir);
    return na_test_finish();
}
