/* tests/serve/test_serve_gen.c — serve/gen.h on the in-process cluster
 * (--mode monolithic) with stories260K: a greedy job's text; the same job
 * cut by a stop string inside that text (text up to the match, "stop"); two
 * jobs with one seed at temperature 1 batched with others give one text; a
 * cancelled job ends "cancelled"; a prompt past the context is refused;
 * max_tokens <= 0 runs to the context ("length"); top_p 1e-300 (0 as a float)
 * is the greedy text. Batches in flight: a layout of 2 (local.yaml) runs
 * one batch in monolithic mode unless asked (4 jobs of 8 tokens: 7 decode
 * steps of one batch, each one attention round trip per layer; 2 batches
 * asked: more round trips, the same greedy texts). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/gen.h"
#include "tests/testutil.h"

typedef struct {
    char   text[8192];
    size_t len;
    int    ended;
    na_sg_end_t end;
} job_out_t;

static void on_text(void *user, const char *s, size_t n)
{
    job_out_t *o = user;
    if (o->len + n < sizeof(o->text)) {
        memcpy(o->text + o->len, s, n);
        o->len += n;
        o->text[o->len] = '\0';
    }
}

static void on_end(void *user, const na_sg_end_t *e)
{
    job_out_t *o = user;
    o->ended++;
    o->end = *e;
    o->end.error = NULL;
}

static na_sg_job_t *submit(na_sg_t *g, const char *prompt, int max_tokens, double temp,
                           uint64_t seed, const char *stop, job_out_t *o)
{
    na_sg_params_t p;
    na_sg_job_t *j = NULL;

    memset(o, 0, sizeof(*o));
    na_sg_params_default(&p);
    p.text = prompt;
    p.max_tokens = max_tokens;
    p.temperature = temp;
    p.seed = seed;
    p.seed_given = 1;
    p.stop = &stop;
    p.n_stop = stop != NULL ? 1 : 0;
    p.on_text = on_text;
    p.on_end = on_end;
    p.user = o;
    NA_CHECK_OK(na_sg_submit(g, &p, &j));
    return j;
}

int main(void)
{
    const char *src = getenv("NA_SOURCE_DIR");
    char layout[4096], stop[16];
    job_out_t a, b, c, d, e, f;
    na_sg_opts_t o;
    na_sg_params_t p;
    na_sg_job_t *jd;
    na_sg_t *g;
    char *long_prompt;
    na_sg_stats_t st;

    if (na_test_shared_model("stories260K.bin") == NULL)
        NA_SKIP("no shared/models/stories260K.bin");
    snprintf(layout, sizeof(layout), "%s/cluster-configs/test-1s.yaml", src ? src : ".");
    na_sg_opts_default(&o);
    o.mode = "monolithic";
    o.config_path = layout;
    o.threads = 1;
    NA_CHECK_OK(na_sg_create(&o, &g));
    if (g == NULL)
        return na_test_finish();

    submit(g, "Once upon a time", 40, 0.0, 1, NULL, &a);
    NA_CHECK_OK(na_sg_progress(g, -1));
    NA_CHECK(a.ended == 1 && a.end.finish == NA_SG_LENGTH && a.end.completion_tokens == 40);
    NA_CHECK(a.len > 20);
    fprintf(stderr, "greedy: [%s]\n", a.text);

    /* a stop string from the middle of that text */
    snprintf(stop, sizeof(stop), "%.4s", a.text + a.len / 2);
    submit(g, "Once upon a time", 40, 0.0, 1, stop, &b);
    /* sampled, same seed twice, beside other jobs */
    submit(g, "Lily", 30, 1.0, 42, NULL, &c);
    jd = submit(g, "Tim", 200, 1.0, 5, NULL, &d);
    submit(g, "Lily", 30, 1.0, 42, NULL, &e);
    NA_CHECK_OK(na_sg_progress(g, 0));
    na_sg_cancel(g, jd);
    NA_CHECK_OK(na_sg_progress(g, -1));
    NA_CHECK(b.ended == 1 && b.end.finish == NA_SG_STOP);
    NA_CHECK(strstr(a.text, stop) == a.text + b.len && !memcmp(a.text, b.text, b.len));
    NA_CHECK(c.ended == 1 && e.ended == 1 && c.len == e.len && !strcmp(c.text, e.text));
    NA_CHECK(d.ended == 1 && d.end.finish == NA_SG_CANCELLED);

    /* refused: a prompt past the context (512 tokens), an empty stop string */
    long_prompt = malloc(20001);
    memset(long_prompt, 'x', 20000);
    for (int i = 0; i < 20000; i += 2)
        long_prompt[i] = ' ';
    long_prompt[20000] = '\0';
    na_sg_params_default(&p);
    p.text = long_prompt;
    NA_CHECK(na_sg_submit(g, &p, NULL) == NA_ERR_RANGE);
    free(long_prompt);
    p.text = "x";
    p.stop = (const char *const[]){ "" };
    p.n_stop = 1;
    NA_CHECK(na_sg_submit(g, &p, NULL) == NA_ERR_INVALID);

    /* max_tokens 0: up to the context */
    submit(g, "The", 0, 0.0, 1, NULL, &f);
    NA_CHECK_OK(na_sg_progress(g, -1));
    NA_CHECK(f.ended == 1 && (f.end.finish == NA_SG_LENGTH || f.end.finish == NA_SG_STOP));
    na_sg_stats(g, &st);
    NA_CHECK(st.cancelled == 1 && st.running == 0 && st.waiting == 0 && st.finished == 5);
    NA_CHECK(na_sg_pending(g) == 0);

    /* top_p 1e-300 (a valid JSON top_p, 0 as a float) at temperature 1: accepted,
     * the nucleus is the most likely token alone, so the text is the greedy one */
    na_sg_params_default(&p);
    p.text = "Once upon a time";
    p.max_tokens = 40;
    p.temperature = 1.0;
    p.top_p = 1e-300;
    p.seed = 7;
    p.seed_given = 1;
    p.on_text = on_text;
    p.on_end = on_end;
    p.user = &c;
    memset(&c, 0, sizeof(c));
    NA_CHECK_OK(na_sg_submit(g, &p, NULL));
    NA_CHECK_OK(na_sg_progress(g, -1));
    NA_CHECK(c.ended == 1 && c.end.error == NULL && c.end.finish == NA_SG_LENGTH);
    NA_CHECK(c.len == a.len && !strcmp(c.text, a.text));
    na_sg_destroy(g);

    /* batches in flight: 1 by default in monolithic mode, the layout's 2 ignored;
     * 2 asked for with adaptive batches off: two batches step */
    snprintf(layout, sizeof(layout), "%s/cluster-configs/local.yaml", src ? src : ".");
    for (int bif = 0; bif <= 2; bif += 2) {
        job_out_t q[4];
        long calls;
        int k, layers;

        o.config_path = layout;
        o.batches_in_flight = bif;
        o.no_adaptive_batches = 1;   /* the number asked for, every step */
        NA_CHECK_OK(na_sg_create(&o, &g));
        if (g == NULL)
            break;
        layers = na_sg_model(g)->cfg.n_layers;
        for (k = 0; k < 4; k++)
            submit(g, "Once upon a time", 8, 0.0, 1, NULL, &q[k]);
        NA_CHECK_OK(na_sg_progress(g, -1));
        na_sg_stats(g, &st);
        calls = st.attn_calls;
        fprintf(stderr, "batches in flight %d (0: default): %ld attention round trips, "
                "%d layers\n", bif, calls, layers);
        for (k = 0; k < 4; k++)
            NA_CHECK(q[k].ended == 1 && q[k].end.completion_tokens == 8 &&
                     !strcmp(q[k].text, q[0].text) && !strncmp(q[k].text, a.text, 8));
        /* one batch: one step takes the 4 prompts (a chunk each, chunked
         * prefill), 7 more the next 7 tokens of all 4; two batches step twice */
        if (bif == 0)
            NA_CHECK(calls == 8L * layers);
        else
            NA_CHECK(calls > 8L * layers);
        na_sg_destroy(g);
    }
    return na_test_finish();
}
