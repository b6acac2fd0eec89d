#!/bin/bash
# Issue 18, row 9 and the socket setup around it: kvtierd never removes what
# is not a socket it proved stale (a regular file, a symlink, a live
# socket), creates its socket 0660 without a chmod by path, and refuses a
# socket directory that others may write to.
. "$(dirname "$0")/lib.sh"

write_config 64M

# try_daemon PATH: kvtierd on PATH for at most 3 s; its exit status (124: it
# served, which it must not here).
try_daemon() {
        timeout 3 "$KVTIERD" -c "$TMP/kvtierd.conf" -s "$1" >>"$TMP/try.log" 2>&1
}

# Row 9: `kvtierd -s` on a regular file deleted the file as a "stale socket".
echo precious >"$TMP/file"
try_daemon "$TMP/file"; rc=$?
check "row 9: kvtierd -s on a regular file exits 1" [ $rc -eq 1 ]
check "row 9: the regular file is still there, unchanged" grep -qx precious "$TMP/file"
check "row 9: the refusal says why" grep -q "exists and is not a socket; not removing it" "$TMP/try.log"

# A symlink in the socket's place (to a file, to a stale socket): neither is removed.
ln -s "$TMP/file" "$TMP/link"
try_daemon "$TMP/link"; rc=$?
check "symlink to a file: kvtierd exits 1, link and file stay" \
        rc_and $((rc - 1)) [ -L "$TMP/link" ] && grep -qx precious "$TMP/file"

# A stale socket (its daemon killed) is proved stale and replaced.
check "kvtierd starts" start_daemon
kill -KILL "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=
check "a killed daemon leaves its socket" [ -S "$SOCK" ]
ln -s "$SOCK" "$TMP/sock-link"
try_daemon "$TMP/sock-link"; rc=$?
check "symlink to a stale socket: kvtierd exits 1, the link stays" rc_and $((rc - 1)) [ -L "$TMP/sock-link" ]
check "kvtierd starts again on the stale socket" start_daemon
check "the socket was created 0660" [ "$(stat -c %a "$SOCK")" = 660 ]
try_daemon "$SOCK"; rc=$?
check "a live socket: a second kvtierd exits 1" [ $rc -eq 1 ]
serves() { status_json >/dev/null; }
check "a live socket: the first still serves" serves
check "kvtierd stops cleanly" stop_daemon
check "its socket is gone at exit" [ ! -e "$SOCK" ]

# A directory others may write to: someone could swap the socket there.
for mode in 0777 1777 0770; do
        mkdir -m "$mode" "$TMP/dir$mode"
        try_daemon "$TMP/dir$mode/kvtierd.sock"; rc=$?
        check "directory $mode: kvtierd refuses it (exit 1), no socket made" \
                rc_and $((rc - 1)) [ ! -e "$TMP/dir$mode/kvtierd.sock" ]
done
check "the refusal names the mode" grep -q "Refusing socket directory .* mode 0777" "$TMP/try.log"
if [ "$(id -u)" -eq 0 ] && getent passwd nobody >/dev/null; then
        mkdir -m 0755 "$TMP/theirs"; chown nobody "$TMP/theirs"
        try_daemon "$TMP/theirs/kvtierd.sock"; rc=$?
        check "a directory owned by another user: refused" rc_and $((rc - 1)) [ ! -e "$TMP/theirs/kvtierd.sock" ]
else
        ok "# SKIP a directory owned by another user needs root and the user nobody"
fi
done_testing
