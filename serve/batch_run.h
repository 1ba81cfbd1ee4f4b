/* serve/batch_run.h — one batch job of `nearattn batch`: every request line
 * of an input (serve/batch_io.h) not done yet in the results file fed to one
 * long-lived generation front end (serve/gen.h), at most max_in_flight
 * submitted at any time, so they share decode steps (continuous batching);
 * each record appended as its request ends.
 *
 *   valid line    body parsed as the OpenAI API does (serve/oai.h); a job;
 *                 its record: status_code 200 and a text_completion or
 *                 chat.completion body (id "cmpl-..." / "chatcmpl-..." from
 *                 the custom_id, usage, finish_reason)
 *   refused body  (wrong type, n > 1, a chat request without a template, a
 *                 prompt longer than the context): status_code 400 and
 *                 OpenAI's error body; the job is not run
 *   failed job    status_code 500 and an error body naming the reason
 *   bad line      response null, error {code, message[, line]} (batch_io.h)
 *
 * Sampling: a body without "seed" is sampled with a seed made from its
 * custom_id (FNV-1a), so a rerun or a resumed run writes the same text.
 *
 * Stopping: *stop_sig set by a signal handler and *n_sigs counted there.
 * The first SIGINT stops admitting and lets the jobs in flight finish (their
 * records are written); a second SIGINT, or SIGTERM, cancels them (no
 * record: a resumed run does them again). A job that fails after a signal
 * gets no record either (a terminal's Ctrl-C also reaches the storage nodes
 * started in its process group: their jobs fail and are redone on resume).
 * Either way the results file holds whole lines only and NA_ERR_CANCELED is
 * returned. */
#ifndef NA_BATCH_RUN_H
#define NA_BATCH_RUN_H

#include <signal.h>

#include "serve/batch_io.h"
#include "serve/batch_progress.h"
#include "serve/chat.h"
#include "serve/gen.h"

typedef struct {
    na_sg_t                *gen;            /* the front end (the caller's) */
    const na_chat_t        *chat;           /* the model's chat template, or NULL: */
    const char             *chat_err;       /* why there is none (chat lines get a 400) */
    int                     max_in_flight;  /* jobs submitted at once (>= 1) */
    volatile sig_atomic_t  *stop_sig;       /* the last SIGINT/SIGTERM, or 0 */
    volatile sig_atomic_t  *n_sigs;         /* how many arrived */
    na_batch_progress_t    *progress;       /* or NULL */
} na_batch_run_opts_t;

/* What a run did. */
typedef struct {
    long   total;            /* request lines of the input */
    long   before;           /* done by an earlier run (skipped) */
    long   ok;               /* records written with status_code 200 */
    long   failed;           /* records written with an error (4xx/5xx or a bad line) */
    long   cancelled;        /* jobs cancelled by a signal (no record) */
    long   not_started;      /* lines left for a resumed run */
    long   prompt_tokens, completion_tokens;
    double wall_s;
} na_batch_summary_t;

/* Run it. NA_OK when every line has its record; NA_ERR_CANCELED after a
 * signal; the front end's fatal error or the results file's NA_ERR_IO
 * (then no job is left running). */
na_status_t na_batch_run(const na_batch_in_t *in, na_batch_out_t *out,
                         const na_batch_run_opts_t *o, na_batch_summary_t *s);

#endif /* NA_BATCH_RUN_H */
