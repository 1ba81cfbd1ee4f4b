/* tests/unit/test_config.c — cluster layouts (common/config.c): every file in
 * cluster-configs/ loads; defaults, rank order, lookups, path resolution,
 * ${VAR} expansion, head split and the plan; each bad case in
 * tests/data/config/ fails with the right file:line:col and message; a few
 * bad cases that need run-time files (non-UTF-8, secret modes) are made in a
 * temporary directory; docs/config.md names every key of the schema. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "tests/testutil.h"

static char src_dir[2048];
static char kv_dir[1100];

typedef struct {
    const char *file;     /* under tests/data/config/ */
    int line, col;        /* expected position */
    const char *keyword;  /* expected in the message */
} bad_case_t;

static const bad_case_t bad_cases[] = {
    { "unknown-key.yaml",      10,  7, "did you mean 'block_tokens'" },
    { "unknown-top.yaml",      10,  1, "unknown key 'frobnicate'" },
    { "type-int.yaml",          7, 11, "expected integer, got 'abc'" },
    { "type-quoted.yaml",       3, 43, "expected integer, got string" },
    { "type-list.yaml",         2, 10, "expected a list" },
    { "null-value.yaml",        7, 10, "got null" },
    { "bool-bad.yaml",         10, 20, "expected boolean" },
    { "enum-bad.yaml",          9, 46, "expected one of cpu|cuda|csd" },
    { "dup-key.yaml",           8,  5, "duplicate key 'port'" },
    { "dup-name.yaml",          5, 11, "duplicate node name 'c0'" },
    { "dup-addr.yaml",         12, 11, "duplicate address 127.0.0.1:14001" },
    { "dup-kv-path.yaml",      10, 17, "already used" },
    { "port-range.yaml",        7, 11, "70000 out of range [1, 65535]" },
    { "port-zero.yaml",         7, 11, "0 out of range" },
    { "bif-zero.yaml",         10, 32, "batches_in_flight: 0 out of range" },
    { "budget-zero.yaml",       9, 47, "dram_mb: 0 out of range" },
    { "block-pow2.yaml",       11, 17, "not a power of two" },
    { "block-range.yaml",      11, 17, "16384 out of range" },
    { "kv-path.yaml",           9, 17, "Not a directory" },
    { "kv-path-newline.yaml",   9, 17, "control character (0x0a at byte 4)" },
    { "rotational-1c.yaml",    12, 15, "at least 2 compute nodes" },
    { "empty-storage.yaml",     4, 10, "list is empty" },
    { "missing-storage.yaml",   1,  1, "missing required key 'storage'" },
    { "missing-required.yaml",  9,  9, "missing required key 'dram_mb'" },
    { "secret-missing.yaml",    1, 36, "No such file or directory" },
    { "secret-short.yaml",      1, 36, "at least 16" },
    { "syntax.yaml",           11,  7, "YAML syntax error" },
    { "alias-unknown.yaml",    10, 11, "names no complete anchor" },
    { "alias-bomb.yaml",       10, 62, "alias expansion" },
    { "merge-key.yaml",        10, 11, "merge keys" },
    { "multi-doc.yaml",        10,  1, "one YAML document" },
    { "env-unset.yaml",         9, 17, "NA_TEST_SURELY_UNSET_VARIABLE' is not set" },
    { "env-malformed.yaml",     9, 17, "unterminated" },
    { "peer-timeout.yaml",     12, 20, "2 x heartbeat_ms" },
    { "xcache-budget.yaml",    12, 12, "budget of 0" },
    { "share-range.yaml",      10, 46, "1.5 out of range" },
    { "bad-name.yaml",          3, 13, "may hold only" },
    { "tls-bad.yaml",          10, 19, "is not auto, shm, tcp" },
    { "empty.yaml",             1,  1, "empty layout" },
    { "root-list.yaml",         1,  1, "expected a mapping" },
    { "key-not-scalar.yaml",   10,  7, "must be a plain name" },
#if !NA_HAVE_CSD_ENGINE
    { "engine-unbuilt.yaml",    9, 46, "engine csd is not built into this nearattn (available: cpu" },
#else
    { "engine-unbuilt.yaml",    9, 46, "engine csd needs xclbin" },
#endif
    /* an engine's own key on a slot of another engine would be ignored */
    { "engine-key-other.yaml",  9, 71, "hbm_mb is a key of engine cuda, this slot's engine is cpu" },
#if !NA_HAVE_CUDA    /* a CUDA build has compute device cuda */
    { "device-unbuilt.yaml",    3, 42, "device cuda is not built into this nearattn (available: cpu)" },
#endif
};

