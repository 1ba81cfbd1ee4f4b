#!/usr/bin/env bash
# scripts/gpu/prepare.sh — run on the build machine (no GPU needed), from any
# directory: build nearattn with CUDA and gather everything a bare GPU machine
# lacks into one git-ignored carry folder, build-gpu/ at the repository root,
# for scripts/gpu/verify.sh to run there (docs/gpu.md).
#
#   build-gpu-work/        the CMake build (Release, CUDA sm_90 SASS + compute_90
#                          PTX, -DNA_XRT=OFF, -DNA_NATIVE=OFF, -DNA_WERROR=ON);
#                          stays here, incremental
#   build-gpu/cli/nearattn, build-gpu/kernels/libna_cuda.so, build-gpu/tests/test_*,
#   build-gpu/tests/na_greedy_top
#                          the binaries, in the build tree's layout (the loader finds
#                          the module in ../kernels/ from the executable);
#                          na_greedy_top for verify.sh's tie-aware check
#                          (scripts/greedy_tie.sh)
#   build-gpu/libs.tar.gz  the Debian packages of every library the binaries and
#                          UCX's transport modules load (ldd; apt-get download +
#                          dpkg -x), except glibc, libstdc++, libgcc_s and CUDA's own
#                          libraries (the GPU machine has them); compressed, as
#                          OpenBLAS alone is 36 MB (verify.sh unpacks it)
#   build-gpu/shared/models/  stories260K.bin and tok512.bin from ../shared/models
#                          (what travels to the GPU machine is this repository only)
#   build-gpu/COMMIT       what was built
#
# The GPU machine must provide: the NVIDIA driver (libcuda.so.1, /dev/nvidiaN),
# the CUDA 13 runtime and cuBLAS (libcudart.so.13, libcublas.so.13,
# libcublasLt.so.13: the toolkit), glibc >= 2.36 and libstdc++ (GCC 12 or
# later), bash, coreutils, sed, awk; optional: NCCL 2 (libnccl.so.2: without
# it test_cuda_tp cannot run and verify.sh reports it failed), python3 (the
# bench ratios), compute-sanitizer (memcheck), readelf (the module's ELF test).
#
# Usage: bash scripts/gpu/prepare.sh        (needs ../shared/models beside the
#        checkout, or NA_SHARED_DIR; apt-get download needs the package lists)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
W=$root/build-gpu-work
C=$root/build-gpu
SH=${NA_SHARED_DIR:-$root/../shared}
JOBS=${JOBS:-2}
TESTS="test_cuda_ops test_cuda_engine test_cuda_tp test_attn_cuda test_attn_cuda_gpu test_cuda_module"
TOOLS="na_greedy_top"            # tests/tools programs verify.sh runs (build-gpu/tests/)
LIMIT_MIB=60
start=$(date +%s)

say() { printf '[prepare] %s\n' "$*"; }
die() { say "FAIL: $*" >&2; exit 1; }
el() { echo "$(( $(date +%s) - start )) s"; }

for t in cmake ninja nvcc git ldd dpkg apt-get readelf; do
    command -v "$t" >/dev/null 2>&1 || [ -x "/usr/local/cuda/bin/$t" ] || die "no $t on this machine"
done
[ -r "$SH/models/stories260K.bin" ] && [ -r "$SH/models/tok512.bin" ] ||
    die "no $SH/models/stories260K.bin or tok512.bin (set NA_SHARED_DIR)"
for d in build-gpu/ build-gpu-work/; do git -C "$root" check-ignore -q "$d" ||
    die "$d must be ignored by git (.gitignore: /build*/)"; done

# 1. the build
say "configure + build into build-gpu-work/ (log build-gpu-work/prepare-build.log)"
mkdir -p "$W"
{ cmake -S "$root" -B "$W" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNA_CUDA=ON -DNA_XRT=OFF \
        -DNA_NATIVE=OFF -DNA_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
  nice ninja -C "$W" -j"$JOBS" nearattn na_cuda $TESTS $TOOLS; } >"$W/prepare-build.log" 2>&1 ||
    { tail -30 "$W/prepare-build.log"; die "build failed (build-gpu-work/prepare-build.log)"; }
warn=$(grep -ci 'warning' "$W/prepare-build.log" || true)
say "built at $(el), $warn warning lines"
# sm_90 machine code and compute_90 PTX in every .cu compile
grep -q 'code=\[compute_90,sm_90\]' "$W/build.ninja" ||
    die "the CUDA compiles do not name code=[compute_90,sm_90] (CMAKE_CUDA_ARCHITECTURES)"
say "CUDA code: sm_90 SASS + compute_90 PTX (code=[compute_90,sm_90] in every .cu compile)"

