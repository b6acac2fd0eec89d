#!/bin/bash
# Builds kvtier and runs every test that needs no GPU (unit and integration
# suites through automake's TAP driver).  --sanitizers: the same under
# AddressSanitizer and UndefinedBehaviorSanitizer, in build-san/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh "$@"
dir=build
for a in "$@"; do [ "$a" = --sanitizers ] && dir=build-san; done
rc=0
make -C "$dir" -j"$(nproc)" check || rc=$?
log="$dir/test-suite.log"
if [ -f "$log" ]; then
        count() { awk -v k="# $1:" '$1 " " $2 == k { print $3; exit }' "$log"; }
        echo "tests: $(count PASS) passed, $(( $(count FAIL) + $(count ERROR) )) failed, $(count SKIP) skipped"
fi
[ $rc -eq 0 ] || find "$dir/tests" -name '*.log' -newer "$dir/Makefile" -exec grep -l -E '^(not ok|ERROR|FAIL)' {} + | xargs -r tail -n 40
exit $rc
