#!/bin/bash
# The shim's environment table (shim/env.c): kvtier-run --print-env prints
# it from the shim itself; it names every KVTIER_* variable the shim's
# sources read, no other file of shim/ reads one, at most ten in all
# (diagnostics are items of one, KVTIER_DEBUG), and README.md's tables
# list the same variables.
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
check_le "at most ten variables in all, diagnostics included" "$(grep -vc '^#' "$TMP/env.txt")" 10
grep -o '^| `KVTIER_[A-Z_]*`' "$top_srcdir/README.md" | tr -d '|` ' | sort >"$TMP/readme.txt"
check "README.md's tables list the same variables" diff -u "$TMP/printed.txt" "$TMP/readme.txt"
env LD_PRELOAD="$PRELOAD" true >"$TMP/quiet.txt" 2>&1
check "without KVTIER_DEBUG=print-env the shim prints nothing" [ ! -s "$TMP/quiet.txt" ]
# KVTIER_DEBUG is all or nothing: one bad item leaves every item unset.
env LD_PRELOAD="$PRELOAD" KVTIER_DEBUG=print-env,bogus=1 true >"$TMP/bad-debug.txt" 2>&1
check "a bad KVTIER_DEBUG item warns, naming what it takes" \
        grep -q 'Invalid KVTIER_DEBUG=print-env,bogus=1 (a list of print-env' "$TMP/bad-debug.txt"
check "a bad KVTIER_DEBUG item: the good ones are not applied either" \
        bash -c '! grep -q "^KVTIER_LOG" "$1"' _ "$TMP/bad-debug.txt"
env LD_PRELOAD="$PRELOAD" KVTIER_DEBUG=host-numa=0,print-env true >"$TMP/two-debug.txt" 2>&1
check "KVTIER_DEBUG takes a list: print-env after another item prints the table" \
        grep -q '^KVTIER_LOG' "$TMP/two-debug.txt"
done_testing
