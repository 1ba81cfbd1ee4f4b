/* serve/metrics.c — histograms and Prometheus text lines (see metrics.h). */
#include "serve/metrics.h"

const double na_hist_bounds[NA_HIST_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60
};

void na_hist_observe(na_hist_t *h, double s)
{
    int i;
    for (i = 0; i < NA_HIST_BUCKETS; i++)
        if (s <= na_hist_bounds[i]) {
            h->count[i]++;
            break;
        }
    h->n++;
    h->sum += s;
}

void na_metric_head(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void na_metric_value(FILE *f, const char *name, const char *labels, double v)
{
    if (labels != NULL && labels[0])
        fprintf(f, "%s{%s} %.17g\n", name, labels, v);
    else
        fprintf(f, "%s %.17g\n", name, v);
}

void na_metric_hist(FILE *f, const char *name, const char *help, const na_hist_t *h)
{
    uint64_t cum = 0;
    int i;

    na_metric_head(f, name, "histogram", help);
    for (i = 0; i < NA_HIST_BUCKETS; i++) {
        cum += h->count[i];
        fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, na_hist_bounds[i],
                (unsigned long long)cum);
    }
    fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->n);
    fprintf(f, "%s_sum %.17g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->n);
}
