#!/bin/bash
# The SSD tier across restarts of kvtierd (issue 20): a running engine's
# spills survive a SIGTERM and a SIGKILL of the daemon and come back whole
# under the same handles; nobody else can take them (another token, the
# right token from another process or uid); a client that died while the
# daemon was down has its files removed by the next daemon's sweep (a
# reused pid too); spills not taken back within [ssd] reattach_grace go; a
# torn or flipped index tail loses the damaged spill only.
. "$(dirname "$0")/lib.sh"

SSD_ENGINE="$top_builddir/tests/integration/ssd-engine"
SSD_DIR="$TMP/ssd"
N=12
[ -n "$tsan" ] && N=6

files_in_dir() { find "$SSD_DIR" -type f 2>/dev/null | wc -l; }
kept() { status_json | jq '.ssd.kept | length'; }
config() { write_config 64M "[ssd]" "dir = $SSD_DIR" "block_size = 1M" "max_per_uid = 256M" "$@"; }

# keep_start NAME RC K: the engine spills $N ranges in the background and
# waits for $TMP/NAME.go; then the first N-K must restore whole, the last K
# end in RC.
keep_start() {
        rm -f "$TMP/$1.go"
        env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" KVTIER_MIN_SIZE=4M KVTIER_LOG=info \
                "$SSD_ENGINE" keep $N $((RANDOM + 1)) "$TMP/$1.go" "$2" "$3" >"$TMP/$1.out" 2>&1 &
        KEEP_PID=$!
        for _ in $(seq 600); do
                grep -q "^ready" "$TMP/$1.out" 2>/dev/null && return 0
                kill -0 $KEEP_PID 2>/dev/null || break
                sleep 0.05
        done
        diag "$(cat "$TMP/$1.out")"
        return 1
}
# keep_finish NAME: lets the engine restore; its exit status.
keep_finish() {
        local rc=0
        touch "$TMP/$1.go"
        wait $KEEP_PID || rc=$?
        [ $rc -eq 0 ] || diag "$(grep -v '^ok' "$TMP/$1.out" | tail -20)"
        return $rc
}
# wait_files N: up to 5 s for [ssd] dir to hold N files.
wait_files() {
        for _ in $(seq 100); do [ "$(files_in_dir)" -eq "$1" ] && return 0; sleep 0.05; done
        diag "$(files_in_dir) files in $SSD_DIR, expected $1"
        return 1
}
bytes_of() { sed -n 's/^ready [0-9]* ranges, \([0-9]*\) bytes$/\1/p' "$TMP/$1.out"; }
token_of() { od -An -tx1 -j32 -N16 "$SSD_DIR"/*.idx | tr -d ' \n'; }
grep_log() { grep -q "$1" "$TMP/kvtierd.log"; }

# --- a SIGTERM restart: the files stay, the new daemon keeps them (and
# counts them against the uid's quota), the engine restores every word
config
check "kvtierd starts" start_daemon
check "the engine spills $N ranges" keep_start term 0 0
check "its spills are in a data file and an index, named" \
        eval '[ "$(files_in_dir)" -eq 2 ] && ls "$SSD_DIR" | grep -q "^[0-9a-f]\{16\}\.idx$"'
check "kvtierd stops (SIGTERM) under a client with spills" stop_daemon
check "the client's files stay" [ "$(files_in_dir)" -eq 2 ]
check "kvtierd starts again" start_daemon
check "the new daemon keeps the spills for the client" [ "$(kept)" -eq 1 ]
check "and says so" grep_log "Kept $N SSD spills ($(bytes_of term) bytes) of pid $KEEP_PID"
check "status counts the kept bytes" [ "$(status_json | jq '.ssd.kept[0].bytes')" -eq "$(bytes_of term)" ]
check "kvtierctl status shows them" eval '"$KVTIERCTL" -s "$SOCK" status | grep -q "^kept over a restart for pid $KEEP_PID (uid $(id -u)): $N spills"'
env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" KVTIER_MIN_SIZE=4M "$SSD_ENGINE" quota \
        $(((256 << 20) - $(bytes_of term) + 4096)) -122 >"$TMP/quota.out" 2>&1
check "kept spills count against the uid's quota (max_per_uid)" [ $? -eq 0 ]
check "after the restart the engine restores every word of its $N spills" keep_finish term
check "the shim re-attached its session" grep -q "it gave back this process's $N SSD spills" "$TMP/term.out"
check "kvtierd logged the re-attach" grep_log "SSD client pid $KEEP_PID (uid $(id -u)) re-attached $N spills"
check "the client ended: its files are gone" wait_files 0

# --- a crash (SIGKILL) of the daemon: the same
check "the engine spills $N ranges" keep_start kill 0 0
kill -KILL "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=
check "killed, kvtierd leaves the files" [ "$(files_in_dir)" -eq 2 ]
check "kvtierd starts again after SIGKILL" start_daemon
check "after a crash the engine restores every word" keep_finish kill
check "its files are gone with it" wait_files 0

# --- nobody else takes them: another token, the right token from another
# process, or from another uid: a new session each, logged; the owner
# restores after them
check "the engine spills $N ranges" keep_start claim 0 0
check "kvtierd restarts" eval 'stop_daemon && start_daemon'
token=$(token_of)
other=$(printf '%08x' $RANDOM $RANDOM $RANDOM $RANDOM)
env KVTIER_SOCKET="$SOCK" "$SSD_ENGINE" claim "$other" 1 >"$TMP/claim1.out" 2>&1
check "another token gets a new session, not the spills" [ $? -eq 0 ]
check "logged: spills kvtierd does not hold" grep_log "asked for spills kvtierd does not hold"
env KVTIER_SOCKET="$SOCK" "$SSD_ENGINE" claim "$token" 1 >"$TMP/claim2.out" 2>&1
check "the right token from another process gets a new session, not the spills" [ $? -eq 0 ]
check "logged: the token of another's spills, refused" \
        grep_log "presented the token of the spills of pid $KEEP_PID (uid $(id -u)): refused"
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
        chmod 0755 "$TMP"; chmod 0666 "$SOCK"
        env KVTIER_SOCKET="$SOCK" setpriv --reuid 65534 --regid 65534 --clear-groups \
                "$SSD_ENGINE" claim "$token" 1 >"$TMP/claim3.out" 2>&1
        check "the right token from uid 65534 gets a new session, not the spills" [ $? -eq 0 ]
        check "logged: uid 65534 presented the token, refused" grep_log "(uid 65534) presented the token of the spills"
        chmod 0700 "$TMP"
else
        ok "# SKIP the right token from another uid: needs root and setpriv"
fi
check "the spills are still kept for their owner" [ "$(kept)" -eq 1 ]
check "the owner restores every word after the claims" keep_finish claim
check "and its files go with it" wait_files 0

# --- a client that dies while no daemon runs: the next one's sweep
# deletes its files at once; a pid that is another process's now too
check "the engine spills $N ranges" keep_start dead 0 0
check "kvtierd stops" stop_daemon
kill -KILL $KEEP_PID; wait $KEEP_PID 2>/dev/null
check "the dead client's files are there while no daemon runs" [ "$(files_in_dir)" -eq 2 ]
check "kvtierd starts" start_daemon
check "its sweep removed them at once" [ "$(files_in_dir)" -eq 0 -a "$(kept)" -eq 0 ]
check "and says why" grep_log "Removed the SSD spills of pid $KEEP_PID (uid $(id -u)).*: its process ended"

check "the engine spills $N ranges" keep_start reuse -116 $N
check "kvtierd stops" stop_daemon
# The engine lives on, but a /proc where its pid started later is another process.
mkdir -p "$TMP/proc/$KEEP_PID"
awk '{ $22 = $22 + 100; print }' "/proc/$KEEP_PID/stat" >"$TMP/proc/$KEEP_PID/stat"
check "kvtierd starts (a /proc where the pid is reused)" eval 'KVTIER_PROC_ROOT="$TMP/proc" start_daemon'
check "the sweep removed the spills of a reused pid" [ "$(files_in_dir)" -eq 0 -a "$(kept)" -eq 0 ]
check "and says why" grep_log "Removed the SSD spills of pid $KEEP_PID .*its pid is another process's now"
check "the engine's restores fail with KVTIER_ESTALE, no word wrong" keep_finish reuse
check "the shim says its spills were not given back" grep -q "restarted without this process's SSD spills" \
        "$TMP/reuse.out"

# --- [ssd] reattach_grace: spills not taken back in time go
check "kvtierd stops" stop_daemon
config "reattach_grace = 4"
check "kvtierd starts with reattach_grace = 4" start_daemon
check "the engine spills $N ranges" keep_start grace -116 $N
check "kvtierd restarts" eval 'stop_daemon && start_daemon'
check "the spills are kept at first" [ "$(kept)" -eq 1 ]
sleep 4
check "4 s later they are removed" eval 'wait_files 0 && [ "$(kept)" -eq 0 ]'
check "and it says why" grep_log "Removed $N SSD spills .*: not re-attached within \[ssd\] reattach_grace"
check "the engine's restores then fail with KVTIER_ESTALE, no word wrong" keep_finish grace

# --- a torn index tail (cut), then a flipped byte in it: the last spill
# fails with KVTIER_ESTALE, the others restore whole
for damage in torn flipped; do
        check "kvtierd stops" stop_daemon
        config
        check "kvtierd starts" start_daemon
        check "$damage: the engine spills $N ranges" keep_start $damage -116 1
        check "$damage: kvtierd stops" stop_daemon
        idx=$(ls "$SSD_DIR"/*.idx)
        if [ $damage = torn ]; then
                truncate -s -5 "$idx"
        else
                at=$(($(stat -c %s "$idx") - 20))
                b=$(od -An -tu1 -j$at -N1 "$idx" | tr -d ' ')
                printf "\\$(printf '%03o' $((b ^ 16)))" | dd of="$idx" bs=1 seek=$at conv=notrunc 2>/dev/null
        fi
        check "$damage: kvtierd starts on the damaged index" start_daemon
        check "$damage: it says the tail is ignored" grep_log "the spills they held are lost, the other $((N - 1)) kept"
        check "$damage: the first $((N - 1)) restore whole, the damaged one fails with KVTIER_ESTALE" \
                keep_finish $damage
        : >"$TMP/kvtierd.log"
done
check "kvtierd stops cleanly" stop_daemon
done_testing
