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
. tests/gpu/carry.sh
carry_kvtier "$out"
mkdir -p "$out/cudart"
cuda=${CUDA_HOME:-/usr/local/cuda}
"$cuda/bin/nvcc" -O2 -arch=sm_90 tests/gpu/static_probe.cu -o "$out/static_probe" # default: static cudart
if ldd "$out/static_probe" | grep -q libcudart; then echo "static_probe links libcudart dynamically" >&2; exit 1; fi
cp -L "$cuda/lib64/libcudart.so.13" "$out/cudart/"
cp tests/gpu/capture_probe.py tests/gpu/graph_probe.py tests/gpu/capture-h200.sh "$out/"
ls -la "$out"
