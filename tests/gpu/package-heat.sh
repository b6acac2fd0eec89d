#!/bin/bash
# Fills DIR (default .carry-heat) with what tests/gpu/heat-h200.sh needs on
# the GPU machine: kvtier's binaries from build/, their runtime libraries,
# the real-CUDA test engine and fault-bench built with nvcc here, and the
# scripts.  Then, on the GPU machine: bash DIR/heat-h200.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.carry-heat}
. tests/gpu/carry.sh
carry_kvtier "$out"
carry_engine "$out"
"$nvcc" -O2 -arch=sm_90 -cudart shared tests/gpu/fault-bench.cu -o "$out/fault-bench"
cp tests/gpu/heat-h200.sh tests/gpu/torch_decode.py "$out/"
du -sh "$out"
