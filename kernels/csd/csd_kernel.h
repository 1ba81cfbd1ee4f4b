/* kernels/csd/csd_kernel.h — the computational-storage decode-attention
 * kernel: the code that runs on the FPGA beside the SSD (SmartSSD), written
 * in C11 for Vitis HLS, and run on the CPU as the FPGA's stand-in where no
 * bitstream runs (XRT noop: storage-node/attn_csd.c).
 *
 * One launch computes n_jobs jobs. A job is one (request, KV head): its
 * n_tokens context tokens lie in n_pages pages of the device KV buffer
 * (page p of the job at byte offset pages[page0 + p].off). A page holds
 * page_tokens tokens of one KV head as f16
 *     [K rows: page_tokens x head_dim][V rows: page_tokens x head_dim]
 * (the storage node's block layout for one head, kv_store.h), so pages read
 * from the SSD land in device memory with no reformatting. Each K and V row
 * is read once (burst) for all `group` query heads of the job (GQA) and
 * folded by online softmax in f32. Per query head the kernel writes the
 * normalised output o and its log-sum-exp lse = m + ln(l), so partial results
 * of the same head from several CSDs (disjoint token ranges) merge exactly
 * as in flash-decoding (na_csd_merge).
 *
 * Bad input fails the job only (status[j], NA_CSD_*), never the launch: a
 * descriptor whose pages fall outside the page table or do not cover its
 * tokens, a page outside the KV buffer, a page whose checksum fails. */
#ifndef NA_CSD_KERNEL_H
#define NA_CSD_KERNEL_H

#include <stddef.h>
#include <stdint.h>

/* On-chip buffer bounds (HLS sizes BRAM from these). */
#define NA_CSD_MAX_HEAD_DIM 256
#define NA_CSD_MAX_GROUP    16

/* Page flags. */
#define NA_CSD_PAGE_SUM 1u     /* verify the page's sum (na_csd_page_sum) */

/* Job status codes (status[j]). */
#define NA_CSD_OK        0
#define NA_CSD_BAD_DESC  1     /* pages outside the table, or too few for n_tokens */
#define NA_CSD_BAD_PAGE  2     /* a page outside the KV buffer or misaligned */
#define NA_CSD_CHECKSUM  3     /* a page's checksum did not match */
#define NA_CSD_BAD_SHAPE 4     /* head_dim/group/page_tokens out of the kernel's bounds */

typedef struct {
    uint64_t req;          /* request id (for the host's messages) */
    uint32_t kv_head;      /* KV head (for the host's messages) */
    uint32_t n_tokens;     /* context tokens (0: o = 0, lse = -inf) */
    uint32_t page0;        /* first entry in the page table */
    uint32_t n_pages;      /* entries (>= ceil(n_tokens / page_tokens)) */
    uint32_t rsvd[2];      /* 0 */
} na_csd_desc_t;           /* 32 bytes */

typedef struct {
    uint64_t off;          /* byte offset of the page in the KV buffer */
    uint32_t sum;          /* na_csd_page_sum of its bytes (with NA_CSD_PAGE_SUM) */
    uint32_t flags;        /* NA_CSD_PAGE_* */
} na_csd_page_t;           /* 16 bytes */

typedef struct {
    uint32_t head_dim;     /* <= NA_CSD_MAX_HEAD_DIM */
    uint32_t group;        /* query heads per KV head, <= NA_CSD_MAX_GROUP */
    uint32_t page_tokens;  /* tokens per page */
    float    scale;        /* 1/sqrt(head_dim) */
} na_csd_shape_t;

/* Bytes of one page: 2 * page_tokens * head_dim f16. */
uint64_t na_csd_page_bytes(const na_csd_shape_t *s);

/* Checksum of one page (Fletcher-32 over its 16-bit words; n even). */
uint32_t na_csd_page_sum(const void *page, uint64_t n);

/* The kernel. q: n_jobs x group x head_dim f32 (RoPE applied); o: same;
 * lse: n_jobs x group; status: n_jobs. kv: kv_bytes of device memory. */
void na_csd_attn(const na_csd_desc_t *desc, uint32_t n_jobs,
                 const na_csd_page_t *pages, uint32_t n_page_entries,
                 const uint16_t *kv, uint64_t kv_bytes,
                 const float *q, float *o, float *lse, int32_t *status,
                 na_csd_shape_t shape);

/* The top function v++ builds (kernel NA_CSD_KERNEL_NAME, arguments in the
 * order of storage-node/csd_xclbin.h): na_csd_attn with the shape as scalars. */
void na_csd_top(const na_csd_desc_t *desc, uint32_t n_jobs, const na_csd_page_t *pages,
                uint32_t n_page_entries, const uint16_t *kv, uint64_t kv_bytes,
                const float *q, float *o, float *lse, int32_t *status,
                uint32_t head_dim, uint32_t group, uint32_t page_tokens, float scale);

/* Merge partial b (o_b, lse_b) of one query head into a (flash-decoding):
 * afterwards a is the result over both token ranges. */
void na_csd_merge(float *o_a, float *lse_a, const float *o_b, float lse_b, int head_dim);

/* Static name of a status code ("bad descriptor", ...). */
const char *na_csd_status_name(int32_t st);

#endif /* NA_CSD_KERNEL_H */
