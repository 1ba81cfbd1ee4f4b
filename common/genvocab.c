/* common/genvocab.c — the generated vocabulary of gen-model (see genmodel.h):
 * specials, byte tokens, printable ASCII, BPE merges learnt from a small
 * built-in text, then synthetic merges of existing pieces. Deterministic in
 * (vocab_size, seed). Pieces use real spaces; writers convert as needed. */
#include <stdlib.h>
#include <string.h>

#include "common/fnv.h"
#include "genvocab.h"

#define NA_GV_MAX_PIECE 16
#define NA_GV_PAIRS     4096    /* > 2 x corpus length */

static const char na_gv_corpus[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big, red ball. She wanted to play with it, so she ran to her "
    "mom and asked if she could have it. Her mom said yes, and Lily was very happy. They "
    "played together all day long. When the sun went down, they went home and had dinner. "
    "The little dog wanted to go for a walk, but it was raining. He looked out of the window "
    "and saw the trees and the flowers. Then the rain stopped and the sky was blue again. "
    "Tom and his friend Sam liked to build things with blocks. They made a tall tower and a "
    "small house for the cat. The cat was not happy and ran away, but it came back when they "
    "gave it some milk. Everyone laughed and the day was good. The end. "
    "In the morning the bird sang a song, and the boy said thank you to the bird. "
    "It is important to be kind and to share with your friends, said the teacher.";

/* Open-addressing set of piece ids keyed by the piece bytes. */
typedef struct {
    uint32_t *slot;          /* id + 1, 0 = empty */
    uint32_t  mask;
} na_gv_set_t;

static uint32_t na_gv_hash(const char *s)
{
    return (uint32_t)na_fnv1a64(s, strlen(s));
}

static int na_gv_find(const na_gv_set_t *set, char *const *pieces, const char *s)
{
    uint32_t i = na_gv_hash(s) & set->mask;
    while (set->slot[i] != 0) {
        if (strcmp(pieces[set->slot[i] - 1], s) == 0)
            return (int)set->slot[i] - 1;
        i = (i + 1) & set->mask;
    }
    return -1;
}

static void na_gv_insert(na_gv_set_t *set, char *const *pieces, int id)
{
    uint32_t i = na_gv_hash(pieces[id]) & set->mask;
    while (set->slot[i] != 0)
        i = (i + 1) & set->mask;
    set->slot[i] = (uint32_t)id + 1;
}

/* Append piece s (copied) with score; returns its id or -1 on no memory. */
static int na_gv_add(na_genvocab_t *v, na_gv_set_t *set, const char *s, float score)
{
    int id = v->n;
    if ((v->pieces[id] = strdup(s)) == NULL)
        return -1;
    v->scores[id] = score;
    v->n++;
    if (set)
        na_gv_insert(set, v->pieces, id);
    return id;
}

static uint64_t na_gv_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* BPE over the corpus: merge the most frequent adjacent pair until the
 * vocabulary is full or no pair occurs twice. */
static na_status_t na_gv_learn(na_genvocab_t *v, na_gv_set_t *set, int first_char)
{
    size_t n = 0, i, len = sizeof(na_gv_corpus) - 1;
    uint64_t *keys = malloc(NA_GV_PAIRS * sizeof(uint64_t));
    int *counts = malloc(NA_GV_PAIRS * sizeof(int));
    uint32_t *pos = malloc(NA_GV_PAIRS * sizeof(uint32_t));
    int *seq = malloc((len + 1) * sizeof(int));
    char buf[2 * NA_GV_MAX_PIECE + 1];
    na_status_t st = NA_OK;

    if (!seq || !keys || !counts || !pos) {
        st = na_err(NA_ERR_NOMEM, "gen-model: no memory for the vocabulary");
        goto out_free;
    }
    seq[n++] = first_char + (' ' - 0x20);
    for (i = 0; i < len; i++)
        seq[n++] = first_char + (na_gv_corpus[i] - 0x20);
    while (v->n < v->cap) {
        int best_l = -1, best_r = -1, best_c = 1, id;
        size_t a, o;
        memset(keys, 0, NA_GV_PAIRS * sizeof(uint64_t));
        /* count adjacent pairs in a small hash map; first most frequent wins */
        for (a = 0; a + 1 < n; a++) {
            uint64_t k = ((uint64_t)(uint32_t)seq[a] << 32 | (uint32_t)seq[a + 1]) + 1;
            uint32_t h = (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 52) & (NA_GV_PAIRS - 1);
            while (keys[h] != 0 && keys[h] != k)
                h = (h + 1) & (NA_GV_PAIRS - 1);
            if (keys[h] == 0) {
                keys[h] = k;
                counts[h] = 0;
            }
            counts[h]++;
            pos[a] = h;
        }
        for (a = 0; a + 1 < n; a++) {
            if (counts[pos[a]] > best_c &&
                strlen(v->pieces[seq[a]]) + strlen(v->pieces[seq[a + 1]]) <= NA_GV_MAX_PIECE) {
                best_c = counts[pos[a]];
                best_l = seq[a];
                best_r = seq[a + 1];
            }
        }
        if (best_l < 0)
            break;
        strcpy(buf, v->pieces[best_l]);
        strcat(buf, v->pieces[best_r]);
        id = na_gv_find(set, v->pieces, buf);
        if (id < 0 && (id = na_gv_add(v, set, buf, -(float)v->n)) < 0) {
            st = na_err(NA_ERR_NOMEM, "gen-model: no memory for the vocabulary");
            break;
        }
        for (a = 0, o = 0; a < n; a++) {
            if (a + 1 < n && seq[a] == best_l && seq[a + 1] == best_r) {
                seq[o++] = id;
                a++;
            } else {
                seq[o++] = seq[a];
            }
        }
        n = o;
    }
out_free:
    free(keys);
    free(counts);
    free(pos);
    free(seq);
    return st;
}

na_status_t na_genvocab_create(int vocab_size, uint64_t seed, na_genvocab_t *v)
{
    na_gv_set_t set = { NULL, 0 };
    uint32_t cap = 16;
    uint64_t rng = seed ^ 0x5EEDF00Dull;
    char buf[2 * NA_GV_MAX_PIECE + 1];
    int c, first_char, tries = 0;
    na_status_t st = NA_OK;

    memset(v, 0, sizeof(*v));
    if (vocab_size < NA_GENVOCAB_MIN)
        return na_err(NA_ERR_INVALID, "gen-model: vocab_size %d is below the minimum %d "
                      "(3 specials + 256 byte tokens)", vocab_size, NA_GENVOCAB_MIN);
    while (cap < 2u * (uint32_t)vocab_size)
        cap <<= 1;
    v->cap = vocab_size;
    v->pieces = calloc((size_t)vocab_size, sizeof(char *));
    v->scores = calloc((size_t)vocab_size, sizeof(float));
    v->types = calloc((size_t)vocab_size, sizeof(int32_t));
    set.slot = calloc(cap, sizeof(uint32_t));
    set.mask = cap - 1;
    if (!v->pieces || !v->scores || !v->types || !set.slot) {
        st = na_err(NA_ERR_NOMEM, "gen-model: no memory for a vocabulary of %d", vocab_size);
        goto err_free;
    }
    /* specials and byte tokens are not merge material: not in the set */
    if (na_gv_add(v, NULL, "<unk>", 0.0f) < 0 || na_gv_add(v, NULL, "<s>", 0.0f) < 0 ||
        na_gv_add(v, NULL, "</s>", 0.0f) < 0)
        goto err_nomem;
    v->types[0] = 2;
    v->types[1] = v->types[2] = 3;
    for (c = 0; c < 256; c++) {
        static const char hex[] = "0123456789ABCDEF";
        char b[7] = { '<', '0', 'x', hex[c >> 4], hex[c & 15], '>', 0 };
        v->types[v->n] = 6;
        if (na_gv_add(v, NULL, b, 0.0f) < 0)
            goto err_nomem;
    }
    first_char = v->n;
    for (c = 0x20; c < 0x7f && v->n < v->cap; c++) {
        char s[2] = { (char)c, 0 };
        v->types[v->n] = 1;
        if (na_gv_add(v, &set, s, -1e6f - (float)c) < 0)
            goto err_nomem;
    }
    if (v->n - first_char == 95 && (st = na_gv_learn(v, &set, first_char)) != NA_OK)
        goto err_free;
    /* synthetic merges of two existing normal pieces */
    while (v->n < v->cap) {
        int span = v->n - first_char;
        int a = first_char + (int)(na_gv_next(&rng) % (uint64_t)span);
        int b = first_char + (int)(na_gv_next(&rng) % (uint64_t)span);
        if (++tries > 1000 * v->cap) {
            st = na_err(NA_ERR_INTERNAL, "gen-model: could not generate %d distinct pieces",
                        v->cap);
            goto err_free;
        }
        if (strlen(v->pieces[a]) + strlen(v->pieces[b]) > NA_GV_MAX_PIECE)
            continue;
        strcpy(buf, v->pieces[a]);
        strcat(buf, v->pieces[b]);
        if (na_gv_find(&set, v->pieces, buf) >= 0)
            continue;
        v->types[v->n] = 1;
        if (na_gv_add(v, &set, buf, -(float)v->n) < 0)
            goto err_nomem;
    }
    for (c = first_char; c < v->n; c++)
        v->types[c] = 1;
    free(set.slot);
    return NA_OK;

err_nomem:
    st = na_err(NA_ERR_NOMEM, "gen-model: no memory for a vocabulary of %d", vocab_size);
err_free:
    free(set.slot);
    na_genvocab_destroy(v);
    return st;
}

void na_genvocab_destroy(na_genvocab_t *v)
{
    int i;
    for (i = 0; v->pieces && i < v->n; i++)
        free(v->pieces[i]);
    free(v->pieces);
    free(v->scores);
    free(v->types);
    memset(v, 0, sizeof(*v));
}
