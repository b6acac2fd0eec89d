#!/bin/bash
# The shim's dlsym: hooked names looked up in CUDA's libraries give the
# shim's wrappers, everything else what the library has, and
# dlsym(RTLD_NEXT) from a library loaded after the shim still finds the next
# definition after that library (the trampoline keeps the caller's return
# address).  dlsym-next (tests/integration/dlsym-next.c) prints the answers.
. "$(dirname "$0")/lib.sh"
PROBE="$top_builddir/tests/integration/dlsym-next"
export LD_LIBRARY_PATH="$top_builddir/tests/integration/.libs:$LD_LIBRARY_PATH"

"$PROBE" >"$TMP/plain.out" 2>&1
check "without the shim: RTLD_NEXT finds libnext-b" grep -qx "next b" "$TMP/plain.out"
env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" "$PROBE" >"$TMP/shim.out" 2>&1; rc=$?
check "with the shim: the program exits 0" [ $rc -eq 0 ]
check "with the shim: dlsym(RTLD_NEXT) from a later library still finds libnext-b" grep -qx "next b" "$TMP/shim.out"
check "with the shim: cudaMalloc through libcudart's handle is the shim's" grep -qx "hooked libkvtier.so" "$TMP/shim.out"
check "with the shim: an unhooked name through the handle is libcudart's" \
        grep -qx "plain libcudart.so.13" "$TMP/shim.out"
check "with the shim: cuGetProcAddress_v2 through libcuda's handle is the shim's" \
        grep -qx "proc libkvtier.so" "$TMP/shim.out"
check "with the shim: a missing symbol is NULL with dlerror set" grep -qx "missing null+error" "$TMP/shim.out"
env LD_PRELOAD="$PRELOAD" KVTIER_DISABLE=1 "$PROBE" >"$TMP/disabled.out" 2>&1
check "KVTIER_DISABLE=1: dlsym answers as without the shim" diff -u "$TMP/plain.out" "$TMP/disabled.out"
done_testing