/* Load a bad layout: it must fail, the message must hold "file:L:C:" and the
 * keyword. */
static void check_bad(const char *path, const char *base, int line, int col, const char *kw)
{
    char pos[512];
    na_cfg_t *cfg = NULL;
    na_status_t st = na_cfg_load(path, &cfg);
    const char *msg = na_errmsg();

    snprintf(pos, sizeof(pos), "%s:%d:%d: ", base, line, col);
    NA_CHECK_MSG(st != NA_OK, "%s loaded but is invalid", base);
    NA_CHECK_MSG(cfg == NULL, "%s: output set on failure", base);
    NA_CHECK_MSG(strstr(msg, pos) != NULL, "%s: message lacks '%s': %s", base, pos, msg);
    NA_CHECK_MSG(strstr(msg, kw) != NULL, "%s: message lacks '%s': %s", base, kw, msg);
    NA_CHECK_MSG(strchr(msg, '\n') == NULL, "%s: message is not one line", base);
    if (st == NA_OK)
        na_cfg_destroy(cfg);
}

static void test_bad_cases(void)
{
    char path[4096];
    size_t i;

    for (i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        snprintf(path, sizeof(path), "%s/tests/data/config/%s", src_dir, bad_cases[i].file);
        check_bad(path, bad_cases[i].file, bad_cases[i].line, bad_cases[i].col,
                  bad_cases[i].keyword);
    }
}

static int write_file(const char *path, const void *data, size_t len, mode_t mode)
{
    return na_test_write_file(path, data, len) == 0 ? chmod(path, mode) : -1;
}

/* Bad cases built at run time: bytes that are not UTF-8, a secret that is a
 * directory; and a good one: a world-readable secret loads (with a warning). */
static void test_runtime_cases(const char *tmp)
{
    static const char bad_utf8[] = "cluster:\n  name: \xff\xfe-bad\n";
    char yaml[4096], secret[2048], layout[8192];
    na_cfg_t *cfg = NULL;

    snprintf(yaml, sizeof(yaml), "%s/non-utf8.yaml", tmp);
    NA_CHECK(write_file(yaml, bad_utf8, sizeof(bad_utf8) - 1, 0600) == 0);
    check_bad(yaml, "non-utf8.yaml", 2, 9, "UTF-8");

    snprintf(yaml, sizeof(yaml), "%s/nul.yaml", tmp);
    NA_CHECK(write_file(yaml, "cluster: {}\n\0\n", 14, 0600) == 0);
    check_bad(yaml, "nul.yaml", 2, 1, "invalid text");

    snprintf(secret, sizeof(secret), "%s/secret-dir", tmp);
    NA_CHECK(mkdir(secret, 0700) == 0);
    snprintf(layout, sizeof(layout),
             "cluster: { secret_file: %s }\n"
             "compute: [ { name: c0, host: 127.0.0.1 } ]\n"
             "storage:\n"
             "  - { name: s0, host: 127.0.0.1, port: 14001,\n"
             "      devices: [ { path: kv/s0d0, dram_mb: 1, ssd_mb: 1 } ] }\n", secret);
    snprintf(yaml, sizeof(yaml), "%s/secret-dir.yaml", tmp);
    NA_CHECK(write_file(yaml, layout, strlen(layout), 0600) == 0);
    check_bad(yaml, "secret-dir.yaml", 1, 25, "not a regular file");

    /* A world-readable secret is accepted (a warning is logged); relative
     * KV paths resolve against the layout's directory. */
    snprintf(secret, sizeof(secret), "%s/open.secret", tmp);
    NA_CHECK(write_file(secret, "0123456789abcdef0123\n", 21, 0644) == 0);
    snprintf(layout, sizeof(layout),
             "cluster: { secret_file: open.secret }\n"
             "compute: [ { name: c0, host: 127.0.0.1 } ]\n"
             "storage:\n"
             "  - { name: s0, host: 127.0.0.1, port: 14001,\n"
             "      devices: [ { path: kv/s0d0, dram_mb: 1, ssd_mb: 1 } ] }\n");
    snprintf(yaml, sizeof(yaml), "%s/open.yaml", tmp);
    NA_CHECK(write_file(yaml, layout, strlen(layout), 0600) == 0);
    NA_CHECK_OK(na_cfg_load(yaml, &cfg));
    if (cfg != NULL) {
        char want[2048];
        struct stat sb;
        NA_CHECK(cfg->secret_len == 20 && !memcmp(cfg->secret, "0123456789abcdef0123", 20));
        NA_CHECK(!cfg->secret_is_dev);
        snprintf(want, sizeof(want), "%s/kv/s0d0", tmp);
        /* realpath may differ from tmp when TMPDIR holds a symlink */
        NA_CHECK(strstr(cfg->nodes[1].devices[0].path, "/kv/s0d0") != NULL);
        NA_CHECK(stat(want, &sb) != 0);     /* loading creates nothing: the node does */
        na_cfg_destroy(cfg);
    }
}

