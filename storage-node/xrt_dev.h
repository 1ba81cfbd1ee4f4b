/* storage-node/xrt_dev.h — the XRT host layer of a computational-storage
 * slot: one FPGA device (by index or PCIe BDF) with the CSD kernel's xclbin
 * loaded, its buffers (P2P buffers for KV pages read straight from the SSD)
 * and kernel runs with a timeout. Only this file and xrt_dev.c call xrt*.
 *
 * XRT aborts the process when XILINX_XRT is unset, so na_xrt_dev_open
 * checks the environment first: XILINX_XRT must name an XRT root whose lib/
 * holds the driver shim (for XCL_EMULATION_MODE=noop: libxrt_noop.so.2; the
 * build tree has one, build/xrt-root). Modes: "noop" (XRT's host path runs
 * for real, the kernel does nothing: the caller runs the C kernel on the
 * mapped buffers after the run and must say so, NA_XRT_NOOP_NAME) and "hw"
 * (a real device); sw_emu/hw_emu need Vitis and are refused. Every handle is
 * released by the matching free/close (noop crashes at exit otherwise). */
#ifndef NA_XRT_DEV_H
#define NA_XRT_DEV_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define NA_XRT_NOOP_NAME "csd: XRT noop + C model"
#define NA_XRT_HW_NAME   "csd: XRT hardware"

typedef struct na_xrt_dev na_xrt_dev_t;
typedef struct na_xrt_bo  na_xrt_bo_t;

/* XILINX_XRT set, its shim present, mode known. NA_OK, or NA_ERR_UNSUPPORTED
 * with what to set. *noop_p = 1 under XCL_EMULATION_MODE=noop. */
na_status_t na_xrt_env_check(int *noop_p);
/* "" when XCL_EMULATION_MODE=noop and XILINX_XRT are set; otherwise how to
 * run the C model without an FPGA ("; no FPGA? ... XCL_EMULATION_MODE=noop
 * XILINX_XRT=<the build tree's xrt-root> ..."), to append to an error.
 * A static string; cannot fail. */
const char *na_xrt_noop_hint(void);

/* Open device `device` ("0", "1", ... or a BDF "0000:3b:00.1"), load xclbin
 * (path) and open the kernel NA_CSD_KERNEL_NAME. Errors name the failing
 * call: NA_ERR_NOT_FOUND (no such device / file / kernel), NA_ERR_FORMAT (a
 * file XRT refuses as xclbin), NA_ERR_UNSUPPORTED (environment). */
na_status_t na_xrt_dev_open(const char *device, const char *xclbin, na_xrt_dev_t **d_p);
void        na_xrt_dev_close(na_xrt_dev_t *d);
int         na_xrt_dev_noop(const na_xrt_dev_t *d);
/* NA_XRT_NOOP_NAME or NA_XRT_HW_NAME. */
const char *na_xrt_dev_mode(const na_xrt_dev_t *d);

/* A buffer in the memory bank of kernel argument `argno`, mapped into the
 * host. p2p = 1: a P2P buffer (the SSD DMAs into it; XCL_BO_FLAGS_P2P). */
na_status_t na_xrt_bo_alloc(na_xrt_dev_t *d, size_t size, int p2p, int argno,
                            na_xrt_bo_t **bo_p);
void        na_xrt_bo_free(na_xrt_bo_t *bo);
void       *na_xrt_bo_map(na_xrt_bo_t *bo);
size_t      na_xrt_bo_size(const na_xrt_bo_t *bo);
/* Sync bytes [off, off+len) to the device (to_dev = 1) or back. */
na_status_t na_xrt_bo_sync(na_xrt_bo_t *bo, int to_dev, size_t len, size_t off);

/* One kernel launch: buffers and scalars by argument (csd_xclbin.h). */
typedef struct {
    na_xrt_bo_t *desc, *pages, *kv, *q, *o, *lse, *status;
    uint32_t     n_jobs, n_page_entries, head_dim, group, page_tokens;
    uint64_t     kv_bytes;
    float        scale;
} na_xrt_launch_t;

/* Set the arguments, start, wait at most timeout_ms. NA_ERR_TIMEOUT when the
 * run did not complete (it is aborted), NA_ERR_IO when XRT reports an error
 * state. */
na_status_t na_xrt_run(na_xrt_dev_t *d, const na_xrt_launch_t *l, int timeout_ms);

#endif /* NA_XRT_DEV_H */
