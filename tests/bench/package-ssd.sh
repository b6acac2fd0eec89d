#!/bin/bash
# Builds what the SSD tier's benchmark needs on the GPU machine into DIR
# (default .carry-ssd, ignored by git): kvtierd, kvtierctl, libkvtier.so
# and their libraries (tests/gpu/carry.sh), ssd-bench-cuda (tests/bench/
# ssd-bench.c against the real runtime, which the shim hooks), ssd-h200.sh,
# and the decode benchmark of the SSD tier: ssd-decode-h200.sh, its report,
# paged_kv.py, long_context.py, kv_compress.py and the kvtier package
# (DIR/kvtier, beside the scripts that import it).  Then, on the GPU
# machine: bash DIR/ssd-h200.sh, or bash DIR/ssd-decode-h200.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.carry-ssd}
. tests/gpu/carry.sh
carry_kvtier "$out"
cc -O2 -std=gnu11 -Wall -Ishim -Iinclude -c tests/bench/ssd-bench.c -o "$out/ssd-bench.o"
"$nvcc" -cudart shared "$out/ssd-bench.o" -o "$out/ssd-bench-cuda" -luring -ldl
rm -f "$out/ssd-bench.o"
cp tests/bench/ssd-h200.sh tests/bench/bench-lib.sh tests/bench/ssd-decode-h200.sh tests/bench/ssd-decode-report.py tests/bench/paged_kv.py \
        tests/bench/long_context.py tests/bench/kv_compress.py "$out/"
mkdir -p "$out/kvtier"
cp python/kvtier/__init__.py "$out/kvtier/"
ls -la "$out"
