#!/bin/bash
# Builds what tests/gpu/window-h200.sh needs on the GPU machine into DIR
# (default .carry-window, ignored by git): kvtier's binaries with their
# libraries (tests/gpu/carry.sh) and the scripts.  Then, on the GPU machine:
#   bash DIR/window-h200.sh              (device tool: carry ["DIR"])
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.carry-window}
. tests/gpu/carry.sh
carry_kvtier "$out"
cp tests/gpu/window-h200.sh tests/gpu/window_decode.py "$out/"
ls -la "$out"
