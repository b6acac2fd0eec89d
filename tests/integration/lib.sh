# Sourced by the integration tests: a private kvtierd on a temporary socket,
# the test engine under LD_PRELOAD=libkvtier.so against the fake CUDA, and
# kvtierctl as the oracle.  Output is TAP for automake's tap-driver.
set -u

: "${top_builddir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_srcdir:=$top_builddir}"
KVTIERD="$top_builddir/kvtierd"
KVTIERCTL="$top_builddir/kvtierctl"
SHIM="$top_builddir/.libs/libkvtier.so"
ENGINE="${KVT_ENGINE:-$top_builddir/tests/engine/kv-engine}"
FAKES="$top_builddir/tests/fakes/.libs"

# Under the TAP driver a skip is a "1..0 # SKIP" plan and exit 0.
command -v jq >/dev/null || { echo "1..0 # SKIP jq not installed"; exit 0; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-test.XXXXXX")
SOCK="$TMP/kvtierd.sock"
DAEMON_PID=
tap_n=0
tap_failed=0

# A sanitizer build needs the ASan (or TSan) runtime first in the preload list.
PRELOAD="$SHIM"
asan=$(ldd "$SHIM" 2>/dev/null | awk '/libasan/ { print $3 }')
[ -n "$asan" ] && PRELOAD="$asan $SHIM"
tsan=$(ldd "$SHIM" 2>/dev/null | awk '/libtsan/ { print $3 }')
[ -n "$tsan" ] && PRELOAD="$tsan $SHIM"
# Leak checking stays with the unit tests and tests/integration/leaks.sh
# (valgrind): LeakSanitizer's ptrace-based stop-the-world hung a kvtierd at
# exit here once (tracer in wait4, tracee spinning; google/sanitizers#777).
# The fake CUDA serves CPU faults on managed memory from a SIGSEGV handler
# of its own (chaining to ASan's for the rest): ASan must let it install it.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}:allow_user_segv_handler=1"
export LD_LIBRARY_PATH="$FAKES${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

cleanup() {
        [ -n "$DAEMON_PID" ] && kill -KILL "$DAEMON_PID" 2>/dev/null
        if [ "$tap_failed" -eq 0 ]; then rm -rf "$TMP"; else echo "# kept $TMP"; fi
}
trap cleanup EXIT

ok() { tap_n=$((tap_n + 1)); echo "ok $tap_n - $*"; }
not_ok() { tap_n=$((tap_n + 1)); tap_failed=$((tap_failed + 1)); echo "not ok $tap_n - $*"; }
diag() { echo "$*" | sed 's/^/# /'; }

# check DESCRIPTION COMMAND...: one TAP line from the command's status.
check() {
        local desc="$1"; shift
        if "$@"; then ok "$desc"; else not_ok "$desc"; fi
}

# rc_and RC COMMAND...: RC is 0 and COMMAND succeeds.  For check, so that
# both halves are one reported result: `check D [ $rc -eq 0 ] && cmd`
# would leave cmd outside the check.
rc_and() {
        local rc="$1"; shift
        [ "$rc" -eq 0 ] && "$@"
}

# check_le DESCRIPTION A B: A <= B (integers), both printed on failure.
check_le() {
        if [ "$2" -le "$3" ]; then ok "$1 ($2 <= $3)"; else not_ok "$1"; diag "got $2, limit $3"; fi
}

# check_gt DESCRIPTION A B: A > B.
check_gt() {
        if [ "$2" -gt "$3" ]; then ok "$1 ($2 > $3)"; else not_ok "$1"; diag "got $2, expected more than $3"; fi
}

done_testing() {
        echo "1..$tap_n"
        [ "$tap_failed" -eq 0 ]
}

# write_config BUDGET [EXTRA INI LINES...]
write_config() {
        local budget="$1"; shift
        {
                echo "[daemon]"
                echo "socket = $SOCK"
                echo "tick_ms = 20"
                echo "log_level = ${KVT_DAEMON_LOG:-info}"
                echo "[gpu]"
                echo "vram_budget = $budget"
                for l in "$@"; do echo "$l"; done
        } >"$TMP/kvtierd.conf"
}

# start_daemon: starts kvtierd on $TMP/kvtierd.conf, waits until it answers.
start_daemon() {
        ${DAEMON_WRAP:-} "$KVTIERD" -c "$TMP/kvtierd.conf" >>"$TMP/kvtierd.log" 2>&1 &
        DAEMON_PID=$!
        for _ in $(seq 100); do
                "$KVTIERCTL" -s "$SOCK" status --json >/dev/null 2>&1 && return 0
                kill -0 "$DAEMON_PID" 2>/dev/null || break
                sleep 0.05
        done
        diag "kvtierd did not come up:"; diag "$(cat "$TMP/kvtierd.log")"
        return 1
}

# stop_daemon: SIGTERM, and the daemon must exit 0 within 10 s (a hang is
# killed and fails the test instead of stalling the suite).
stop_daemon() {
        local rc=0
        kill -TERM "$DAEMON_PID"
        for _ in $(seq 200); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.05; done
        if kill -0 "$DAEMON_PID" 2>/dev/null; then
                diag "kvtierd did not exit within 10 s of SIGTERM"
                kill -KILL "$DAEMON_PID"
        fi
        wait "$DAEMON_PID" || rc=$?
        DAEMON_PID=
        [ "$rc" -eq 0 ] || { diag "kvtierd exited $rc"; diag "$(tail -20 "$TMP/kvtierd.log")"; }
        return "$rc"
}

status_json() { "$KVTIERCTL" -s "$SOCK" status --json; }

# status_when JQ VALUE [SECONDS]: status (JSON) once jq JQ of it prints
# VALUE, polled for up to SECONDS (5); the last one read if it never does.
status_when() {
        local s
        for _ in $(seq $((${3:-5} * 20))); do
                s=$(status_json)
                [ "$(jq "$1" <<<"$s")" = "$2" ] && break
                sleep 0.05
        done
        echo "$s"
}

# run_engine NAME [ENGINE ARGS...]: the engine under the shim; output in $TMP/NAME.out,
# fake CUDA counters in $TMP/NAME.stats.  Returns the engine's exit status.
run_engine() {
        local name="$1"; shift
        env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" FAKECUDA_STATS="$TMP/$name.stats" \
                ${ENGINE_ENV:-} ${ENGINE_WRAP:-} "$ENGINE" "$@" >"$TMP/$name.out" 2>&1
}

# stat_of NAME KEY: a fake CUDA counter of device 0 from a run's stats file.
stat_of() { jq -s "map(select(.device == 0)) | last | .$2" "$TMP/$1.stats"; }
