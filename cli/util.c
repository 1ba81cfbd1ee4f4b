/* cli/util.c — argument parsing and small helpers shared by the subcommands. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/dtype.h"
#include "common/model.h"
#include "common/tokenizer.h"

volatile sig_atomic_t na_cli_stop;

static void na_cli_on_signal(int sig)
{
    na_cli_stop = sig;
}

void na_cli_catch_stop(int extra)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = na_cli_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (extra != 0)
        sigaction(extra, &sa, NULL);
}

/* Parse all of val by strtol (l_p) or strtod (d_p): 1 when it is a number,
 * 0 when it is not, -1 (said so) when val is NULL because the flag came last. */
static int na_cli_scan(const char *cmd, const char *flag, const char *val, long *l_p, double *d_p)
{
    char *end;

    if (val == NULL) {
        fprintf(stderr, "nearattn %s: %s needs a value\n", cmd, flag);
        return -1;
    }
    errno = 0;
    if (l_p)
        *l_p = strtol(val, &end, 10);
    else
        *d_p = strtod(val, &end);
    return errno == 0 && end != val && *end == '\0';
}

na_status_t na_cli_int(const char *cmd, const char *flag, const char *val,
                       long lo, long hi, long *out)
{
    long v = 0;
    int ok = na_cli_scan(cmd, flag, val, &v, NULL);

    if (ok == 1 && v >= lo && v <= hi) {
        *out = v;
        return NA_OK;
    }
    if (ok >= 0)
        fprintf(stderr, "nearattn %s: %s expects a whole number in [%ld, %ld], got '%s'\n",
                cmd, flag, lo, hi, val);
    return NA_ERR_INVALID;
}

int na_cli_num(const char *cmd, const na_cli_num_t *t, size_t n, int argc, char **argv, int *i)
{
    const char *f = argv[*i];
    size_t k;
    long v;

    for (k = 0; k < n && strcmp(f, t[k].flag); k++)
        ;
    if (k == n)
        return 0;
    if (na_cli_int(cmd, f, *i + 1 < argc ? argv[*i + 1] : NULL, t[k].lo, t[k].hi, &v) != NA_OK)
        return 2;
    *t[k].v = (int)v;
    ++*i;
    return 1;
}

int na_cli_switch(const na_cli_switch_t *t, size_t n, const char *arg)
{
    size_t k;

    for (k = 0; k < n; k++)
        if (!strcmp(arg, t[k].flag)) {
            *t[k].v = t[k].set;
            return 1;
        }
    return 0;
}

int na_cli_str(const char *cmd, const na_cli_str_t *t, size_t n, int argc, char **argv, int *i)
{
    size_t k;

    for (k = 0; k < n && strcmp(argv[*i], t[k].flag); k++)
        ;
    if (k == n)
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "nearattn %s: %s needs a value\n", cmd, argv[*i]);
        return 2;
    }
    *t[k].v = argv[++*i];
    return 1;
}

