/* serve/batch_progress.c — the progress bar / lines of `nearattn batch`
 * (serve/batch_progress.h). */
#include <stdio.h>
#include <unistd.h>

#include "common/clock.h"
#include "serve/batch_progress.h"

#define BP_TTY_S 0.1     /* a terminal bar is redrawn at most this often */
#define BP_WIDTH 24      /* bar cells */

void na_batch_progress_init(na_batch_progress_t *p, FILE *f, long total, long before,
                            double interval_s, int force_plain)
{
    p->f = f;
    p->tty = !force_plain && isatty(fileno(f));
    p->interval_s = interval_s > 0 ? interval_s : 5.0;
    p->t0 = p->last = na_now_s();
    p->total = total;
    p->before = p->done = before;
    p->failed = p->tokens = 0;
    p->drawn = 0;
    p->shown_done = p->shown_tokens = -1;
}

/* "1h02m", "3m07s", "12s" into buf; "?" when unknown. */
static void bp_dur(double s, char *buf, size_t len)
{
    long t = (long)(s + 0.5);

    if (!(s >= 0) || s > 1e8)
        snprintf(buf, len, "?");
    else if (t >= 3600)
        snprintf(buf, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, len, "%lds", t);
}

static void bp_print(na_batch_progress_t *p, double now)
{
    double el = now - p->t0, rate = el > 0 ? (double)p->tokens / el : 0;
    long ran = p->done - p->before, left = p->total - p->done;
    char eta[32], bar[BP_WIDTH + 1];
    int i, fill = p->total > 0 ? (int)((double)BP_WIDTH * (double)p->done / (double)p->total) : 0;

    if (left <= 0)
        snprintf(eta, sizeof(eta), "0s");
    else if (ran > 0)
        bp_dur(el / (double)ran * (double)left, eta, sizeof(eta));
    else
        bp_dur(-1, eta, sizeof(eta));
    if (p->tty) {
        for (i = 0; i < BP_WIDTH; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[BP_WIDTH] = '\0';
        fprintf(p->f, "\r\033[K[%s] %ld/%ld %3d%% | %ld failed | %.1f tok/s | ETA %s", bar,
                p->done, p->total, p->total > 0 ? (int)(100 * p->done / p->total) : 100,
                p->failed, rate, eta);
        p->drawn = 1;
    } else {
        fprintf(p->f, "batch: %ld/%ld done (%ld failed%s), %.1f tok/s, %ld tokens, elapsed %.0f s, "
                "ETA %s\n", p->done, p->total, p->failed, p->before > 0 ? ", resumed" : "",
                rate, p->tokens, el, eta);
    }
    fflush(p->f);
    p->last = now;
    p->shown_done = p->done;
    p->shown_tokens = p->tokens;
}

void na_batch_progress_update(na_batch_progress_t *p, long done, long failed, long tokens,
                              int force)
{
    double now = na_now_s();

    p->done = done;
    p->failed = failed;
    p->tokens = tokens;
    if (force || now - p->last >= (p->tty ? BP_TTY_S : p->interval_s))
        bp_print(p, now);
}

void na_batch_progress_clear(na_batch_progress_t *p)
{
    if (p->tty && p->drawn) {
        fprintf(p->f, "\r\033[K");
        fflush(p->f);
        p->drawn = 0;
    }
}

void na_batch_progress_end(na_batch_progress_t *p)
{
    if (p->shown_done != p->done || p->shown_tokens != p->tokens || (p->tty && !p->drawn))
        bp_print(p, na_now_s());
    if (p->tty) {
        fputc('\n', p->f);
        p->drawn = 0;
    }
}
