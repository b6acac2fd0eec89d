#!/bin/bash
# Builds what the mover benchmarks need on the GPU machine into DIR (default
# .carry-mover, ignored by git): kvtierd, kvtierctl, libkvtier.so and their
# runtime libraries, mover-bench-cuda (the shim's pipeline and region table
# linked with real CUDA kernels and the pinned-memcpy reference), evict-par
# (what limits an eviction: threads, contexts, processes), capture-advice
# (a mapped eviction's advice made at the capture or at the first
# eviction), and the scripts.  Then, on the GPU machine: bash DIR/mover-h200.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.carry-mover}
. tests/gpu/carry.sh
carry_kvtier "$out"
obj=$(mktemp -d)
"$nvcc" -O2 -std=c++17 -arch=sm_90 -Itests/engine -c tests/gpu/backend-cuda.cu -o "$obj/backend.o"
"$nvcc" -O2 -std=c++17 -arch=sm_90 -Itests/bench -c tests/bench/pinned-ref-cuda.cu -o "$obj/pinned.o"
for f in tests/bench/mover-bench.c shim/pipeline.c shim/evictors.c shim/exit.c shim/numa-cpus.c shim/regions.c shim/real.c shim/sym.c shim/env.c shim/state.c common/log.c common/util.c common/protocol.c; do
        cc -O2 -std=gnu11 -pthread -Ibuild -Icommon -Ishim -Iinclude -Itests/bench -DKVT_RUNSTATEDIR='"/run"' -c "$f" -o "$obj/$(basename "$f" .c).o"
done
"$nvcc" -arch=sm_90 -cudart shared "$obj"/*.o -o "$out/mover-bench-cuda" -L"$(dirname "$nvcc")/../lib64/stubs" -lcuda -ldl -lpthread
rm -rf "$obj"
"$nvcc" -O2 -std=c++17 -arch=sm_90 tests/gpu/evict-par.cu -o "$out/evict-par" -L"$(dirname "$nvcc")/../lib64/stubs" -lcuda -lpthread
"$nvcc" -O2 -std=c++17 -arch=sm_90 -Itests/gpu tests/gpu/capture-advice.cu -o "$out/capture-advice"
cp tests/bench/mover-h200.sh tests/bench/evict-load-h200.sh tests/bench/gpu_load.py tests/bench/paged_kv.py tests/bench/long_context.py tests/bench/probe_engine.py "$out/"
ls -la "$out"
