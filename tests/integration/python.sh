#!/bin/bash
# The Python package (python/kvtier): without the shim every call is a
# no-op that says so; under the shim, with a private kvtierd that has an SSD
# tier, host buffers round-trip through spill and restore.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || { echo "1..0 # SKIP python3 not installed"; exit 0; }
PY="$top_srcdir/python"

PYTHONPATH="$PY" python3 -m unittest discover -s "$PY/tests" >"$TMP/noshim.out" 2>&1
check "without the shim: available() is False, calls say NOT_AVAILABLE" [ $? -eq 0 ]
[ $? -eq 0 ] || diag "$(tail -30 "$TMP/noshim.out")"

write_config 64M "[ssd]" "dir = $TMP/ssd" "max_per_client = 128M"
check "kvtierd starts" start_daemon
env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" KVTIER_TEST_SHIM=1 KVTIER_TEST_OVER_QUOTA=$((129 << 20)) \
        PYTHONPATH="$PY" python3 -m unittest discover -s "$PY/tests" -v >"$TMP/shim.out" 2>&1
rc=$?
check "under the shim: round trips, readahead, errors, quota" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "$(tail -40 "$TMP/shim.out")"
check "the spills showed in kvtierd's status" [ "$(status_json | jq '.ssd.totals.spills')" -ge 7 ]
check "kvtierd exits 0" stop_daemon

# pip-installable: a wheel builds offline from the tree (where setuptools and wheel are)
if python3 -c 'import setuptools, pip, wheel' 2>/dev/null; then
        cp -r "$PY" "$TMP/pysrc" # setuptools builds in the tree it is given: not the source's
        python3 -m pip wheel --quiet --no-deps --no-build-isolation --no-index -w "$TMP/wheel" "$TMP/pysrc" \
                >"$TMP/wheel.out" 2>&1
        check "pip builds a wheel of python/" ls "$TMP"/wheel/kvtier-*.whl
        [ -n "$(ls "$TMP"/wheel/kvtier-*.whl 2>/dev/null)" ] || diag "$(tail -20 "$TMP/wheel.out")"
fi
done_testing
