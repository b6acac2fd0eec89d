#!/bin/bash
# Builds what the GPU machine needs into .carry/ (ignored by git): kvtier's
# binaries from build/, the runtime libraries they need, and the real-CUDA
# test engine built with nvcc here (tests/gpu/carry.sh).  Then run, on the
# GPU machine:
#   tests/gpu/run-h200.sh           (device tool: carry [".carry"])
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.carry
. tests/gpu/carry.sh
carry_kvtier "$out"
carry_engine "$out"
"$nvcc" -O2 -arch=sm_90 -cudart shared -Ishim -x c tests/bench/alloc-bench.c -o "$out/alloc-bench-cuda"
ls -la "$out" "$out/lib"
