/* kernels/cuda/cuda_present.h — does this machine show an NVIDIA GPU to the
 * process, whatever the CUDA runtime says? Decides whether a CUDA failure
 * means "no device here" (a skip in the tests, one refusal line in the
 * CLI) or a broken installation on a GPU machine (an error): a module that
 * cannot be loaded, or a runtime that sees no device, where the driver's
 * device nodes exist must never read as "no CUDA device". */
#ifndef NA_KERNELS_CUDA_PRESENT_H
#define NA_KERNELS_CUDA_PRESENT_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>

/* 1 when a GPU device node (/dev/nvidia0, /dev/nvidia1, ...) or a GPU of the
 * NVIDIA driver (/proc/driver/nvidia/gpus/<pci>) exists; its name into
 * what (n bytes, may be NULL) for messages. */
static inline int na_cuda_gpu_present(char *what, size_t n)
{
    static const char *const dirs[2] = { "/dev", "/proc/driver/nvidia/gpus" };
    int i, found = 0;
    for (i = 0; i < 2 && !found; i++) {
        DIR *d = opendir(dirs[i]);
        struct dirent *de;
        if (d == NULL)
            continue;
        while (!found && (de = readdir(d)) != NULL) {
            const char *s = de->d_name;
            if (i == 0 ? strncmp(s, "nvidia", 6) == 0 && s[6] >= '0' && s[6] <= '9'
                       : s[0] != '.') {
                found = 1;
                if (what != NULL && n > 0)
                    snprintf(what, n, "%s/%s", dirs[i], s);
            }
        }
        closedir(d);
    }
    return found;
}

#endif /* NA_KERNELS_CUDA_PRESENT_H */
