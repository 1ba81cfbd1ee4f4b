/* storage-node/xrt_dev.c — the XRT host layer (xrt_dev.h) over XRT's C API
 * (xrt/xrt_device.h, xrt_bo.h, xrt_kernel.h; libxrt_coreutil). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xrt/xrt_bo.h>
#include <xrt/xrt_device.h>
#include <xrt/xrt_kernel.h>

#include "storage-node/csd_xclbin.h"
#include "storage-node/xrt_dev.h"

struct na_xrt_dev {
    xrtDeviceHandle dev;
    xrtKernelHandle kern;
    xrtRunHandle    run;
    int             noop;
    int             hung;           /* last run timed out */
    char            name[64];
};

struct na_xrt_bo {
    xrtBufferHandle h;
    void           *map;
    size_t          size;
};

na_status_t na_xrt_env_check(int *noop_p)
{
    const char *root = getenv("XILINX_XRT"), *mode = getenv("XCL_EMULATION_MODE");
    char shim[4096];
    struct stat sb;

    if (root == NULL || root[0] == '\0')
        return na_err(NA_ERR_UNSUPPORTED, "csd: XILINX_XRT is not set (XRT aborts without it): "
                      "set it to the XRT root, or for XCL_EMULATION_MODE=noop to the build "
                      "tree's xrt-root directory");
    if (mode != NULL && mode[0] != '\0' && strcmp(mode, "noop") != 0)
        return na_err(NA_ERR_UNSUPPORTED, "csd: XCL_EMULATION_MODE=%s needs Vitis; use noop "
                      "(host path + C model) or unset it for a real device", mode);
    *noop_p = mode != NULL && strcmp(mode, "noop") == 0;
    snprintf(shim, sizeof(shim), "%s/lib/%s", root,
             *noop_p ? "libxrt_noop.so.2" : "libxrt_core.so.2");
    if (stat(shim, &sb) != 0)
        return na_err(NA_ERR_UNSUPPORTED, "csd: XILINX_XRT=%s has no %s (stat: %s): point it "
                      "at an XRT root (the build tree's xrt-root has the shims)", root, shim,
                      strerror(errno));
    return NA_OK;
}

const char *na_xrt_noop_hint(void)
{
    static char hint[PATH_MAX + 200];
    const char *root = getenv("XILINX_XRT"), *mode = getenv("XCL_EMULATION_MODE");
    char exe[PATH_MAX], shim[PATH_MAX + 32];
    ssize_t n;
    char *slash;

    if (root != NULL && root[0] != '\0' && mode != NULL && !strcmp(mode, "noop"))
        return "";
    /* the shim root beside this binary's build tree (build/cli/nearattn -> build/xrt-root) */
    snprintf(shim, sizeof(shim), "<build>/xrt-root");
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        if ((slash = strrchr(exe, '/')) != NULL) {
            *slash = '\0';
            if ((slash = strrchr(exe, '/')) != NULL) {
                struct stat sb;
                *slash = '\0';
                snprintf(shim, sizeof(shim), "%s/xrt-root", exe);
                if (stat(shim, &sb) != 0)
                    snprintf(shim, sizeof(shim), "<build>/xrt-root");
            }
        }
    }
    snprintf(hint, sizeof(hint), "; no FPGA here? run the csd host path with the C model "
             "instead: XCL_EMULATION_MODE=noop XILINX_XRT=%s (docs/csd.md)", shim);
    return hint;
}

