/* rdma/ses_fault.h — the fault-injecting test double of the session layer:
 * every protocol message a process sends goes through ses_send
 * (rdma/session.c), which asks na_ses_fault_pick what to do with it when
 * the "xp" part of NA_FAULTS (docs/fault-injection.md) is set; otherwise
 * the cost is one branch on na_ses_faults_on. */
#ifndef NA_SES_FAULT_H
#define NA_SES_FAULT_H

#include "common/status.h"

typedef enum {
    NA_SES_FAULT_NONE     = 0,
    NA_SES_FAULT_DROP     = 1,  /* not sent at all */
    NA_SES_FAULT_CORRUPT  = 2,  /* a header byte flipped: the decoder refuses it */
    NA_SES_FAULT_TRUNCATE = 3,  /* sent one byte short: the length check refuses it */
    NA_SES_FAULT_DUP      = 4,  /* sent twice */
    NA_SES_FAULT_FAIL     = 5,  /* not sent: the send fails (a failed UCX endpoint) */
} na_ses_fault_t;

extern int na_ses_faults_on;    /* 1 once NA_FAULTS has an xp part */

/* Read NA_FAULTS once per process (later calls return the first result).
 * NA_ERR_INVALID (message set) on a malformed xp part; on success with an
 * xp part, a TEST DOUBLE line on stderr. */
na_status_t na_ses_fault_init(void);

/* What to do with the next message (of type tname, to peer): may sleep
 * (delay_ms, stall_ms) before answering; logs every injection. */
na_ses_fault_t na_ses_fault_pick(const char *who, const char *tname, const char *peer);

#endif /* NA_SES_FAULT_H */
