/* cli/plot.c — gnuplot PNGs of the comparison sweep, written beside its JSON
 * (cli/e2e_sweep.h). For JSON "dir/stem.json":
 *
 *   stem-throughput.png   decode tokens/s vs batch, one series of points per
 *                         (link, mode), at the smallest context and one storage
 *                         node; points only (no line through batch sizes that
 *                         were not measured), x tics at the measured sizes
 *   stem-breakdown.png    per-step time split (compute / network / attention /
 *                         disk / idle) per mode, stacked, at the largest batch
 *                         of the first link, smallest context
 *   stem-speedup.png      tokens/s over kv-fetch vs context, per (link, mode)
 *   stem-ablation.png     offload, +wb, +pipe, +xcache relative to offload, per
 *                         link, at the largest batch and smallest context; a
 *                         variant not measured has no bar and is named "not
 *                         measured" under its group (never an empty bar read
 *                         as 0)
 *
 * Every figure says the 1-minute load average its points were measured
 * under (lowest and highest over them, a line at the bottom).
 * The .dat and .gp files stay beside the PNGs so a figure can be redrawn or
 * restyled by hand (gnuplot stem-throughput.gp). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/e2e_sweep.h"

/* "dir/stem" of a JSON path, into out. */
static void pl_stem(const char *json, char *out, size_t cap)
{
    const char *dot = strrchr(json, '.'), *sl = strrchr(json, '/');
    size_t n = dot != NULL && (sl == NULL || dot > sl) ? (size_t)(dot - json) : strlen(json);
    if (n >= cap)
        n = cap - 1;
    memcpy(out, json, n);
    out[n] = '\0';
}

static int pl_run(const char *gp)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "gnuplot '%s' 2>&1", gp);
    return system(cmd) == 0;
}

static const char *pl_head =
    "set terminal pngcairo size 1000,620 font 'sans,11'\n"
    "set grid ytics lc rgb '#dddddd'\nset key outside right top\n";

/* Smallest context / largest batch among ok points of link lk (or any, -1). */
static void pl_extent(const na_e2e_point_t *p, const int *pl, int n, int lk, int *cmin, int *bmax)
{
    int i;
    *cmin = 1 << 30;
    *bmax = 0;
    for (i = 0; i < n; i++) {
        if (!p[i].ok || (lk >= 0 && pl[i] != lk))
            continue;
        if (p[i].ctx < *cmin)
            *cmin = p[i].ctx;
        if (p[i].batch > *bmax)
            *bmax = p[i].batch;
    }
}

/* The points the sweep figures compare, one input of them all. */
typedef struct {
    const na_e2e_point_t *p;
    const int            *pl;      /* link index of each point */
    const char *const    *links;
    int                   n, n_links;
    const char           *stem;    /* "dir/stem" of the JSON */
    char                  load[96]; /* gnuplot line naming the load average range */
} pl_in_t;

/* Point i is ok, of link l and mode m, at context ctx on one storage node. */
static int pl_at(const pl_in_t *in, int i, int l, int m, int ctx)
{
    const na_e2e_point_t *q = &in->p[i];
    return q->ok && in->pl[i] == l && q->mode == m && q->ctx == ctx && q->nodes <= 1;
}

/* One figure's data and gnuplot script, "STEM-NAME.dat" and ".gp", both open
 * for writing (0 when either cannot be). */
typedef struct {
    char  dat[700], gp[700];
    FILE *d, *s;
} pl_fig_t;

static int pl_open(pl_fig_t *fig, const char *stem, const char *name)
{
    snprintf(fig->dat, sizeof(fig->dat), "%s-%s.dat", stem, name);
    snprintf(fig->gp, sizeof(fig->gp), "%s-%s.gp", stem, name);
    fig->d = fopen(fig->dat, "w");
    fig->s = fopen(fig->gp, "w");
    if (fig->d != NULL && fig->s != NULL)
        return 1;
    if (fig->d) fclose(fig->d);
    if (fig->s) fclose(fig->s);
    return 0;
}

/* Close both files and draw the figure when it has content: 1 for a PNG made. */
static int pl_close(pl_fig_t *fig, int draw)
{
    fclose(fig->d);
    fclose(fig->s);
    return draw && pl_run(fig->gp);
}

