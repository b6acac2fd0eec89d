#!/bin/bash
# The shim's environment table (shim/env.c): kvtier-run --print-env prints
# it from the shim itself; it names every KVTIER_* variable the shim's
# sources read, no other file of shim/ reads one, at most ten are for
# users, and README.md's tables list the same variables.
. "$(dirname "$0")/lib.sh"

RUN="$top_builddir/tools/kvtier-run"
names() { grep -v '^#' "$1" | cut -f1 | sort; }

# A sanitizer build: the shim's ASan runtime need not come first for this.
env KVTIER_LIB="$SHIM" ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0" "$RUN" --print-env \
        >"$TMP/env.txt" 2>"$TMP/env.err"; rc=$?
check "kvtier-run --print-env exits 0" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "$(cat "$TMP/env.err")"
check "kvtier-run --version prints the package's version and exits 0" \
        bash -c "'$RUN' --version | grep -qx 'kvtier-run [0-9][0-9.]*'"
check "each variable is one line: name, values, default, meaning" \
        awk -F'\t' '!/^#/ && (NF != 4 || $1 !~ /^KVTIER_[A-Z_]+$/ || $4 == "") { bad = 1 } END { exit bad }' "$TMP/env.txt"
grep -oh '"KVTIER_[A-Z_]*"' "$top_srcdir"/shim/*.c | tr -d '"' | sort -u >"$TMP/src.txt"
names "$TMP/env.txt" >"$TMP/printed.txt"
check "it lists every KVTIER_* variable named in shim/, once" diff -u "$TMP/src.txt" "$TMP/printed.txt"
check "no file of shim/ but env.c reads the environment for kvtier" \
        bash -c "! grep -n 'getenv(\"KVTIER' '$top_srcdir'/shim/*.c | grep -v '/env.c:'"
users=$(sed '/^# for tests/q' "$TMP/env.txt" | grep -vc '^#')
check_le "at most ten variables for users" "$users" 10
grep -o '^| `KVTIER_[A-Z_]*`' "$top_srcdir/README.md" | tr -d '|` ' | sort >"$TMP/readme.txt"
check "README.md's tables list the same variables" diff -u "$TMP/printed.txt" "$TMP/readme.txt"
env LD_PRELOAD="$PRELOAD" true >"$TMP/quiet.txt" 2>&1
check "without KVTIER_PRINT_ENV the shim prints nothing" [ ! -s "$TMP/quiet.txt" ]
done_testing
