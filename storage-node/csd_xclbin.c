/* storage-node/csd_xclbin.c — the metadata-only xclbin of the CSD kernel
 * (csd_xclbin.h), written from the structs of XRT's xclbin.h: MEM_TOPOLOGY
 * (one DDR bank, the SmartSSD's 4 GiB), IP_LAYOUT (one compute unit),
 * CONNECTIVITY (every pointer argument on bank 0) and EMBEDDED_METADATA (the
 * XML XRT reads kernel arguments from). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xclbin.h>

#include "storage-node/csd_xclbin.h"

/* Argument table: name, pointer (1) or scalar (0), bytes, C type. */
static const struct { const char *name; int ptr; int size; const char *type; }
na_csd_args[NA_CSD_N_ARGS] = {
    { "desc", 1, 8, "void*" },        { "n_jobs", 0, 4, "unsigned int" },
    { "pages", 1, 8, "void*" },       { "n_page_entries", 0, 4, "unsigned int" },
    { "kv", 1, 8, "void*" },          { "kv_bytes", 0, 8, "unsigned long" },
    { "q", 1, 8, "float*" },          { "o", 1, 8, "float*" },
    { "lse", 1, 8, "float*" },        { "status", 1, 8, "int*" },
    { "head_dim", 0, 4, "unsigned int" }, { "group", 0, 4, "unsigned int" },
    { "page_tokens", 0, 4, "unsigned int" }, { "scale", 0, 4, "float" },
};

#define NA_CSD_CU_BASE 0x1800000ull

/* The EMBEDDED_METADATA XML into buf; returns its length or -1. */
static int na_csd_xml(char *buf, size_t cap)
{
    size_t n = 0;
    unsigned off = 0x10;
    int i, w;

#define NA_XML(...) do { w = snprintf(buf + n, cap - n, __VA_ARGS__); \
        if (w < 0 || (size_t)w >= cap - n) \
            return -1; \
        n += (size_t)w; \
    } while (0)
    NA_XML("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
           "<project name=\"nearattn_csd\">\n <platform vendor=\"xilinx\" boardid=\"smartssd\" "
           "name=\"nearattn_noop\" featureRomTime=\"0\">\n  <version major=\"1\" minor=\"0\"/>\n"
           "  <device name=\"fpga0\" fpgaDevice=\"kintexuplus\">\n   <core name=\"OCL_REGION_0\" "
           "target=\"hw\" type=\"clc_region\" clockFreq=\"300MHz\" numComputeUnits=\"1\">\n"
           "    <kernel name=\"%s\" language=\"c\" vlnv=\"nearattn:hls:%s:1.0\" "
           "preferredWorkGroupSizeMultiple=\"0\" workGroupSize=\"1\" interrupt=\"true\" "
           "hwControlProtocol=\"ap_ctrl_hs\">\n"
           "     <port name=\"S_AXI_CONTROL\" mode=\"slave\" range=\"0x1000\" dataWidth=\"32\" "
           "portType=\"addressable\" base=\"0x0\"/>\n"
           "     <port name=\"M_AXI_GMEM\" mode=\"master\" range=\"0xFFFFFFFFFFFFFFFF\" "
           "dataWidth=\"512\" portType=\"addressable\" base=\"0x0\"/>\n",
           NA_CSD_KERNEL_NAME, NA_CSD_KERNEL_NAME);
    for (i = 0; i < NA_CSD_N_ARGS; i++) {
        NA_XML("     <arg name=\"%s\" addressQualifier=\"%d\" id=\"%d\" port=\"%s\" "
               "size=\"0x%x\" offset=\"0x%x\" hostOffset=\"0x0\" hostSize=\"0x%x\" "
               "type=\"%s\"/>\n", na_csd_args[i].name, na_csd_args[i].ptr, i,
               na_csd_args[i].ptr ? "M_AXI_GMEM" : "S_AXI_CONTROL",
               (unsigned)na_csd_args[i].size, off, (unsigned)na_csd_args[i].size,
               na_csd_args[i].type);
        off += na_csd_args[i].size == 8 ? 12 : 8;    /* HLS register map stride */
    }
    NA_XML("     <instance name=\"%s_1\">\n      <addrRemap base=\"0x%llx\" "
           "port=\"S_AXI_CONTROL\"/>\n     </instance>\n    </kernel>\n   </core>\n"
           "  </device>\n </platform>\n</project>\n", NA_CSD_KERNEL_NAME,
           (unsigned long long)NA_CSD_CU_BASE);
#undef NA_XML
    return (int)n;
}