int na_cli_ints(const char *s, long lo, long hi, int *v, int cap)
{
    int n = 0;

    while (*s != '\0') {
        char *end;
        long x;

        errno = 0;
        x = strtol(s, &end, 10);
        if (errno != 0 || end == s || x < lo || x > hi || n == cap ||
            (*end != ',' && *end != '\0'))
            return -1;
        v[n++] = (int)x;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

int na_cli_list_opt(const char *cmd, const na_cli_list_opt_t *t, size_t n, int argc,
                    char **argv, int *i)
{
    const char *f = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    size_t k;
    int got;

    for (k = 0; k < n && strcmp(f, t[k].flag); k++)
        ;
    if (k == n)
        return 0;
    got = val == NULL ? -1 : t[k].zero && !strcmp(val, "0") ? 0
        : na_cli_ints(val, t[k].lo, t[k].hi, t[k].v, t[k].cap);
    if (got < 0 || (got == 0 && !t[k].zero)) {
        fprintf(stderr, "nearattn %s: %s expects a list like 1,2,4 (each %ld..%ld, at most %d)%s\n",
                cmd, f, t[k].lo, t[k].hi, t[k].cap, t[k].zero ? ", or 0 for none" : "");
        return 2;
    }
    *t[k].n = got;
    ++*i;
    return 1;
}

na_status_t na_cli_float(const char *cmd, const char *flag, const char *val,
                         double lo, double hi, double *out)
{
    double v = 0;
    int ok = na_cli_scan(cmd, flag, val, NULL, &v) == 1 && isfinite(v) && v >= lo && v <= hi;

    if (!ok && val != NULL)
        fprintf(stderr, "nearattn %s: %s expects a number in [%g, %g], got '%s'\n",
                cmd, flag, lo, hi, val);
    else if (ok)
        *out = v;
    return ok ? NA_OK : NA_ERR_INVALID;
}

const char *const na_cli_modes[3] = { "offload", "monolithic", "kv-fetch" };
const char *const na_cli_clusters[3] = { "start", "connect", "inproc" };
const char *const na_cli_backends[4] = { "cpu", "ref", "cuda", "cuda:N" };

int na_cli_one_of(const char *cmd, const char *what, const char *v, const char *const *names,
                  int n)
{
    int k;

    for (k = 0; k < n; k++) {
        size_t len = strlen(names[k]);
        if (len >= 2 && !strcmp(names[k] + len - 2, ":N") ? !strncmp(v, names[k], len - 1)
                                                          : !strcmp(v, names[k]))
            return 0;
    }
    fprintf(stderr, "nearattn %s: unknown %s '%s' (use ", cmd, what, v);
    for (k = 0; k < n; k++)
        fprintf(stderr, "%s%s", k == 0 ? "" : k + 1 < n ? ", " : " or ", names[k]);
    fprintf(stderr, ")\n");
    return 2;
}

/* The engine options kept as given, and where they go. */
static const char *const na_cli_engine_strs[] = { "--mode", "--config", "--cluster", "--model",
                                                  "--tokenizer", "--backend" };

int na_cli_engine_flag(const char *f)
{
    size_t k;

    for (k = 0; k < sizeof(na_cli_engine_strs) / sizeof(na_cli_engine_strs[0]); k++)
        if (!strcmp(f, na_cli_engine_strs[k]))
            return 1;
    return !strcmp(f, "--threads") || !strcmp(f, "--kv-dtype");
}

int na_cli_engine_opt(const char *cmd, na_cli_engine_args_t *e, const char *f, const char *v)
{
    const char **str[] = { &e->mode, &e->config, &e->cluster, &e->model, &e->tokenizer,
                           &e->backend };
    size_t k;
    int d;

    for (k = 0; k < sizeof(str) / sizeof(str[0]); k++)
        if (!strcmp(f, na_cli_engine_strs[k])) {
            *str[k] = v;
            return 0;
        }
    if (!strcmp(f, "--threads"))
        return na_cli_int(cmd, f, v, 1, 1024, &e->threads) != NA_OK ? 2 : 0;
    if (na_cli_kv_dtype(cmd, v, &d) != NA_OK)           /* --kv-dtype */
        return 2;
    e->kv_dtype = (na_dtype_t)d;
    e->kv_dtype_given = 1;
    return 0;
}

int na_cli_fail(const char *cmd, na_status_t st)
{
    const char *msg = na_errmsg();
    fprintf(stderr, "nearattn %s: %s\n", cmd, msg[0] ? msg : na_status_string(st));
    return 1;
}

void na_cli_request_failed(const char *cmd, const char *what, int id, na_status_t st,
                           const char *why, int *failed)
{
    ++*failed;
    fprintf(stderr, "nearattn %s: %s %d failed (%s): %s\n", cmd, what, id + 1,
            na_status_string(st), why);
}

int na_cli_dispatch(const na_cli_cmd_t *table, const char *prog, const char *what, int argc,
                    char **argv)
{
    const na_cli_cmd_t *c;
    for (c = table; c->name != NULL; c++)
        if (!strcmp(c->name, argv[1]))
            return c->main(argc - 1, argv + 1);
    fprintf(stderr, "%s: unknown %s '%s' (try '%s --help')\n", prog, what, argv[1], prog);
    return 2;
}

void na_cli_list(FILE *f, const na_cli_cmd_t *table, int width)
{
    const na_cli_cmd_t *c;
    for (c = table; c->name != NULL; c++)
        fprintf(f, "  %-*s %s\n", width, c->name, c->summary);
}

int na_cli_one_file(const char *cmd, const char **file_p, const char *arg,
                    void (*usage)(FILE *f))
{
    if (arg[0] == '-' && arg[1] != '\0') {
        fprintf(stderr, "nearattn %s: unknown option or missing value '%s'\n", cmd, arg);
        usage(stderr);
        return 2;
    }
    if (*file_p != NULL) {
        fprintf(stderr, "nearattn %s: one FILE expected, got '%s' and '%s'\n", cmd, *file_p, arg);
        return 2;
    }
    *file_p = arg;
    return 0;
}

const char *na_cli_name(const char *const *names, int n, int i)
{
    return i >= 0 && i < n ? names[i] : "?";
}

int na_cli_lookup(const char *const *names, int n, const char *s)
{
    int i;
    for (i = 0; i < n; i++)
        if (!strcmp(s, names[i]))
            return i;
    return -1;
}

const char *na_cli_shared_dir(void)
{
    static char buf[PATH_MAX + 64];
    char exe[PATH_MAX];
    const char *env = getenv("NA_SHARED_DIR");
    ssize_t n;
    int up;

    if (env != NULL && env[0] != '\0')
        return env;
    /* The binary sits in a build folder of the repository: walk up looking
     * for a sibling shared/ folder with models/ in it. */
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        for (up = 0; up < 5; up++) {
            char *slash = strrchr(exe, '/');
            if (slash == NULL || slash == exe)
                break;
            *slash = '\0';
            snprintf(buf, sizeof(buf), "%s/../shared/models", exe);
            if (access(buf, R_OK) == 0) {
                snprintf(buf, sizeof(buf), "%s/../shared", exe);
                return buf;
            }
        }
    }
    return "../shared";
}

/* The source tree holding cluster-configs/: $NA_SOURCE_DIR, else "." when
 * it has cluster-configs/local.yaml, else two levels above the executable
 * (build/cli/nearattn). */
const char *na_cli_source_dir(void)
{
    static char buf[2048];
    const char *s = getenv("NA_SOURCE_DIR");
    ssize_t len;
    int up;

    if (s != NULL && s[0])
        return s;
    if (access("cluster-configs/local.yaml", R_OK) == 0)
        return ".";
    len = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (len <= 0)
        return ".";
    buf[len] = '\0';
    for (up = 0; up < 3; up++) {
        char *slash = strrchr(buf, '/');
        if (slash == NULL)
            return ".";
        *slash = '\0';
    }
    return buf;
}

na_status_t na_cli_write_secret(const char *path)
{
    unsigned char key[32];
    char hex[2 * sizeof(key) + 2];
    size_t i;
    int fd;
    ssize_t w;

    if (getentropy(key, sizeof(key)) != 0)
        return na_err(NA_ERR_IO, "getentropy: %s", strerror(errno));
    for (i = 0; i < sizeof(key); i++)
        snprintf(hex + 2 * i, 3, "%02x", key[i]);
    hex[2 * sizeof(key)] = '\n';
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return na_err(NA_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    w = write(fd, hex, 2 * sizeof(key) + 1);
    if (close(fd) != 0 || w != (ssize_t)(2 * sizeof(key) + 1))
        return na_err(NA_ERR_IO, "cannot write %s", path);
    return NA_OK;
}

/* The key: the file's first line without surrounding blanks. The file must
 * be a regular file that only its owner may read or write (a key others can
 * read is no key); a first line that does not fit is refused, never cut. */
na_status_t na_cli_read_key(const char *path, const char *flag, char *key, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t n = 0, line;
    struct stat sb;
    ssize_t r;
    char *s;

    if (fd < 0)
        return na_err(NA_ERR_IO, "cannot read %s %s: %s", flag, path, strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return na_err(NA_ERR_INVALID, "%s %s: not a regular file", flag, path);
    }
    if (sb.st_mode & (S_IRWXG | S_IRWXO)) {
        close(fd);
        return na_err(NA_ERR_INVALID, "%s %s: readable or writable by other "
                      "users (mode %04o): chmod 600 it", flag, path, (unsigned)(sb.st_mode & 07777));
    }
    while (n < cap && (r = read(fd, key + n, cap - n)) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return na_err(NA_ERR_IO, "read(%s %s): %s", flag, path, strerror(e));
        }
        n += (size_t)r;
    }
    close(fd);
    for (line = 0; line < n && key[line] != '\n'; line++)
        ;
    if (line == cap)                     /* no end of line in cap bytes */
        return na_err(NA_ERR_RANGE, "%s %s: the key (first line) is longer than "
                      "%zu bytes", flag, path, cap - 1);
    if (memchr(key, '\0', line) != NULL)
        return na_err(NA_ERR_INVALID, "%s %s: the key holds a NUL byte", flag, path);
    key[line] = '\0';
    s = key;
    while (*s == ' ' || *s == '\t')
        s++;
    memmove(key, s, strlen(s) + 1);
    n = strlen(key);
    while (n > 0 && (key[n - 1] == '\r' || key[n - 1] == ' ' || key[n - 1] == '\t'))
        key[--n] = '\0';
    if (n < 8)
        return na_err(NA_ERR_INVALID, "%s %s: the key (first line) must have at "
                      "least 8 characters", flag, path);
    return NA_OK;
}

na_status_t na_cli_open_tokenizer(const char *given, const struct na_model *m,
                                  const char *model_path, char *tok_path, size_t cap,
                                  struct na_tokenizer **tok)
{
    na_status_t st;

    if (given == NULL && tok_path[0] != '\0')
        given = tok_path;
    st = na_tokenizer_open_for_model(m, model_path, given, tok_path, cap, tok);
    if (st != NA_OK)
        return st;
    if (na_tokenizer_vocab_size(*tok) != m->cfg.vocab_size)
        return na_err(NA_ERR_FORMAT, "tokenizer %s has %d tokens but model %s has vocab_size %d",
                      tok_path[0] ? tok_path : model_path, na_tokenizer_vocab_size(*tok),
                      model_path, m->cfg.vocab_size);
    return NA_OK;
}

na_status_t na_cli_kv_dtype(const char *cmd, const char *v, int *dt)
{
    int d = na_dtype_parse(v);

    if (d != NA_DTYPE_F16 && d != NA_DTYPE_BF16 && d != NA_DTYPE_F32) {
        fprintf(stderr, "nearattn %s: --kv-dtype expects f16, bf16 or f32, got '%s'\n", cmd, v);
        return NA_ERR_INVALID;
    }
    *dt = d;
    return NA_OK;
}
