#!/bin/bash
# Bundles what tests/gpu/capture-h200.sh needs into DIR (default
# .carry-capture, ignored by git): kvtier's binaries from build/, their
# runtime libraries, the probes, a static-cudart probe built with nvcc's
# defaults, and libcudart.so.13 (which the shim loads for memory a
# static-cudart program allocates through the driver).  Then, on the GPU
# machine (device tool, carry [DIR]):  bash DIR/capture-h200.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.carry-capture}
rm -rf "$out"; mkdir -p "$out/lib" "$out/cudart"
make -C build -j2 >/dev/null
cp build/kvtierd build/kvtierctl build/.libs/libkvtier.so "$out/"
for l in libinih.so.1 libjson-c.so.5 libnuma.so.1 libsystemd.so.0; do
        p=$(ldconfig -p | awk -v l="$l" '$1 == l && /x86-64/ { print $NF; exit }')
        cp -L "$p" "$out/lib/"
done
for dep in $(ldd "$out/lib/libsystemd.so.0" | awk '/=> \// { print $3 }'); do
        case "$(basename "$dep")" in libc.so*|libm.so*|ld-linux*) ;; *) cp -L "$dep" "$out/lib/" ;; esac
done
cuda=${CUDA_HOME:-/usr/local/cuda}
"$cuda/bin/nvcc" -O2 -arch=sm_90 tests/gpu/static_probe.cu -o "$out/static_probe" # default: static cudart
if ldd "$out/static_probe" | grep -q libcudart; then echo "static_probe links libcudart dynamically" >&2; exit 1; fi
cp -L "$cuda/lib64/libcudart.so.13" "$out/cudart/"
cp tests/gpu/capture_probe.py tests/gpu/capture-h200.sh "$out/"
git describe --always --dirty >"$out/COMMIT"
ls -la "$out"