/* 1. throughput vs batch: one block per (link, mode) with >= 2 batches */
static int pl_throughput(const pl_in_t *in)
{
    pl_fig_t fig;
    int blocks = 0, i, l, m, cmin, bmax;

    int bs[64], n_bs = 0, k;

    if (!pl_open(&fig, in->stem, "throughput"))
        return 0;
    pl_extent(in->p, in->pl, in->n, -1, &cmin, &bmax);
    /* x tics at the batch sizes measured, nowhere else */
    for (i = 0; i < in->n && n_bs < 64; i++) {
        int seen = 0;
        if (!in->p[i].ok || in->p[i].ctx != cmin || in->p[i].nodes > 1)
            continue;
        for (k = 0; k < n_bs; k++)
            seen |= bs[k] == in->p[i].batch;
        if (!seen)
            bs[n_bs++] = in->p[i].batch;
    }
    fprintf(fig.s, "%s%sset output '%s-throughput.png'\nset title 'decode throughput vs batch "
                   "(smallest context, 1 storage node; measured batch sizes only)'\nset xlabel "
                   "'batch'\nset ylabel 'tokens/s (log)'\nset logscale x 2\nset logscale y 10\n"
                   "set offsets graph 0.05, graph 0.05, 0, 0\nset xtics (", pl_head, in->load,
            in->stem);
    for (k = 0; k < n_bs; k++)
        fprintf(fig.s, "%s%d", k ? ", " : "", bs[k]);
    fprintf(fig.s, ")\nplot ");
    for (l = 0; l < in->n_links; l++)
        for (m = 0; m < NA_E2E_N_MODES; m++) {
            int cnt = 0;
            for (i = 0; i < in->n; i++)
                cnt += pl_at(in, i, l, m, cmin);
            if (cnt < 2)
                continue;
            fprintf(fig.d, "# %s %s\n", in->links[l], na_e2e_mode_name((na_e2e_mode_t)m));
            for (i = 0; i < in->n; i++)
                if (pl_at(in, i, l, m, cmin))
                    fprintf(fig.d, "%d %.6g\n", in->p[i].batch, in->p[i].tok_s);
            fprintf(fig.d, "\n\n");
            /* points only: a line would pass through batch sizes never run;
             * colour by mode, point shape by link */
            fprintf(fig.s, "%s'%s' index %d with points ps 1.6 lc %d pt %d title '%s %s'",
                    blocks ? ", \\\n     " : "", fig.dat, blocks, m + 1, 5 + 2 * l, in->links[l],
                    na_e2e_mode_name((na_e2e_mode_t)m));
            blocks++;
        }
    fprintf(fig.s, "\n");
    return pl_close(&fig, blocks > 0);
}

/* 2. time breakdown per mode: first link with points, largest batch */
static int pl_breakdown(const pl_in_t *in)
{
    const na_e2e_point_t *p = in->p;
    pl_fig_t fig;
    int made = 0, any = 0, i, l, m;

    for (l = 0; l < in->n_links && !any; l++) {
        int cmin, bmax;
        pl_extent(p, in->pl, in->n, l, &cmin, &bmax);
        if (bmax == 0)
            continue;
        if (!pl_open(&fig, in->stem, "breakdown"))
            break;
        fprintf(fig.d, "mode compute network attention disk idle/other\n");
        for (m = 0; m < NA_E2E_N_MODES; m++)
            for (i = 0; i < in->n; i++) {
                if (pl_at(in, i, m == NA_E2E_MONO ? in->n_links - 1 : l, m, cmin) && p[i].batch == bmax) {
                    fprintf(fig.d, "\"%s\" %.6g %.6g %.6g %.6g %.6g\n",
                            na_e2e_mode_name((na_e2e_mode_t)m), 1e3 * p[i].compute_s,
                            1e3 * p[i].net_s, 1e3 * p[i].attn_s, 1e3 * p[i].disk_s,
                            1e3 * p[i].idle_s);
                    any = 1;
                    break;
                }
            }
        fprintf(fig.s, "%s%sset output '%s-breakdown.png'\nset title 'decode step time split, link "
                       "%s, batch %d, context %d (monolithic: local)'\nset ylabel 'ms per step'\n"
                       "set style data histograms\nset style histogram rowstacked\nset style fill "
                       "solid 0.85 border -1\nset boxwidth 0.7\nset xtics rotate by -20\n"
                       "plot for [k=2:6] '%s' using k:xtic(1) title columnhead\n",
                pl_head, in->load, in->stem, in->links[l], bmax, cmin, fig.dat);
        made += pl_close(&fig, any);
    }
    return made;
}