/* A value holding a newline is quoted escaped (one-line message). */
static void test_escaped_value(const char *tmp)
{
    static const char text[] = "cluster:\n  name: \"a\\nb\"\n";
    char yaml[4096];

    snprintf(yaml, sizeof(yaml), "%s/newline.yaml", tmp);
    NA_CHECK(write_file(yaml, text, sizeof(text) - 1, 0600) == 0);
    check_bad(yaml, "newline.yaml", 2, 9, "name 'a\\nb' may hold only");
}

/* A file over the size cap is refused with the file:1:1: prefix. */
static void test_too_large(const char *tmp)
{
    size_t n = NA_CFG_MAX_FILE_BYTES + 1;
    char yaml[4096];
    char *big = malloc(n);

    NA_CHECK(big != NULL);
    if (big == NULL)
        return;
    memset(big, '#', n);
    big[n - 1] = '\n';
    snprintf(yaml, sizeof(yaml), "%s/big.yaml", tmp);
    NA_CHECK(write_file(yaml, big, n, 0600) == 0);
    check_bad(yaml, "big.yaml", 1, 1, "larger than");
    free(big);
}

/* `!!str 14001` is a string, refused for a number like "14001" is (runs after
 * test_runtime_cases, which writes open.secret). */
static void test_str_tag(const char *tmp)
{
    static const char *tagged[] = { "!!str 14001", "! 14001" };
    char yaml[4096], layout[2048];
    size_t i;

    for (i = 0; i < 2; i++) {
        snprintf(layout, sizeof(layout),
                 "cluster: { name: t, secret_file: open.secret }\n"
                 "compute: [ { name: c0, host: 127.0.0.1 } ]\n"
                 "storage:\n"
                 "  - { name: s0, host: 127.0.0.1, port: %s,\n"
                 "      devices: [ { path: kv/s0d0, dram_mb: 1, ssd_mb: 1 } ] }\n", tagged[i]);
        snprintf(yaml, sizeof(yaml), "%s/str-tag.yaml", tmp);
        NA_CHECK(write_file(yaml, layout, strlen(layout), 0600) == 0);
        check_bad(yaml, "str-tag.yaml", 4, 40, "port: expected integer, got string '14001'");
    }
}

