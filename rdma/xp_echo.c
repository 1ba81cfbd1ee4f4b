/* rdma/xp_echo.c — ECHO messages (common/wire.h) over the transport: the
 * round trip the tests and `nearattn bench transport` measure. The header is
 * encoded on its own; the payload travels as the message's data part, so a
 * MiB payload is never copied into a contiguous buffer. */
#include <string.h>

#include "common/wire.h"
#include "rdma/xp_echo.h"

na_status_t na_xp_echo_start(na_xp_ep_t *ep, uint32_t seq, unsigned flags, const void *data,
                             size_t len, const na_xp_buf_t *buf, na_xp_op_t **op_p)
{
    na_wire_hdr_t h;
    uint8_t hdr[NA_WIRE_HDR_SIZE];

    memset(&h, 0, sizeof(h));
    h.type = NA_WIRE_MSG_ECHO;
    h.flags = (uint16_t)(flags & NA_WIRE_F_KNOWN);
    h.payload_len = len;
    h.seq = seq;
    h.time_ns = 0;                     /* no clock read on the latency path */
    na_wire_hdr_encode(hdr, &h);
    return na_xp_send_start(ep, hdr, sizeof(hdr), data, len, buf, op_p);
}

na_status_t na_xp_echo_send(na_xp_ep_t *ep, uint32_t seq, unsigned flags, const void *data,
                            size_t len)
{
    na_xp_op_t *op;
    na_status_t st = na_xp_echo_start(ep, seq, flags, data, len, NULL, &op);
    if (st != NA_OK)
        return st;
    return na_xp_op_wait(NULL, op, -1);
}

na_status_t na_xp_echo_parse(const na_xp_msg_t *msg, uint32_t *seq_p, unsigned *flags_p)
{
    na_wire_hdr_t h;
    na_wire_msg_t m;
    na_status_t st;

    st = na_wire_hdr_decode(msg->hdr, msg->hdr_len, &h);
    if (st != NA_OK)
        return st;
    if (h.hdr_len != msg->hdr_len)
        return na_err(NA_ERR_PROTO, "wire: header says %u header bytes, %zu arrived",
                      (unsigned)h.hdr_len, msg->hdr_len);
    if (h.type != NA_WIRE_MSG_ECHO)
        return NA_ERR_NOT_FOUND;
    st = na_wire_decode(&h, msg->data, msg->len, &m);
    if (st != NA_OK)
        return st;
    *seq_p = h.seq;
    *flags_p = h.flags;
    return NA_OK;
}

na_status_t na_xp_echo_serve(const na_xp_msg_t *msg)
{
    uint32_t seq;
    unsigned flags;
    na_status_t st = na_xp_echo_parse(msg, &seq, &flags);
    if (st != NA_OK)
        return st;
    if (flags & (NA_WIRE_F_REPLY | NA_WIRE_F_MORE))
        return NA_OK;                  /* an answer, or part of a stream: no answer */
    {
        /* answer from the landing buffer, registered already (no lookup) */
        na_xp_op_t *op;
        st = na_xp_echo_start(msg->ep, seq, NA_WIRE_F_REPLY, msg->data, msg->len,
                              msg->pool_buf, &op);
        if (st != NA_OK)
            return st;
        return na_xp_op_wait(NULL, op, -1);
    }
}