/* The kv-fetch tokens/s of the same link, batch, context and nodes as point
 * c, or 0 when that point is missing. */
static double pl_kvfetch(const pl_in_t *in, int c, int l)
{
    const na_e2e_point_t *p = in->p;
    int i;
    for (i = 0; i < in->n; i++)
        if (p[i].ok && in->pl[i] == l && p[i].mode == NA_E2E_KVFETCH && p[i].batch == p[c].batch &&
            p[i].ctx == p[c].ctx && p[i].nodes == p[c].nodes && p[i].tok_s > 0)
            return p[i].tok_s;
    return 0;
}

/* 3. speedup over kv-fetch vs context, per (link, mode) */
static int pl_speedup(const pl_in_t *in)
{
    const na_e2e_point_t *p = in->p;
    pl_fig_t fig;
    int blocks = 0, l, m, bb, c;

    if (!pl_open(&fig, in->stem, "speedup"))
        return 0;
    fprintf(fig.s, "%s%sset output '%s-speedup.png'\nset title 'speedup over kv-fetch vs context "
                   "(same link, batch, nodes)'\nset xlabel 'context (tokens)'\nset ylabel "
                   "'tokens/s / kv-fetch tokens/s'\nset logscale x 2\nset yrange [0:*]\nplot ",
            pl_head, in->load, in->stem);
    for (l = 0; l < in->n_links; l++)
        for (m = NA_E2E_OFF; m < NA_E2E_N_MODES; m++)
            for (bb = 0; bb < in->n; bb++) {
                int cnt = 0, k2, dup = 0;
                char buf[4096];
                size_t used = 0;
                /* one line per batch size: the first point of each batch */
                if (!p[bb].ok || in->pl[bb] != l || p[bb].mode != m)
                    continue;
                for (k2 = 0; k2 < bb; k2++)
                    dup |= p[k2].ok && in->pl[k2] == l && p[k2].mode == m &&
                           p[k2].batch == p[bb].batch;
                if (dup)
                    continue;
                buf[0] = '\0';
                for (c = 0; c < in->n; c++) {
                    double base;
                    if (!p[c].ok || in->pl[c] != l || p[c].mode != m || p[c].batch != p[bb].batch)
                        continue;
                    if ((base = pl_kvfetch(in, c, l)) > 0 && used < sizeof(buf) - 64) {
                        used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%d %.6g\n",
                                                 p[c].ctx, p[c].tok_s / base);
                        cnt++;
                    }
                }
                if (cnt < 2)
                    continue;
                fprintf(fig.d, "# %s %s B=%d\n%s\n\n", in->links[l],
                        na_e2e_mode_name((na_e2e_mode_t)m), p[bb].batch, buf);
                fprintf(fig.s, "%s'%s' index %d with linespoints lw 2 title '%s %s B=%d'",
                        blocks ? ", \\\n     " : "", fig.dat, blocks, in->links[l],
                        na_e2e_mode_name((na_e2e_mode_t)m), p[bb].batch);
                blocks++;
            }
    fprintf(fig.s, "%s1 with lines dt 2 lc rgb 'black' title 'kv-fetch'\n", blocks ? ", \\\n     " : "");
    return pl_close(&fig, blocks > 0);
}

