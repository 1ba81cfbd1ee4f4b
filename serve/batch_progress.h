/* serve/batch_progress.h — the progress report of `nearattn batch` on a
 * stream (stderr): requests done / total, failed, generated tokens/s and the
 * time left (ETA from this run's rate). On a terminal one bar redrawn in
 * place (at most 10 times a second); otherwise, a plain line every
 * interval_s seconds (logs, CI). Printing never fails. */
#ifndef NA_BATCH_PROGRESS_H
#define NA_BATCH_PROGRESS_H

#include <stdio.h>

typedef struct {
    FILE  *f;
    int    tty;           /* 1: redraw in place */
    double interval_s;    /* between plain lines (not a terminal) */
    double t0, last;      /* start of this run, last print (monotonic s) */
    long   total;         /* requests of the input (bad lines included) */
    long   before;        /* done by an earlier run (resumed) */
    long   done, failed;  /* done so far (before included), of which failed in this run */
    long   tokens;        /* tokens generated in this run */
    int    drawn;         /* a bar is on the terminal line */
    long   shown_done, shown_tokens;   /* the counts last printed (-1: none yet) */
} na_batch_progress_t;

/* Start: tty from isatty(fileno(f)) unless force_plain. */
void na_batch_progress_init(na_batch_progress_t *p, FILE *f, long total, long before,
                            double interval_s, int force_plain);
/* New counts; prints when the bar or line is due (force: now). */
void na_batch_progress_update(na_batch_progress_t *p, long done, long failed, long tokens,
                              int force);
/* Take the bar off the line (before other stderr output) so the next
 * update redraws it below. */
void na_batch_progress_clear(na_batch_progress_t *p);
/* The last report (unless the last one printed showed the same counts),
 * ended with a newline on a terminal. */
void na_batch_progress_end(na_batch_progress_t *p);

#endif /* NA_BATCH_PROGRESS_H */
