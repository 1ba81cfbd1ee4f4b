/* cli/cmd_csd_xclbin.c — `nearattn csd-xclbin`: write the metadata-only
 * xclbin of the CSD kernel (storage-node/csd_xclbin.h) that XRT's noop shim
 * loads, for tests and for running engine csd without an FPGA. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "storage-node/csd_xclbin.h"

static void na_csd_xclbin_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn csd-xclbin --out FILE\n\n"
        "Write an xclbin holding only the metadata of the CSD attention kernel\n"
        "(" NA_CSD_KERNEL_NAME ": arguments, one DDR bank, one compute unit, connectivity),\n"
        "no bitstream. XRT loads it under XCL_EMULATION_MODE=noop, where the engine\n"
        "csd runs the C model of the kernel (\"csd: XRT noop + C model\"). A real\n"
        "SmartSSD needs the xclbin built by v++ (docs/csd.md).\n\n"
        "options:\n"
        "  --out FILE   output file (created or truncated)\n"
        "  --help       this text\n\n"
        "example:\n"
        "  nearattn csd-xclbin --out /tmp/na_csd.xclbin\n"
        "  XILINX_XRT=build/xrt-root XCL_EMULATION_MODE=noop nearattn run \\\n"
        "      --config cluster-configs/local-csd.yaml ...\n");
}

int na_cmd_csd_xclbin(int argc, char **argv)
{
    static const char *const cmd = "csd-xclbin";
    const char *out = NULL;
    int i;

    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            na_csd_xclbin_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out = argv[++i];
            continue;
        }
        fprintf(stderr, "nearattn %s: unknown option or missing value: %s\n", cmd, argv[i]);
        na_csd_xclbin_usage(stderr);
        return 2;
    }
    if (out == NULL) {
        fprintf(stderr, "nearattn %s: --out FILE is required\n", cmd);
        na_csd_xclbin_usage(stderr);
        return 2;
    }
#if NA_HAVE_XRT
    {
        na_status_t st = na_xrt_xclbin_write(out);
        if (st != NA_OK)
            return na_cli_fail(cmd, st);
    }
    printf("wrote %s (metadata-only xclbin of %s, for XRT noop)\n", out, NA_CSD_KERNEL_NAME);
    return 0;
#else
    fprintf(stderr, "nearattn %s: this nearattn was built without XRT (install libxrt-dev and "
            "rebuild; cmake -DNA_XRT=ON requires it)\n", cmd);
    return 1;
#endif
}
