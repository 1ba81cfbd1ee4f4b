/* cli/plot.c — gnuplot PNGs of the comparison sweep, written beside its JSON
 * (cli/e2e_sweep.h). For JSON "dir/stem.json":
 *
 *   stem-throughput.png   decode tokens/s vs batch, one line per (link, mode),
 *                         at the smallest context and one storage node
 *   stem-breakdown.png    per-step time split (compute / network / attention /
 *                         disk / idle) per mode, stacked, at the largest batch
 *                         of the first link, smallest context
 *   stem-speedup.png      tokens/s over kv-fetch vs context, per (link, mode)
 *   stem-ablation.png     offload, +wb, +pipe, +xcache relative to offload, per
 *                         link, at the largest batch and smallest context
 *
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

int na_e2e_plot(const char *json_path, const na_e2e_point_t *p, const char *const *links,
                const int *pl, int n, int n_links)
{
    char stem[600], f[700], g[700];
    FILE *d, *s;
    int made = 0, i, l, m, c, bb, any;

    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "bench e2e: gnuplot not found (scripts/deps.txt: gnuplot-nox): no PNGs\n");
        return 0;
    }
    pl_stem(json_path, stem, sizeof(stem));

    /* 1. throughput vs batch: one block per (link, mode) with >= 2 batches */
    snprintf(f, sizeof(f), "%s-throughput.dat", stem);
    snprintf(g, sizeof(g), "%s-throughput.gp", stem);
    d = fopen(f, "w");
    s = fopen(g, "w");
    if (d != NULL && s != NULL) {
        int blocks = 0;
        fprintf(s, "%sset output '%s-throughput.png'\nset title 'decode throughput vs batch "
                   "(smallest context, 1 storage node)'\nset xlabel 'batch'\nset ylabel "
                   "'tokens/s (log)'\nset logscale x 2\nset logscale y 10\nplot ", pl_head, stem);
        for (l = 0; l < n_links; l++)
            for (m = 0; m < NA_E2E_N_MODES; m++) {
                int cmin, bmax, cnt = 0;
                pl_extent(p, pl, n, -1, &cmin, &bmax);
                for (i = 0; i < n; i++)
                    cnt += p[i].ok && pl[i] == l && p[i].mode == m && p[i].ctx == cmin &&
                           p[i].nodes <= 1;
                if (cnt < 2)
                    continue;
                fprintf(d, "# %s %s\n", links[l], na_e2e_mode_name((na_e2e_mode_t)m));
                for (i = 0; i < n; i++)
                    if (p[i].ok && pl[i] == l && p[i].mode == m && p[i].ctx == cmin &&
                        p[i].nodes <= 1)
                        fprintf(d, "%d %.6g\n", p[i].batch, p[i].tok_s);
                fprintf(d, "\n\n");
                /* colour and point by mode, dash by link */
                fprintf(s, "%s'%s' index %d with linespoints lw 2 lc %d pt %d dt %d title '%s %s'",
                        blocks ? ", \\\n     " : "", f, blocks, m + 1, m + 1, l + 1, links[l],
                        na_e2e_mode_name((na_e2e_mode_t)m));
                blocks++;
            }
        fprintf(s, "\n");
        fclose(d);
        fclose(s);
        d = s = NULL;
        made += blocks > 0 && pl_run(g);
    }
    if (d) fclose(d);
    if (s) fclose(s);

    /* 2. time breakdown per mode: first link with points, largest batch */
    snprintf(f, sizeof(f), "%s-breakdown.dat", stem);
    snprintf(g, sizeof(g), "%s-breakdown.gp", stem);
    for (l = 0, any = 0; l < n_links && !any; l++) {
        int cmin, bmax;
        pl_extent(p, pl, n, l, &cmin, &bmax);
        if (bmax == 0)
            continue;
        d = fopen(f, "w");
        s = fopen(g, "w");
        if (d == NULL || s == NULL) {
            if (d) fclose(d);
            if (s) fclose(s);
            break;
        }
        fprintf(d, "mode compute network attention disk idle/other\n");
        for (m = 0; m < NA_E2E_N_MODES; m++)
            for (i = 0; i < n; i++) {
                int li = m == NA_E2E_MONO ? n_links - 1 : l;
                if (p[i].ok && pl[i] == li && p[i].mode == m && p[i].batch == bmax &&
                    p[i].ctx == cmin && p[i].nodes <= 1) {
                    fprintf(d, "\"%s\" %.6g %.6g %.6g %.6g %.6g\n",
                            na_e2e_mode_name((na_e2e_mode_t)m), 1e3 * p[i].compute_s,
                            1e3 * p[i].net_s, 1e3 * p[i].attn_s, 1e3 * p[i].disk_s,
                            1e3 * p[i].idle_s);
                    any = 1;
                    break;
                }
            }
        fprintf(s, "%sset output '%s-breakdown.png'\nset title 'decode step time split, link "
                   "%s, batch %d, context %d (monolithic: local)'\nset ylabel 'ms per step'\n"
                   "set style data histograms\nset style histogram rowstacked\nset style fill "
                   "solid 0.85 border -1\nset boxwidth 0.7\nset xtics rotate by -20\n"
                   "plot for [k=2:6] '%s' using k:xtic(1) title columnhead\n",
                pl_head, stem, links[l], bmax, cmin, f);
        fclose(d);
        fclose(s);
        made += any && pl_run(g);
    }

    /* 3. speedup over kv-fetch vs context, per (link, mode) */
    snprintf(f, sizeof(f), "%s-speedup.dat", stem);
    snprintf(g, sizeof(g), "%s-speedup.gp", stem);
    d = fopen(f, "w");
    s = fopen(g, "w");
    if (d != NULL && s != NULL) {
        int blocks = 0;
        fprintf(s, "%sset output '%s-speedup.png'\nset title 'speedup over kv-fetch vs context "
                   "(same link, batch, nodes)'\nset xlabel 'context (tokens)'\nset ylabel "
                   "'tokens/s / kv-fetch tokens/s'\nset logscale x 2\nset yrange [0:*]\nplot ",
                pl_head, stem);
        for (l = 0; l < n_links; l++)
            for (m = NA_E2E_OFF; m < NA_E2E_N_MODES; m++)
            for (bb = 0; bb < n; bb++) {
                int cnt = 0, k2, dup = 0;
                char buf[4096];
                size_t used = 0;
                /* one line per batch size: the first point of each batch */
                if (!p[bb].ok || pl[bb] != l || p[bb].mode != m)
                    continue;
                for (k2 = 0; k2 < bb; k2++)
                    dup |= p[k2].ok && pl[k2] == l && p[k2].mode == m &&
                           p[k2].batch == p[bb].batch;
                if (dup)
                    continue;
                buf[0] = '\0';
                for (c = 0; c < n; c++) {
                    if (!p[c].ok || pl[c] != l || p[c].mode != m || p[c].batch != p[bb].batch)
                        continue;
                    for (i = 0; i < n; i++)
                        if (p[i].ok && pl[i] == l && p[i].mode == NA_E2E_KVFETCH &&
                            p[i].batch == p[c].batch && p[i].ctx == p[c].ctx &&
                            p[i].nodes == p[c].nodes && p[i].tok_s > 0 && used < sizeof(buf) - 64) {
                            used += (size_t)snprintf(buf + used, sizeof(buf) - used,
                                                     "%d %.6g\n", p[c].ctx,
                                                     p[c].tok_s / p[i].tok_s);
                            cnt++;
                            break;
                        }
                }
                if (cnt < 2)
                    continue;
                fprintf(d, "# %s %s B=%d\n%s\n\n", links[l], na_e2e_mode_name((na_e2e_mode_t)m),
                        p[bb].batch, buf);
                fprintf(s, "%s'%s' index %d with linespoints lw 2 title '%s %s B=%d'",
                        blocks ? ", \\\n     " : "", f, blocks, links[l],
                        na_e2e_mode_name((na_e2e_mode_t)m), p[bb].batch);
                blocks++;
            }
        fprintf(s, "%s1 with lines dt 2 lc rgb 'black' title 'kv-fetch'\n", blocks ? ", \\\n     " : "");
        fclose(d);
        fclose(s);
        made += blocks > 0 && pl_run(g);
    } else {
        if (d) fclose(d);
        if (s) fclose(s);
    }

    /* 4. ablation bars: offload .. +xcache relative to offload, per link */
    snprintf(f, sizeof(f), "%s-ablation.dat", stem);
    snprintf(g, sizeof(g), "%s-ablation.gp", stem);
    d = fopen(f, "w");
    s = fopen(g, "w");
    if (d != NULL && s != NULL) {
        int rows = 0;
        fprintf(d, "link offload +wb +wb+pipe +wb+pipe+xcache\n");
        for (l = 0; l < n_links; l++) {
            int cmin, bmax;
            double v[4] = { 0, 0, 0, 0 };
            pl_extent(p, pl, n, l, &cmin, &bmax);
            for (i = 0; i < n; i++)
                if (p[i].ok && pl[i] == l && p[i].mode >= NA_E2E_OFF && p[i].batch == bmax &&
                    p[i].ctx == cmin && p[i].nodes <= 1)
                    v[p[i].mode - NA_E2E_OFF] = p[i].tok_s;
            if (v[0] <= 0 || (v[1] <= 0 && v[2] <= 0))
                continue;
            fprintf(d, "\"%s B=%d\" %.4g %.4g %.4g %.4g\n", links[l], bmax, 1.0, v[1] / v[0],
                    v[2] / v[0], v[3] / v[0]);
            rows++;
        }
        fprintf(s, "%sset output '%s-ablation.png'\nset title 'ablation: tokens/s relative to "
                   "offload (smallest context, 1 storage node)'\nset ylabel 'relative tokens/s'\n"
                   "set style data histograms\nset style histogram clustered gap 1\nset style "
                   "fill solid 0.85 border -1\nset yrange [0:*]\n"
                   "plot for [k=2:5] '%s' using k:xtic(1) title columnhead\n", pl_head, stem, f);
        fclose(d);
        fclose(s);
        made += rows > 0 && pl_run(g);
    } else {
        if (d) fclose(d);
        if (s) fclose(s);
    }
    printf("wrote %d PNG(s) beside %s (%s-*.png)\n", made, json_path, stem);
    return made;
}
