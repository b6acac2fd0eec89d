#!/bin/bash
# Builds what the SSD tier's benchmark needs on the GPU machine into DIR
# (default .carry-ssd, ignored by git): kvtierd, kvtierctl, libkvtier.so
# and their libraries (tests/gpu/carry.sh), ssd-bench-cuda (tests/bench/
# ssd-bench.c against the real runtime, which the shim hooks), and
# ssd-h200.sh.  Then, on the GPU machine: bash DIR/ssd-h200.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.carry-ssd}
. tests/gpu/carry.sh
carry_kvtier "$out"
cc -O2 -std=gnu11 -Wall -Ishim -Iinclude -c tests/bench/ssd-bench.c -o "$out/ssd-bench.o"
"$nvcc" -cudart shared "$out/ssd-bench.o" -o "$out/ssd-bench-cuda" -luring -ldl
rm -f "$out/ssd-bench.o"
cp tests/bench/ssd-h200.sh "$out/"
ls -la "$out"