/* 4. ablation bars: offload .. +xcache relative to offload, per link */
static int pl_ablation(const pl_in_t *in)
{
    const na_e2e_point_t *p = in->p;
    pl_fig_t fig;
    int rows = 0, i, l;

    if (!pl_open(&fig, in->stem, "ablation"))
        return 0;
    static const char *const var[4] = { "offload", "+wb", "+wb+pipe", "+wb+pipe+xcache" };
    int col_any[4] = { 1, 0, 0, 0 }, k, first = 1;

    fprintf(fig.d, "link offload +wb +wb+pipe +wb+pipe+xcache\n");
    for (l = 0; l < in->n_links; l++) {
        int cmin, bmax;
        double v[4] = { 0, 0, 0, 0 };
        char label[160], missing[96] = "";
        pl_extent(p, in->pl, in->n, l, &cmin, &bmax);
        for (i = 0; i < in->n; i++)
            if (p[i].ok && in->pl[i] == l && p[i].mode >= NA_E2E_OFF && p[i].batch == bmax &&
                p[i].ctx == cmin && p[i].nodes <= 1)
                v[p[i].mode - NA_E2E_OFF] = p[i].tok_s;
        if (v[0] <= 0 || (v[1] <= 0 && v[2] <= 0))
            continue;
        /* an unmeasured variant: "?" (gnuplot draws no bar) and named below
         * the group, so that its absence is not read as 0 */
        for (k = 1; k < 4; k++)
            if (v[k] <= 0)
                snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), "%s%s",
                         missing[0] ? ", " : "", var[k]);
        snprintf(label, sizeof(label), "%s B=%d%s%s%s", in->links[l], bmax,
                 missing[0] ? " (not measured: " : "", missing, missing[0] ? ")" : "");
        fprintf(fig.d, "\"%s\" 1", label);
        for (k = 1; k < 4; k++) {
            if (v[k] > 0)
                fprintf(fig.d, " %.4g", v[k] / v[0]);
            else
                fprintf(fig.d, " ?");
            col_any[k] |= v[k] > 0;
        }
        fprintf(fig.d, "\n");
        rows++;
    }
    fprintf(fig.s, "%s%sset output '%s-ablation.png'\nset title 'ablation: tokens/s relative to "
                   "offload (smallest context, 1 storage node; no bar: not measured)'\n"
                   "set ylabel 'relative tokens/s'\nset datafile missing '?'\n"
                   "set style data histograms\nset style histogram clustered gap 1\nset style "
                   "fill solid 0.85 border -1\nset yrange [0:*]\nset xtics rotate by -10\nplot ",
            pl_head, in->load, in->stem);
    /* a variant measured on no link is left out (its column holds no number) */
    for (k = 0; k < 4; k++)
        if (col_any[k]) {
            fprintf(fig.s, "%s'%s' using %d%s title columnhead(%d) lc %d", first ? "" : ", ",
                    fig.dat, k + 2, first ? ":xtic(1)" : "", k + 2, k + 1);
            first = 0;
        }
    fprintf(fig.s, "\n");
    return pl_close(&fig, rows > 0);
}

int na_e2e_plot(const char *json_path, const na_e2e_point_t *p, const char *const *links,
                const int *pl, int n, int n_links)
{
    char stem[600];
    pl_in_t in = { p, pl, links, n, n_links, stem, "" };
    double lo = -1, hi = -1;
    int made, i;

    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "bench e2e: gnuplot not found (scripts/deps.txt: gnuplot-nox): no PNGs\n");
        return 0;
    }
    pl_stem(json_path, stem, sizeof(stem));
    for (i = 0; i < n; i++)
        if (p[i].ok && p[i].load1 >= 0) {
            lo = lo < 0 || p[i].load1 < lo ? p[i].load1 : lo;
            hi = p[i].load1 > hi ? p[i].load1 : hi;
        }
    if (lo >= 0)
        snprintf(in.load, sizeof(in.load), "set label 'load average (1 min) while measured: "
                 "%.2f to %.2f' at screen 0.01, 0.02 font ',9'\n", lo, hi);
    else
        snprintf(in.load, sizeof(in.load), "set label 'load average: unknown' at screen 0.01, "
                 "0.02 font ',9'\n");
    made = pl_throughput(&in) + pl_breakdown(&in) + pl_speedup(&in) + pl_ablation(&in);
    printf("wrote %d PNG(s) beside %s (%s-*.png)\n", made, json_path, stem);
    return made;
}