na_status_t na_xrt_xclbin_write(const char *path)
{
    enum { N_SEC = 4 };
    char xml[8192];
    struct mem_topology mt;
    struct ip_layout ipl;
    struct { int32_t m_count; struct connection c[NA_CSD_N_ARGS]; } con;
    const void *data[N_SEC];
    size_t size[N_SEC], hdr, total;
    static const uint32_t kinds[N_SEC] = { MEM_TOPOLOGY, IP_LAYOUT, CONNECTIVITY,
                                           EMBEDDED_METADATA };
    static const char *const names[N_SEC] = { "mem_topology", "ip_layout", "connectivity",
                                              "xml" };
    struct axlf *top;
    unsigned char *img;
    int xl = na_csd_xml(xml, sizeof(xml)), i, nc = 0;
    FILE *f;

    if (xl < 0)
        return na_err(NA_ERR_INTERNAL, "csd xclbin: kernel metadata does not fit");
    memset(&mt, 0, sizeof(mt));
    mt.m_count = 1;
    mt.m_mem_data[0].m_type = MEM_DDR4;
    mt.m_mem_data[0].m_used = 1;
    mt.m_mem_data[0].m_size = 4ull << 20;                /* KiB: 4 GiB */
    mt.m_mem_data[0].m_base_address = 0;
    snprintf((char *)mt.m_mem_data[0].m_tag, sizeof(mt.m_mem_data[0].m_tag), "bank0");
    memset(&ipl, 0, sizeof(ipl));
    ipl.m_count = 1;
    ipl.m_ip_data[0].m_type = IP_KERNEL;
    ipl.m_ip_data[0].properties = (uint32_t)AP_CTRL_HS << 8;   /* no interrupt: polled */
    ipl.m_ip_data[0].m_base_address = NA_CSD_CU_BASE;
    snprintf((char *)ipl.m_ip_data[0].m_name, sizeof(ipl.m_ip_data[0].m_name), "%s:%s_1",
             NA_CSD_KERNEL_NAME, NA_CSD_KERNEL_NAME);
    memset(&con, 0, sizeof(con));
    for (i = 0; i < NA_CSD_N_ARGS; i++)
        if (na_csd_args[i].ptr) {
            con.c[nc].arg_index = i;
            con.c[nc].m_ip_layout_index = 0;
            con.c[nc].mem_data_index = 0;
            nc++;
        }
    con.m_count = nc;
    data[0] = &mt;  size[0] = sizeof(mt);
    data[1] = &ipl; size[1] = sizeof(ipl);
    data[2] = &con; size[2] = sizeof(int32_t) + sizeof(struct connection) * (size_t)nc;
    data[3] = xml;  size[3] = (size_t)xl;

    hdr = sizeof(struct axlf) + sizeof(struct axlf_section_header) * (N_SEC - 1);
    total = hdr;
    for (i = 0; i < N_SEC; i++)
        total += (size[i] + 7) & ~(size_t)7;
    img = calloc(1, total);
    if (img == NULL)
        return na_err(NA_ERR_NOMEM, "csd xclbin: out of memory");
    top = (struct axlf *)img;
    memcpy(top->m_magic, "xclbin2", 8);
    top->m_signature_length = -1;
    memset(top->reserved, 0xff, sizeof(top->reserved));
    top->m_uniqueId = 0x6e656172617474ull;               /* "nearatt" */
    top->m_header.m_length = total;
    top->m_header.m_timeStamp = (uint64_t)time(NULL);
    top->m_header.m_versionMajor = 2;
    top->m_header.m_versionMinor = 13;
    top->m_header.m_mode = XCLBIN_FLAT;
    snprintf((char *)top->m_header.m_platformVBNV, sizeof(top->m_header.m_platformVBNV),
             "xilinx_u2_gen3x4_xdma_gc_2_202110_1");       /* the SmartSSD's shell */
    for (i = 0; i < 16; i++)                               /* fixed uuid: tests compare it */
        top->m_header.uuid[i] = (unsigned char)(0xc5 ^ (i * 17));
    top->m_header.m_numSections = N_SEC;
    total = hdr;
    for (i = 0; i < N_SEC; i++) {
        struct axlf_section_header *s = &top->m_sections[i];
        s->m_sectionKind = kinds[i];
        snprintf(s->m_sectionName, sizeof(s->m_sectionName), "%s", names[i]);
        s->m_sectionOffset = total;
        s->m_sectionSize = size[i];
        memcpy(img + total, data[i], size[i]);
        total += (size[i] + 7) & ~(size_t)7;
    }
    f = fopen(path, "wb");
    if (f == NULL) {
        free(img);
        return na_err(NA_ERR_IO, "csd xclbin: fopen(%s): %s", path, strerror(errno));
    }
    {
        size_t wr = fwrite(img, 1, total, f);
        int cl = fclose(f);
        free(img);
        if (wr != total || cl != 0)
            return na_err(NA_ERR_IO, "csd xclbin: write(%s) failed", path);
    }
    return NA_OK;
}
