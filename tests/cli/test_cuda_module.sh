#!/bin/sh
# tests/cli/test_cuda_module.sh MODULE LIBDIR — the CUDA backend module's
# dynamic section: no link-time dependency on NCCL (it is dlopened by
# kernels/cuda/cuda_tp.c), a RUNPATH naming the toolkit's library folder
# LIBDIR, and every library it needs resolved without LD_LIBRARY_PATH.
set -u
MOD=${1:?usage: test_cuda_module.sh MODULE LIBDIR}
LIBDIR=${2:?usage: test_cuda_module.sh MODULE LIBDIR}
FAILS=0
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }

dyn=$(readelf -d "$MOD") || { echo "FAIL: readelf -d $MOD" >&2; exit 1; }
echo "$dyn" | grep -E "NEEDED|RUNPATH|RPATH"
echo "$dyn" | grep -q "NEEDED.*libnccl" && fail "$MOD needs libnccl at link time"
echo "$dyn" | grep -q "NEEDED.*libcudart" || fail "$MOD does not need libcudart (not the module?)"
runpath=$(echo "$dyn" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
[ -n "$runpath" ] || fail "$MOD has no RUNPATH"
case ":$runpath:" in *":$LIBDIR:"*) ;; *) fail "RUNPATH '$runpath' lacks $LIBDIR" ;; esac
nf=$(env -u LD_LIBRARY_PATH ldd "$MOD" | grep "not found")
[ -z "$nf" ] || fail "unresolved without LD_LIBRARY_PATH: $nf"
[ "$FAILS" -eq 0 ] && echo "test_cuda_module: ok" && exit 0
exit 1
