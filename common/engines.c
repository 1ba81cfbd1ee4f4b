/* common/engines.c — the registry of attention engine names (engines.h).
 * A new engine adds its name here and its implementation to the table in
 * storage-node/attn_engine.c; its build switch sets the built flag. */
#include <pthread.h>
#include <string.h>

#include "common/engines.h"

#ifndef NA_HAVE_CUDA_ENGINE
#define NA_HAVE_CUDA_ENGINE 0
#endif
#ifndef NA_HAVE_CSD_ENGINE
#define NA_HAVE_CSD_ENGINE 0
#endif

const char *const na_engines_names[NA_ENGINE_COUNT + 1] = { "cpu", "cuda", "csd", NULL };

static const unsigned char na_engine_is_built[NA_ENGINE_COUNT] = {
    1, NA_HAVE_CUDA_ENGINE, NA_HAVE_CSD_ENGINE,
};

int na_engines_find(const char *name)
{
    int i;
    for (i = 0; name != NULL && i < NA_ENGINE_COUNT; i++)
        if (strcmp(na_engines_names[i], name) == 0)
            return i;
    return -1;
}

int na_engines_has(int id)
{
    return id >= 0 && id < NA_ENGINE_COUNT && na_engine_is_built[id];
}

/* Join the names (built only, or all) with ", " into list. */
static void na_engine_join(char *list, size_t cap, int built_only)
{
    size_t len = 0;
    int i;

    list[0] = '\0';
    for (i = 0; i < NA_ENGINE_COUNT; i++) {
        size_t n = strlen(na_engines_names[i]);
        if ((built_only && !na_engine_is_built[i]) || len + n + 3 > cap)
            continue;
        if (len > 0) {
            memcpy(list + len, ", ", 2);
            len += 2;
        }
        memcpy(list + len, na_engines_names[i], n + 1);
        len += n;
    }
}

static char na_engine_built_list[64], na_engine_known_list[64];
static pthread_once_t na_engine_once = PTHREAD_ONCE_INIT;

static void na_engine_lists_init(void)
{
    na_engine_join(na_engine_built_list, sizeof(na_engine_built_list), 1);
    na_engine_join(na_engine_known_list, sizeof(na_engine_known_list), 0);
}

const char *na_engines_list(void)
{
    pthread_once(&na_engine_once, na_engine_lists_init);
    return na_engine_built_list;
}

na_status_t na_engines_check(const char *name)
{
    int id = na_engines_find(name);

    if (id < 0)
        return na_err(NA_ERR_NOT_FOUND, "attention engine '%s' is unknown (known: %s; built "
                      "into this nearattn: %s)", name ? name : "(null)",
                      (na_engines_list(), na_engine_known_list), na_engines_list());
    if (!na_engines_has(id))
        return na_err(NA_ERR_UNSUPPORTED, "attention engine '%s' is not built into this "
                      "nearattn (built: %s)", name, na_engines_list());
    return NA_OK;
}
