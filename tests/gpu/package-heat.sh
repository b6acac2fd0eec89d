#!/bin/bash
# Fills DIR (default .carry-heat) with what tests/gpu/heat-h200.sh needs on
# the GPU machine: kvtier's binaries from build/, their runtime libraries,
# the real-CUDA test engine and fault-bench built with nvcc here, and the
# scripts.  Then, on the GPU machine: bash DIR/heat-h200.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.carry-heat}
rm -rf "$out"; mkdir -p "$out/lib"
make -C build -j2 >/dev/null
cp build/kvtierd build/kvtierctl build/.libs/libkvtier.so "$out/"
for l in libinih.so.1 libjson-c.so.5 libnuma.so.1 libsystemd.so.0; do
        p=$(ldconfig -p | awk -v l="$l" '$1 == l && /x86-64/ { print $NF; exit }')
        cp -L "$p" "$out/lib/"
done
for dep in $(ldd "$out/lib/libsystemd.so.0" | awk '/=> \// { print $3 }'); do
        case "$(basename "$dep")" in libc.so*|libm.so*|ld-linux*) ;; *) cp -L "$dep" "$out/lib/" ;; esac
done
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
obj=$(mktemp -d)
"$nvcc" -O2 -std=c++17 -arch=sm_90 -Itests/engine -c tests/gpu/backend-cuda.cu -o "$obj/backend.o"
cc -O2 -std=gnu11 -Wall -Itests/engine -Ishim -c tests/engine/kv-engine.c -o "$obj/kv-engine.o"
"$nvcc" -arch=sm_90 -cudart shared "$obj/kv-engine.o" "$obj/backend.o" -o "$out/kv-engine-cuda" -ldl
"$nvcc" -O2 -arch=sm_90 -cudart shared tests/gpu/fault-bench.cu -o "$out/fault-bench"
rm -rf "$obj"
cp tests/gpu/heat-h200.sh tests/gpu/torch_decode.py "$out/"
git describe --always --dirty >"$out/COMMIT"
du -sh "$out"