na_status_t na_xrt_dev_open(const char *device, const char *xclbin, na_xrt_dev_t **d_p)
{
    na_xrt_dev_t *d;
    xuid_t uuid;
    struct stat sb;
    char *end;
    unsigned long idx;
    int noop;
    na_status_t st = na_xrt_env_check(&noop);

    if (st != NA_OK)
        return st;
    if (device == NULL || device[0] == '\0')
        return na_err(NA_ERR_INVALID, "csd: no device given (an index such as 0, or a BDF)");
    if (xclbin == NULL || stat(xclbin, &sb) != 0)
        return na_err(NA_ERR_NOT_FOUND, "csd: xclbin %s: %s (write one for noop with "
                      "`nearattn csd-xclbin --out FILE`)", xclbin ? xclbin : "(none)",
                      xclbin ? strerror(errno) : "not set");
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return na_err(NA_ERR_NOMEM, "csd: out of memory");
    d->noop = noop;
    snprintf(d->name, sizeof(d->name), "%s", device);
    errno = 0;
    idx = strtoul(device, &end, 10);
    if (noop) {
        /* noop has no device list (it opens any index): emulate a fixed set so
         * that a wrong index fails as on hardware */
        const char *nd = getenv("NA_CSD_NOOP_DEVICES");
        unsigned long n = nd != NULL && nd[0] != '\0' ? strtoul(nd, NULL, 10) : 4;
        if (*end != '\0' || end == device || idx >= n) {
            free(d);
            return na_err(NA_ERR_NOT_FOUND, "csd: device %s not found: XRT noop emulates "
                          "devices 0..%lu by index (NA_CSD_NOOP_DEVICES=%lu)", device,
                          n ? n - 1 : 0, n);
        }
    }
    if (*end == '\0' && end != device)
        d->dev = xrtDeviceOpen((unsigned)idx);
    else
        d->dev = xrtDeviceOpenByBDF(device);
    if (d->dev == NULL) {
        free(d);
        return na_err(NA_ERR_NOT_FOUND, "csd: xrtDeviceOpen(%s) failed: no such device%s",
                      device, noop ? " (XRT noop)" : " (xbutil examine lists the devices)");
    }
    if (xrtDeviceLoadXclbinFile(d->dev, xclbin) != 0) {
        st = na_err(NA_ERR_FORMAT, "csd: xrtDeviceLoadXclbinFile(%s) on device %s failed: not "
                    "a valid xclbin for it", xclbin, device);
        goto fail;
    }
    if (xrtDeviceGetXclbinUUID(d->dev, uuid) != 0) {
        st = na_err(NA_ERR_FORMAT, "csd: xrtDeviceGetXclbinUUID(device %s) failed", device);
        goto fail;
    }
    d->kern = xrtPLKernelOpen(d->dev, uuid, NA_CSD_KERNEL_NAME);
    if (d->kern == NULL) {
        st = na_err(NA_ERR_NOT_FOUND, "csd: xrtPLKernelOpen(%s) failed: %s has no such kernel "
                    "(build it from kernels/csd, docs/csd.md)", NA_CSD_KERNEL_NAME, xclbin);
        goto fail;
    }
    d->run = xrtRunOpen(d->kern);
    if (d->run == NULL) {
        st = na_err(NA_ERR_IO, "csd: xrtRunOpen(%s) failed", NA_CSD_KERNEL_NAME);
        goto fail;
    }
    *d_p = d;
    return NA_OK;
fail:
    na_xrt_dev_close(d);
    return st;
}

void na_xrt_dev_close(na_xrt_dev_t *d)
{
    if (d == NULL)
        return;
    if (d->run != NULL)
        xrtRunClose(d->run);
    if (d->kern != NULL)
        xrtKernelClose(d->kern);
    if (d->dev != NULL)
        xrtDeviceClose(d->dev);
    free(d);
}

int na_xrt_dev_noop(const na_xrt_dev_t *d)
{
    return d->noop;
}

const char *na_xrt_dev_mode(const na_xrt_dev_t *d)
{
    return d->noop ? NA_XRT_NOOP_NAME : NA_XRT_HW_NAME;
}

na_status_t na_xrt_bo_alloc(na_xrt_dev_t *d, size_t size, int p2p, int argno,
                            na_xrt_bo_t **bo_p)
{
    na_xrt_bo_t *bo = calloc(1, sizeof(*bo));
    int grp;

    if (bo == NULL)
        return na_err(NA_ERR_NOMEM, "csd: out of memory");
    /* whole 4 KiB pages: XRT takes the size to aligned_alloc(4096, size) */
    size = (size + 4095) & ~(size_t)4095;
    grp = xrtKernelArgGroupId(d->kern, argno);
    if (grp < 0) {
        free(bo);
        return na_err(NA_ERR_FORMAT, "csd: xrtKernelArgGroupId(%d) failed: the xclbin does not "
                      "connect argument %d to a memory bank", argno, argno);
    }
    bo->h = xrtBOAlloc(d->dev, size, p2p ? XCL_BO_FLAGS_P2P : XRT_BO_FLAGS_NONE,
                       (xrtMemoryGroup)grp);
    if (bo->h == NULL) {
        free(bo);
        return na_err(NA_ERR_NOSPACE, "csd: xrtBOAlloc(%zu bytes%s, bank %d) failed", size,
                      p2p ? ", P2P" : "", grp);
    }
    bo->map = xrtBOMap(bo->h);
    if (bo->map == NULL) {
        xrtBOFree(bo->h);
        free(bo);
        return na_err(NA_ERR_IO, "csd: xrtBOMap(%zu bytes) failed", size);
    }
    bo->size = size;
    *bo_p = bo;
    return NA_OK;
}

