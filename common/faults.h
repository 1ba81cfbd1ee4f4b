/* common/faults.h — the NA_FAULTS environment variable of the fault-injecting
 * test doubles (docs/fault-injection.md): parts separated by ';', each
 * "NAME:key=value,key=value" ("kv:eio_after=200;xp:drop=0.01,delay_ms=5").
 * One reader of the syntax; each double (storage-node/kv_fault.c for "kv",
 * rdma/session.c for "xp") interprets its own keys. */
#ifndef NA_FAULTS_H
#define NA_FAULTS_H

#include <stddef.h>

/* Called once per key of the part; returns 0, or -1 with a message in err. */
typedef int (*na_faults_key_fn)(void *arg, const char *key, const char *val,
                                char *err, size_t errlen);

/* Call fn for every key=value of part NAME in spec (NULL or "": none).
 * Returns 0 when spec has no such part, 1 when every key was taken, -1 with
 * a message in err ("NA_FAULTS NAME: ...") on a malformed part, and -1 when
 * the spec names a part other than "kv" / "xp" / "csd" / "prefix" /
 * "compute" or one
 * twice. */
int na_faults_part(const char *spec, const char *name, na_faults_key_fn fn, void *arg,
                   char *err, size_t errlen);

/* v = val as a non-negative decimal integer (digits only: no sign, no blank);
 * 0, or -1 with "KEY wants a non-negative integer, not VAL" in err. */
int na_faults_u64(const char *key, const char *val, unsigned long long *v, char *err,
                  size_t errlen);

/* A part of one integer key in [lo, hi] ("compute:op_ms=N",
 * "prefix:hash_bits=N"): na_faults_part's returns, *v set on 1. Refuses
 * another key ("unknown key \"K\" (KEY)") and a value outside the range
 * ("KEY wants LO..HI, not N"). */
int na_faults_part_int(const char *spec, const char *name, const char *key, int lo, int hi,
                       int *v, char *err, size_t errlen);

#endif /* NA_FAULTS_H */
