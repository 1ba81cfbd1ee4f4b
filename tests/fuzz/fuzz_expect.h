/* tests/fuzz/fuzz_expect.h — the count of unexpected results that the fuzz
 * drivers (fuzz_files.c, fuzz_text.c) keep for their targets: a target
 * checks with fuzz_expect; a driver's summary prints fuzz_unexpected() and
 * exits 1 when it is not 0. */
#ifndef NA_FUZZ_EXPECT_H
#define NA_FUZZ_EXPECT_H

/* Count an unexpected result (and print it) unless ok; returns ok. */
int fuzz_expect(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The unexpected results counted so far. */
unsigned long fuzz_unexpected(void);

#endif /* NA_FUZZ_EXPECT_H */
