#!/bin/bash
# Builds what the mover benchmarks need on the GPU machine into DIR (default
# .carry-mover, ignored by git): kvtierd, kvtierctl, libkvtier.so and their
# runtime libraries, mover-bench-cuda (the shim's pipeline and region table
# linked with real CUDA kernels and the pinned-memcpy reference), and the
# scripts.  Then, on the GPU machine: bash DIR/mover-h200.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.carry-mover}
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
"$nvcc" -O2 -std=c++17 -arch=sm_90 -Itests/bench -c tests/bench/pinned-ref-cuda.cu -o "$obj/pinned.o"
for f in tests/bench/mover-bench.c shim/pipeline.c shim/regions.c shim/real.c common/log.c common/util.c common/protocol.c; do
        cc -O2 -std=gnu11 -pthread -Ibuild -Icommon -Ishim -Iinclude -Itests/bench -c "$f" -o "$obj/$(basename "$f" .c).o"
done
"$nvcc" -arch=sm_90 -cudart shared "$obj"/*.o -o "$out/mover-bench-cuda" -ldl -lpthread
rm -rf "$obj"
cp tests/bench/mover-h200.sh tests/bench/paged_kv.py tests/bench/long_context.py "$out/"
git describe --always --dirty >"$out/COMMIT"
ls -la "$out"
