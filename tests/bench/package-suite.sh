#!/bin/bash
# Builds what tests/bench/suite-h200.sh needs on the GPU machine into DIR
# (default .carry, ignored by git): kvtierd, kvtierctl, libkvtier.so and
# their runtime libraries (tests/gpu/carry.sh), the workloads and the
# suite.  Then, on the GPU machine: bash .carry/suite-h200.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.carry}
. tests/gpu/carry.sh
carry_kvtier "$out"
cp tests/bench/suite-h200.sh tests/bench/bench-lib.sh tests/bench/suite-report.py tests/bench/paged_kv.py tests/bench/long_context.py tests/bench/prefill-h200.sh tests/bench/ab-h200.sh tests/bench/residency-report.py tests/bench/first_touch.py tests/bench/first-touch-h200.sh tests/bench/inplace_read.py "$out/"
ls -la "$out"
