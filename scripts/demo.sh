#!/bin/bash
# Builds kvtier and runs the demo: a private kvtierd with a 64 MiB VRAM
# budget, a KV engine under LD_PRELOAD=libkvtier.so allocating four times
# that and reading it in a sliding window, kvtierctl status, and a summary
# of what the run measured (budget, peak VRAM, bytes moved, data intact).  Runs
# against the fake CUDA (no GPU needed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
make -C build demo