/* Defaults, order, lookups and helpers on cluster-configs/test-1s.yaml etc. */
static void test_good_details(void)
{
    char path[4096];
    na_cfg_t *cfg = NULL;
    const na_cfg_node_t *n;

    snprintf(path, sizeof(path), "%s/cluster-configs/test-1s.yaml", src_dir);
    NA_CHECK_OK(na_cfg_load(path, &cfg));
    if (cfg == NULL)
        return;
    NA_CHECK(cfg->n_nodes == 2 && cfg->n_compute == 1 && cfg->n_storage == 1);
    NA_CHECK(cfg->n_slots == 1 && cfg->slots[0].node == 1 && cfg->slots[0].dev == 0);
    /* defaults */
    NA_CHECK(cfg->model.kv_dtype == NA_CFG_KV_F16);
    NA_CHECK(cfg->nodes[0].port == 0 && cfg->nodes[0].threads == 1);
    NA_CHECK(cfg->nodes[0].device == NA_CFG_DEV_CPU);
    NA_CHECK(cfg->nodes[1].devices[0].engine == NA_CFG_ENGINE_CPU);
    NA_CHECK(cfg->nodes[1].devices[0].threads == 1);
    NA_CHECK(cfg->parallel.pipelining == NA_CFG_PIPE_FIXED && cfg->parallel.max_batch == 64);
    NA_CHECK(cfg->kv.prefetch_layers == 1 && cfg->kv.tier == NA_CFG_TIER_AUTO);
    NA_CHECK(!cfg->xcache.enabled && cfg->xcache.host_mb == 0 && cfg->xcache.share == 0.5);
    NA_CHECK(cfg->transport.tls_kind == NA_CFG_TLS_AUTO);
    /* values as written */
    NA_CHECK(cfg->kv.block_tokens == 16 && cfg->kv.spill_interval == 1);
    NA_CHECK(cfg->transport.heartbeat_ms == 200 && cfg->transport.peer_timeout_ms == 2000);
    NA_CHECK(!strcmp(cfg->cluster.name, "test-1s"));
    /* the development secret, resolved relative to the layout */
    NA_CHECK(cfg->secret_is_dev && cfg->secret_len >= 16);
    NA_CHECK(cfg->cluster.secret_file[0] == '/');
    NA_CHECK(strstr(cfg->cluster.secret_file, "cluster-configs/dev.secret") != NULL);
    NA_CHECK(cfg->model.path != NULL && strstr(cfg->model.path, "models/stories260K.bin"));
    /* ${NA_KV_DIR} expanded, not created (the node creates it when it starts) */
    NA_CHECK(strstr(cfg->nodes[1].devices[0].path, "test-1s/s0d0") != NULL);
    NA_CHECK(access(cfg->nodes[1].devices[0].path, F_OK) != 0);
    /* lookups */
    n = na_cfg_find_node(cfg, "s0");
    NA_CHECK(n != NULL && n->role == NA_CFG_ROLE_STORAGE && n->index == 0 && n->rank == 1);
    NA_CHECK(n != NULL && n->port == 13341 && n->is_local);
    n = na_cfg_find_node(cfg, "c0");
    NA_CHECK(n != NULL && n->role == NA_CFG_ROLE_COMPUTE && n->rank == 0);
    NA_CHECK(na_cfg_find_node(cfg, "s9") == NULL);
    NA_CHECK(na_cfg_node_at(cfg, 1) == &cfg->nodes[1] && na_cfg_node_at(cfg, 2) == NULL);
    na_cfg_destroy(cfg);

    snprintf(path, sizeof(path), "%s/cluster-configs/test-tcp.yaml", src_dir);
    NA_CHECK_OK(na_cfg_load(path, &cfg));
    if (cfg != NULL) {
        NA_CHECK(cfg->transport.tls_kind == NA_CFG_TLS_TCP);
        na_cfg_destroy(cfg);
    }
    snprintf(path, sizeof(path), "%s/cluster-configs/test-shm.yaml", src_dir);
    NA_CHECK_OK(na_cfg_load(path, &cfg));
    if (cfg != NULL) {
        NA_CHECK(cfg->transport.tls_kind == NA_CFG_TLS_SHM);
        na_cfg_destroy(cfg);
    }
    snprintf(path, sizeof(path), "%s/cluster-configs/test-head.yaml", src_dir);
    NA_CHECK_OK(na_cfg_load(path, &cfg));
    if (cfg != NULL) {
        NA_CHECK(cfg->parallel.partition == NA_CFG_PARTITION_HEAD && cfg->n_slots == 4);
        NA_CHECK(cfg->slots[3].node == 2 && cfg->slots[3].dev == 1);
        NA_CHECK(cfg->nodes[2].first_slot == 2);
        na_cfg_destroy(cfg);
    }
    snprintf(path, sizeof(path), "%s/cluster-configs/rack-example.yaml", src_dir);
    NA_CHECK_OK(na_cfg_load(path, &cfg));
    if (cfg != NULL) {
        NA_CHECK(cfg->n_compute == 2 && cfg->n_storage == 4 && cfg->n_slots == 16);
        NA_CHECK(!cfg->nodes[2].is_local);
        NA_CHECK(cfg->nodes[5].devices[3].engine == NA_CFG_ENGINE_CSD);
        NA_CHECK(cfg->parallel.pipelining == NA_CFG_PIPE_ROTATIONAL);
        /* remote hosts with engines not built here: loads, the plan warns */
        {
            char *plan = NULL;
            size_t plan_len = 0;
            FILE *f = open_memstream(&plan, &plan_len);
            if (f != NULL) {
                na_cfg_print_plan(cfg, f);
                fclose(f);
#if !NA_HAVE_CSD_ENGINE
                NA_CHECK(strstr(plan, "WARNING: engine csd is not built into this nearattn "
                                      "(available: cpu") != NULL);
#endif
                NA_CHECK((strstr(plan, "WARNING: device cuda is not built") != NULL) ==
                         !NA_HAVE_CUDA);
                free(plan);
            }
        }
        na_cfg_destroy(cfg);
    }
}

