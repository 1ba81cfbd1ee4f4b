/* tests/fuzz/fuzz_expect.c — the count of unexpected results of a fuzz
 * target (see fuzz_expect.h). */
#include <stdarg.h>
#include <stdio.h>

#include "tests/fuzz/fuzz_expect.h"

static unsigned long fuzz_bad;           /* unexpected results */

int fuzz_expect(int ok, const char *fmt, ...)
{
    va_list ap;

    if (ok)
        return 1;
    fuzz_bad++;
    fputs("fuzz: unexpected: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 0;
}

unsigned long fuzz_unexpected(void)
{
    return fuzz_bad;
}
