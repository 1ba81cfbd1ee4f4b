/* rdma/xp_echo.h — ECHO (common/wire.h) request/answer over the transport. */
#ifndef NA_RDMA_XP_ECHO_H
#define NA_RDMA_XP_ECHO_H

#include "rdma/transport.h"

/* Start sending an ECHO with header flags (0: a request; NA_WIRE_F_REPLY: the
 * answer; NA_WIRE_F_MORE: a streamed request that is not answered — the
 * stream's last message, without MORE, is), sequence number seq and payload
 * data (len bytes, valid until the op completes; buf = its registered buffer
 * or NULL). As na_xp_send_start. */
na_status_t na_xp_echo_start(na_xp_ep_t *ep, uint32_t seq, unsigned flags, const void *data,
                             size_t len, const na_xp_buf_t *buf, na_xp_op_t **op_p);
/* Same, waiting for local completion. */
na_status_t na_xp_echo_send(na_xp_ep_t *ep, uint32_t seq, unsigned flags, const void *data,
                            size_t len);
/* Validate msg as a wire message; if it is an ECHO give its seq and flags.
 * NA_ERR_NOT_FOUND: a valid header of another type; NA_ERR_PROTO /
 * NA_ERR_VERSION: drop the peer. */
na_status_t na_xp_echo_parse(const na_xp_msg_t *msg, uint32_t *seq_p, unsigned *flags_p);
/* Answer an ECHO request with the same payload and seq (answers and MORE
 * messages are not answered). Errors as na_xp_echo_parse, or the send's. */
na_status_t na_xp_echo_serve(const na_xp_msg_t *msg);

#endif /* NA_RDMA_XP_ECHO_H */