static void test_head_split(void)
{
    int first, count, s, total, next;

    /* 8 heads over 3 slots: 3, 3, 2 */
    na_cfg_head_split(8, 3, 0, &first, &count);
    NA_CHECK(first == 0 && count == 3);
    na_cfg_head_split(8, 3, 2, &first, &count);
    NA_CHECK(first == 6 && count == 2);
    /* more slots than heads: the tail gets none */
    na_cfg_head_split(2, 4, 3, &first, &count);
    NA_CHECK(count == 0);
    for (s = 1; s <= 17; s++) {
        total = 0;
        next = 0;
        for (int i = 0; i < s; i++) {
            na_cfg_head_split(13, s, i, &first, &count);
            NA_CHECK(count == 0 || first == next);
            next = first + count;
            total += count;
        }
        NA_CHECK(total == 13);
    }
}

/* Every .yaml file in cluster-configs/ loads and its plan prints. */
static void test_all_layouts(void)
{
    char dir[2304], path[4096];
    struct dirent *e;
    DIR *d;
    int n = 0;

    snprintf(dir, sizeof(dir), "%s/cluster-configs", src_dir);
    d = opendir(dir);
    NA_CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        na_cfg_t *cfg = NULL;
        char *plan = NULL;
        size_t plan_len = 0;
        FILE *f;

        if (len < 6 || strcmp(e->d_name + len - 5, ".yaml") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (!NA_HAVE_CSD_ENGINE && !strcmp(e->d_name, "local-csd.yaml")) {
            /* CSD slots on this machine: refused as not built (docs/csd.md) */
            NA_CHECK(na_cfg_load(path, &cfg) == NA_ERR_UNSUPPORTED && cfg == NULL);
            NA_CHECK_MSG(strstr(na_errmsg(), "engine csd is not built") != NULL, "%s",
                         na_errmsg());
            continue;
        }
        NA_CHECK_OK(na_cfg_load(path, &cfg));
        if (cfg == NULL)
            continue;
        n++;
        f = open_memstream(&plan, &plan_len);
        na_cfg_print_plan(cfg, f);
        fclose(f);
        NA_CHECK_MSG(strstr(plan, "nodes (rank") && strstr(plan, "slot 0"),
                     "%s: plan lacks nodes/slots", e->d_name);
        if (!strcmp(e->d_name, "test-head.yaml") && na_test_shared_model("stories260K.bin"))
            NA_CHECK_MSG(strstr(plan, "KV heads 3..3") != NULL, "%s: no heads in plan:\n%s",
                         e->d_name, plan);
        free(plan);
        na_cfg_destroy(cfg);
    }
    closedir(d);
    NA_CHECK_MSG(n >= 7, "only %d layouts in cluster-configs/", n);
}

static void doc_key_cb(const char *key, void *ctx)
{
    const char *doc = ctx;
    char quoted[300];

    snprintf(quoted, sizeof(quoted), "`%s`", key);
    NA_CHECK_MSG(strstr(doc, quoted) != NULL, "docs/config.md does not document %s", quoted);
}

/* docs/config.md names every key of the schema as `dotted.key`. */
static void test_docs_cover_schema(void)
{
    char path[4096];
    char *doc;
    size_t len = 0;

    snprintf(path, sizeof(path), "%s/docs/config.md", src_dir);
    doc = na_test_read_file(path, &len);
    NA_CHECK_MSG(doc != NULL, "cannot read %s", path);
    if (doc != NULL)
        na_cfg_schema_foreach(doc_key_cb, doc);
    free(doc);
}

int main(void)
{
    const char *s = getenv("NA_SOURCE_DIR");
    char tmp[1024];

    snprintf(src_dir, sizeof(src_dir), "%s", s && s[0] ? s : ".");
    NA_CHECK(na_test_tmpdir(tmp, sizeof(tmp)) == 0);
    snprintf(kv_dir, sizeof(kv_dir), "%s/kv", tmp);
    setenv("NA_KV_DIR", kv_dir, 1);
    unsetenv("NA_TEST_SURELY_UNSET_VARIABLE");

    test_bad_cases();
    test_runtime_cases(tmp);
    test_escaped_value(tmp);
    test_too_large(tmp);
    test_str_tag(tmp);
    test_good_details();
    test_head_split();
    test_all_layouts();
    test_docs_cover_schema();

    na_test_rmtree(tmp);
    return na_test_finish();
}