# 2. the binaries, in the build tree's layout
rm -rf "$C"
mkdir -p "$C/cli" "$C/kernels" "$C/tests" "$C/shared/models"
cp "$W/cli/nearattn" "$C/cli/" && cp "$W/kernels/libna_cuda.so" "$C/kernels/" || die "copy"
for t in $TESTS $TOOLS; do cp "$W/tests/$t" "$C/tests/" || die "copy $t"; done
cp "$SH/models/stories260K.bin" "$SH/models/tok512.bin" "$C/shared/models/" || die "copy models"
{ git -C "$root" log -1 --format='%H %s'
  git -C "$root" status --short --untracked-files=no | sed 's/^/  modified: /'
  echo "built $(date -u +%FT%TZ) on $(. /etc/os-release; echo "$PRETTY_NAME"), $(nvcc --version | tail -1)"
} >"$C/COMMIT"
say "binaries: $(cd "$C" && du -sh cli kernels tests | awk '{printf "%s %s  ", $2, $1}')"

# 3. the runtime libraries: the package owning each library ldd resolves for
#    the binaries and for UCX's transport modules (loaded at run time)
bins="$C/cli/nearattn $C/kernels/libna_cuda.so"
for t in $TESTS $TOOLS; do bins="$bins $C/tests/$t"; done
ucxmods=$(ls /usr/lib/x86_64-linux-gnu/ucx/*.so 2>/dev/null || true)
keep_out='^(libc|libm|libdl|librt|libpthread|libresolv|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so'
pkg_of() {   # the Debian package that owns library file $1 (merged /usr: both spellings)
    local c
    for c in "$1" "$(readlink -f "$1")" "/usr$1" "${1#/usr}"; do
        dpkg -S "$c" 2>/dev/null | head -1 | cut -d: -f1 | grep . && return 0
    done
    return 1
}
libs=$(ldd $bins $ucxmods 2>/dev/null | awk '/=> \//{print $1 " " $3}' | sort -u)
unowned=""
pkgs=$(echo "$libs" | while read -r name path; do
           echo "$name" | grep -qE "$keep_out" && continue
           pkg_of "$path" || echo "UNOWNED:$name" >&2
       done 2>"$W/prepare-unowned.txt" | sort -u)
pkgs=$(echo $pkgs libucx0 | tr ' ' '\n' | sort -u)    # + the transport modules themselves
unowned=$(cat "$W/prepare-unowned.txt")
[ -z "$unowned" ] || die "libraries of no Debian package: $(echo $unowned)"
dl=$(mktemp -d); R=$dl/root
(cd "$dl" && apt-get download -q -o APT::Sandbox::User=root $pkgs >"$W/prepare-apt.log" 2>&1) ||
    { tail -5 "$W/prepare-apt.log"; die "apt-get download failed (apt-get update first?)"; }
for d in "$dl"/*.deb; do dpkg -x "$d" "$R" || die "dpkg -x $d"; done
say "$(ls "$dl"/*.deb | wc -l) packages downloaded and unpacked at $(el): $(echo $pkgs)"
rm -rf "$R/usr/share" "$R/etc"
find "$R" \( -name '*.a' -o -name 'liblapack*' \) -delete   # not loaded
# every library ldd found, but the machine's own, is now in libs/
missing=$(echo "$libs" | while read -r name path; do
              echo "$name" | grep -qE "$keep_out" && continue
              [ -n "$(find "$R" -name "$name" -print -quit)" ] || echo "$name"
          done)
[ -z "$missing" ] || die "not in the carried packages: $(echo $missing)"
# the binaries run with only these (+ the machine's glibc/libstdc++ and CUDA)
nf=$(LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu:$R/usr/lib/x86_64-linux-gnu/openblas-pthread:$R/lib/x86_64-linux-gnu \
     ldd $bins | grep "not found" | sort -u)
[ -z "$nf" ] || die "unresolved with the carried libraries: $nf"
libs_mib=$(du -sm "$R" | cut -f1)
tar -C "$R" -czf "$C/libs.tar.gz" . || die "tar"
rm -rf "$dl"

# 4. sizes: the carry folder and everything that travels (tracked and untracked,
#    not ignored, files of the checkout + the carry folder) must stay under 64 MiB
carry_kib=$(du -sk "$C" | cut -f1)
tree_kib=$(cd "$root" && git ls-files -z -co --exclude-standard | du -ck --files0-from=- 2>/dev/null |
           tail -1 | cut -f1)
say "build-gpu/ $((carry_kib / 1024)) MiB (libs.tar.gz $(du -sh "$C/libs.tar.gz" | cut -f1) of $libs_mib MiB, binaries" \
    "$(du -shc "$C/cli" "$C/kernels" "$C/tests" | tail -1 | cut -f1), models" \
    "$(du -sh "$C/shared" | cut -f1)); with the checkout $(((carry_kib + tree_kib) / 1024)) MiB of 64"
[ $((carry_kib + tree_kib)) -lt $((LIMIT_MIB * 1024)) ] ||
    die "what travels is over $LIMIT_MIB MiB: build fewer targets or prune libs"
say "PASS at $(el): on the GPU machine run scripts/gpu/verify.sh with carry [\"build-gpu\"]"
