#!/bin/bash
# Builds what the GPU machine needs into .carry/ (ignored by git): kvtier's
# binaries from build/, the runtime libraries they need, and the real-CUDA
# test engine built with nvcc here.  The GPU image has no package manager
# access, so everything travels.  Then run, on the GPU machine:
#   tests/gpu/run-h200.sh           (device tool: carry [".carry"])
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.carry
rm -rf "$out"; mkdir -p "$out/lib"
make -C build -j"$(nproc)" >/dev/null
cp build/kvtierd build/kvtierctl build/.libs/libkvtier.so "$out/"
for l in libinih.so.1 libjson-c.so.5 libnuma.so.1 libsystemd.so.0; do
        p=$(ldconfig -p | awk -v l="$l" '$1 == l && /x86-64/ { print $NF; exit }')
        cp -L "$p" "$out/lib/"
done
# liblz4, libzstd, libgcrypt, libcap ... that libsystemd pulls in.
for dep in $(ldd "$out/lib/libsystemd.so.0" | awk '/=> \// { print $3 }'); do
        case "$(basename "$dep")" in libc.so*|libm.so*|ld-linux*) ;; *) cp -L "$dep" "$out/lib/" ;; esac
done
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
obj=$(mktemp -d)
"$nvcc" -O2 -std=c++17 -arch=sm_90 -Itests/engine -c tests/gpu/backend-cuda.cu -o "$obj/backend.o"
cc -O2 -std=gnu11 -Wall -Itests/engine -Ishim -c tests/engine/kv-engine.c -o "$obj/kv-engine.o"
"$nvcc" -arch=sm_90 -cudart shared "$obj/kv-engine.o" "$obj/backend.o" -o "$out/kv-engine-cuda" -ldl
"$nvcc" -O2 -arch=sm_90 -cudart shared -Ishim -x c tests/bench/alloc-bench.c -o "$out/alloc-bench-cuda"
rm -rf "$obj"
git describe --always --dirty >"$out/COMMIT"
ls -la "$out" "$out/lib"