void na_xrt_bo_free(na_xrt_bo_t *bo)
{
    if (bo == NULL)
        return;
    xrtBOFree(bo->h);
    free(bo);
}

void *na_xrt_bo_map(na_xrt_bo_t *bo)
{
    return bo->map;
}

size_t na_xrt_bo_size(const na_xrt_bo_t *bo)
{
    return bo->size;
}

na_status_t na_xrt_bo_sync(na_xrt_bo_t *bo, int to_dev, size_t len, size_t off)
{
    if (len == 0)
        return NA_OK;
    if (xrtBOSync(bo->h, to_dev ? XCL_BO_SYNC_BO_TO_DEVICE : XCL_BO_SYNC_BO_FROM_DEVICE,
                  len, off) != 0)
        return na_err(NA_ERR_IO, "csd: xrtBOSync(%s, %zu bytes) failed",
                      to_dev ? "to device" : "from device", len);
    return NA_OK;
}

na_status_t na_xrt_run(na_xrt_dev_t *d, const na_xrt_launch_t *l, int timeout_ms)
{
    enum ert_cmd_state s;
    int rc = 0;

    if (d->hung) {                  /* the last run timed out: is it done now? */
        s = (enum ert_cmd_state)xrtRunState(d->run);
        if (s == ERT_CMD_STATE_NEW || s == ERT_CMD_STATE_QUEUED ||
            s == ERT_CMD_STATE_SUBMITTED || s == ERT_CMD_STATE_RUNNING)
            return na_err(NA_ERR_BUSY, "csd: device %s: an earlier run never completed (the "
                          "device needs a reset: xbutil reset)", d->name);
        d->hung = 0;
    }
    rc |= xrtRunSetArg(d->run, NA_CSD_ARG_DESC, l->desc->h);
    rc |= xrtRunSetArg(d->run, NA_CSD_ARG_N_JOBS, l->n_jobs);
    rc |= xrtRunSetArg(d->run, NA_CSD_ARG_PAGES, l->pages->h);
    rc |= xrtRunSetArg(d->run, NA_CSD_ARG_N_PAGES, l->n_page_entries);
    rc |= xrtRunSetArg(d->run, NA_CSD_ARG_KV, l->kv->h);
    rc |= xrtRunSetArg(d->run, NA_CSD_ARG_KV_BYTES, l->kv_bytes);
    rc |= xrtRunSetArg(d->run, NA_CSD_ARG_Q, l->q->h);
    rc |= xrtRunSetArg(d->run, NA_CSD_ARG_O, l->o->h);
    rc |= xrtRunSetArg(d->run, NA_CSD_ARG_LSE, l->lse->h);
    rc |= xrtRunSetArg(d->run, NA_CSD_ARG_STATUS, l->status->h);
    rc |= xrtRunSetArg(d->run, NA_CSD_ARG_HEAD_DIM, l->head_dim);
    rc |= xrtRunSetArg(d->run, NA_CSD_ARG_GROUP, l->group);
    rc |= xrtRunSetArg(d->run, NA_CSD_ARG_PAGE_TOKENS, l->page_tokens);
    rc |= xrtRunSetArg(d->run, NA_CSD_ARG_SCALE, (double)l->scale);   /* varargs: double */
    if (rc != 0)
        return na_err(NA_ERR_IO, "csd: xrtRunSetArg on device %s failed", d->name);
    if (xrtRunStart(d->run) != 0)
        return na_err(NA_ERR_IO, "csd: xrtRunStart on device %s failed", d->name);
    s = xrtRunWaitFor(d->run, (unsigned)(timeout_ms > 0 ? timeout_ms : 1));
    if (s == ERT_CMD_STATE_COMPLETED)
        return NA_OK;
    if (s == ERT_CMD_STATE_NEW || s == ERT_CMD_STATE_QUEUED || s == ERT_CMD_STATE_SUBMITTED ||
        s == ERT_CMD_STATE_RUNNING) {
        d->hung = 1;
        return na_err(NA_ERR_TIMEOUT, "csd: xrtRunWaitFor on device %s: the run did not "
                      "complete in %d ms", d->name, timeout_ms);
    }
    return na_err(NA_ERR_IO, "csd: xrtRunWaitFor on device %s: run ended in state %d", d->name,
                  (int)s);
}
