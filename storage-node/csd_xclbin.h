/* storage-node/csd_xclbin.h — the CSD kernel's interface as XRT sees it, and
 * a writer of a metadata-only xclbin for it.
 *
 * The kernel (kernels/csd/csd_kernel.h, top function na_csd_top) has the
 * arguments below; storage-node/xrt_dev.c sets them by these indices. A
 * real xclbin is built with v++ (docs/csd.md); the metadata-only one written
 * here has the same kernel name, arguments, memory bank, compute unit and
 * connectivity but no bitstream: XRT's noop shim (XCL_EMULATION_MODE=noop)
 * loads it and runs the whole host path, the kernel itself does nothing. */
#ifndef NA_CSD_XCLBIN_H
#define NA_CSD_XCLBIN_H

#include "common/status.h"

#define NA_CSD_KERNEL_NAME "na_csd_top"

/* Kernel argument indices (pointers: device buffers; the rest scalars). */
enum {
    NA_CSD_ARG_DESC = 0,      /* const na_csd_desc_t *           */
    NA_CSD_ARG_N_JOBS,        /* uint32                          */
    NA_CSD_ARG_PAGES,         /* const na_csd_page_t *           */
    NA_CSD_ARG_N_PAGES,       /* uint32                          */
    NA_CSD_ARG_KV,            /* const uint16_t * (f16 pages)    */
    NA_CSD_ARG_KV_BYTES,      /* uint64                          */
    NA_CSD_ARG_Q,             /* const float *                   */
    NA_CSD_ARG_O,             /* float *                         */
    NA_CSD_ARG_LSE,           /* float *                         */
    NA_CSD_ARG_STATUS,        /* int32 *                         */
    NA_CSD_ARG_HEAD_DIM,      /* uint32                          */
    NA_CSD_ARG_GROUP,         /* uint32                          */
    NA_CSD_ARG_PAGE_TOKENS,   /* uint32                          */
    NA_CSD_ARG_SCALE,         /* float (passed as double through varargs) */
    NA_CSD_N_ARGS
};

/* Write the metadata-only xclbin to path (created or truncated). */
na_status_t na_xrt_xclbin_write(const char *path);

#endif /* NA_CSD_XCLBIN_H */
