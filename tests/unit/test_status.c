/* tests/unit/test_status.c — status names and per-thread error messages. */
#include <string.h>

#include "common/status.h"
#include "tests/testutil.h"

int main(void)
{
    na_status_t st;

    NA_CHECK(strcmp(na_status_string(NA_OK), "ok") == 0);
    NA_CHECK(strcmp(na_status_string((na_status_t)-999), "unknown status") == 0);
    st = na_err(NA_ERR_FORMAT, "%s: field '%s' bad", "f.bin", "dim");
    NA_CHECK(st == NA_ERR_FORMAT);
    NA_CHECK(strcmp(na_errmsg(), "f.bin: field 'dim' bad") == 0);
    st = na_err_prefix(st, "loading model: ");
    NA_CHECK(strcmp(na_errmsg(), "loading model: f.bin: field 'dim' bad") == 0);
    na_err_clear();
    NA_CHECK(na_errmsg()[0] == '\0');
    return na_test_finish();
}
