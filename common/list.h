/* common/list.h — the intrusive doubly-linked list of the tree: an element
 * holds its own two links (named by the caller: `prev` / `next`, or
 * `prev_job` / `next_job` where an element sits on several lists), the
 * owner a head pointer (and a tail where it appends). The list is
 * NULL-terminated both ways; every macro is O(1) and allocates nothing.
 * Below them the singly-linked forms: a FIFO (head and tail) and a free
 * list of reusable records kept up to a bound (its fill and drain are the
 * only macros that allocate or free). Arguments are evaluated more
 * than once: pass plain lvalues. */
#ifndef NA_LIST_H
#define NA_LIST_H

#include <stdlib.h>

/* Put e first on the list at head. */
#define NA_LIST_PUSH(head, e, prev, next) do {                               \
        (e)->prev = NULL;                                                    \
        (e)->next = (head);                                                  \
        if ((head) != NULL)                                                  \
            (head)->prev = (e);                                              \
        (head) = (e);                                                        \
    } while (0)

/* Put e last on the list at head / tail. */
#define NA_LIST_APPEND(head, tail, e, prev, next) do {                       \
        (e)->prev = (tail);                                                  \
        NA_SLIST_APPEND(head, tail, e, next);                                \
    } while (0)

/* Take e off the list at head (its links are left as they were). */
#define NA_LIST_UNLINK(head, e, prev, next) do {                             \
        if ((e)->prev != NULL)                                               \
            (e)->prev->next = (e)->next;                                     \
        else                                                                 \
            (head) = (e)->next;                                              \
        if ((e)->next != NULL)                                               \
            (e)->next->prev = (e)->prev;                                     \
    } while (0)

/* Same for a list with a tail. */
#define NA_LIST_UNLINK_TAIL(head, tail, e, prev, next) do {                  \
        if ((e)->next == NULL)                                               \
            (tail) = (e)->prev;                                              \
        NA_LIST_UNLINK(head, e, prev, next);                                 \
    } while (0)

/* ---- singly linked ---------------------------------------------------------- */

/* Put e first on the list at head. */
#define NA_SLIST_PUSH(head, e, next) do {                                    \
        (e)->next = (head);                                                  \
        (head) = (e);                                                        \
    } while (0)

/* e = the first element, taken off the list at head (NULL when empty). */
#define NA_SLIST_POP(head, e, next) do {                                     \
        (e) = (head);                                                        \
        if ((e) != NULL)                                                     \
            (head) = (e)->next;                                              \
    } while (0)

/* Put e last on the FIFO at head / tail. */
#define NA_SLIST_APPEND(head, tail, e, next) do {                            \
        (e)->next = NULL;                                                    \
        if ((tail) != NULL)                                                  \
            (tail)->next = (e);                                              \
        else                                                                 \
            (head) = (e);                                                    \
        (tail) = (e);                                                        \
    } while (0)

/* A free list of reusable records (head, n of them): keep e for reuse, or
 * free() it when keep are kept already. */
#define NA_FREELIST_PUT(head, n, keep, e, next) do {                         \
        if ((n) >= (keep)) {                                                 \
            free(e);                                                         \
        } else {                                                             \
            NA_SLIST_PUSH(head, e, next);                                    \
            (n)++;                                                           \
        }                                                                    \
    } while (0)

/* e = a record taken off the free list (NULL when it is empty). */
#define NA_FREELIST_TAKE(head, n, e, next) do {                              \
        NA_SLIST_POP(head, e, next);                                         \
        if ((e) != NULL)                                                     \
            (n)--;                                                           \
    } while (0)

/* Put up to count calloc'd records of type on the free list (fewer when
 * memory runs short: a record taken from an empty list is allocated then). */
#define NA_FREELIST_FILL(head, n, type, count, next) do {                    \
        int na_fl_i_;                                                        \
        for (na_fl_i_ = 0; na_fl_i_ < (count); na_fl_i_++) {                 \
            type *na_fl_e_ = calloc(1, sizeof(type));                        \
            if (na_fl_e_ == NULL)                                            \
                break;                                                       \
            NA_SLIST_PUSH(head, na_fl_e_, next);                             \
            (n)++;                                                           \
        }                                                                    \
    } while (0)

/* free() every record of the free list. */
#define NA_FREELIST_DRAIN(head, n, type, next) do {                          \
        type *na_fl_e_;                                                      \
        for (;;) {                                                           \
            NA_SLIST_POP(head, na_fl_e_, next);                              \
            if (na_fl_e_ == NULL)                                            \
                break;                                                       \
            free(na_fl_e_);                                                  \
        }                                                                    \
        (n) = 0;                                                             \
    } while (0)

#endif /* NA_LIST_H */
