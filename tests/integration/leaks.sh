#!/bin/bash
# No memory is definitely lost by kvtierd or by the shim over a whole session:
# clients that come and go, hostile peers, status requests, SIGTERM.  Runs
# under valgrind on the plain build (the sanitizer build has its own checks,
# and LeakSanitizer's stop-the-world is not dependable here: see lib.sh).
. "$(dirname "$0")/lib.sh"

command -v valgrind >/dev/null || { echo "1..0 # SKIP valgrind not installed"; exit 0; }
[ -n "$asan" ] && { echo "1..0 # SKIP sanitizer build"; exit 0; }

VG="valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=9"
ARGS="--regions 4 --region-size 8M --window 4M --steps 20 --step-ms 20 --hint"

write_config 16M
DAEMON_WRAP="$VG --log-file=$TMP/vg-daemon.log" check "kvtierd starts under valgrind" start_daemon
ENGINE_ENV="KVTIER_MIN_SIZE=4M" run_engine plain $ARGS; rc=$?
check "engine under the shim exits 0" [ $rc -eq 0 ]
ENGINE_WRAP="$VG --log-file=$TMP/vg-shim.log" ENGINE_ENV="KVTIER_MIN_SIZE=4M" run_engine vg $ARGS; rc=$?
check "engine with the shim under valgrind exits 0, no definite leak" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "$(cat "$TMP/vg-shim.log" "$TMP/vg.out")"
"$top_builddir/tests/integration/abuse" "$SOCK" >"$TMP/abuse.out" 2>&1
check "hostile peers were served and dropped" grep -q "^1\.\." "$TMP/abuse.out"
check "status answers" eval 'status_json >/dev/null'
check "kvtierd exits 0 on SIGTERM with no definite leak" stop_daemon
[ -s "$TMP/vg-daemon.log" ] && diag "$(cat "$TMP/vg-daemon.log")"
done_testing
