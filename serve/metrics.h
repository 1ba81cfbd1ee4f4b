/* serve/metrics.h — Prometheus text exposition (format 0.0.4) of the
 * server's counters: latency histograms (fixed buckets, seconds) and the
 * page itself, written into a memory stream. Nothing here is thread-safe:
 * the server holds its lock while it observes and renders. */
#ifndef NA_SERVE_METRICS_H
#define NA_SERVE_METRICS_H

#include <stdint.h>
#include <stdio.h>

#define NA_HIST_BUCKETS 14

typedef struct {
    uint64_t count[NA_HIST_BUCKETS];    /* not cumulative: observations <= bound i (and > i-1) */
    uint64_t n;                         /* all observations (the +Inf bucket) */
    double   sum;
} na_hist_t;

/* The buckets' upper bounds (seconds), 1 ms .. 60 s. */
extern const double na_hist_bounds[NA_HIST_BUCKETS];

void na_hist_observe(na_hist_t *h, double seconds);

/* "# HELP name help\n# TYPE name type\n". */
void na_metric_head(FILE *f, const char *name, const char *type, const char *help);
/* One sample: name{labels} value (labels "" for none). */
void na_metric_value(FILE *f, const char *name, const char *labels, double v);
/* A whole histogram with its HELP/TYPE lines. */
void na_metric_hist(FILE *f, const char *name, const char *help, const na_hist_t *h);

#endif /* NA_SERVE_METRICS_H */
