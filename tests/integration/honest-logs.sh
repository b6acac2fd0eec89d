#!/bin/bash
# Issue 18, rows 6 and 7: what a peer sends cannot forge a log line, flood
# the log or reach a terminal.  Newlines, ESC, BEL and CR in a HELLO name or
# a CTL_SET text are escaped in every line (stderr, the journal's stream
# and its native protocol, whose entries carry the peer's fields); one
# user's flood is rate-limited; kvtierctl prints nothing but text, whatever
# the daemon (or an impostor on the socket) sends.
. "$(dirname "$0")/lib.sh"
HOSTILE="${KVT_HOSTILE:-$top_builddir/tests/integration/hostile}"
FORGE=$'x\n<3>kvtierd: FORGED'
as_nobody=()
if [ "$(id -u)" -eq 0 ]; then as_nobody=(--as 65534); fi

start_open() { start_daemon && chmod 0755 "$TMP" && chmod 0666 "$SOCK"; }
# only_text FILE: nothing but printable ASCII, newlines and tabs.
only_text() {
        local n
        n=$(LC_ALL=C tr -d '\n\t\040-\176' <"$1" | wc -c)
        [ "$n" -eq 0 ] || { diag "$n other bytes in $1:"; diag "$(LC_ALL=C grep -n '[^[:print:]]' "$1" | od -c | head)"; false; }
}
# every_line_ours FILE PREFIX: each line of FILE begins with PREFIX.
every_line_ours() {
        ! grep -v "^$2" "$1" >"$TMP/strays" || { diag "lines not of kvtierd:"; diag "$(head -5 "$TMP/strays")"; false; }
}

# Row 6: a newline in a HELLO name or in CTL_SET text, once and in a flood.
burst=50 interval_ms=1000
write_config 64M "[daemon]" "log_rate_limit_interval_ms = $interval_ms" "log_rate_limit_burst = $burst"
check "kvtierd starts" start_open
"$HOSTILE" "$SOCK" hello "$FORGE hello" >/dev/null
"$HOSTILE" "$SOCK" set "$FORGE=set" >/dev/null
"$HOSTILE" "${as_nobody[@]}" "$SOCK" set "policy=$FORGE refused" >/dev/null
check "row 6: every log line is kvtierd's own (no forged line)" every_line_ours "$TMP/kvtierd.log" "kvtierd: "
check "row 6: the HELLO name is logged escaped" grep -qF 'x\n<3>kvtierd: FORGED hello' "$TMP/kvtierd.log"
check "row 6: CTL_SET text with control characters is refused, logged escaped" \
        grep -qF 'control characters in "x\n<3>kvtierd: FORGED=set"' "$TMP/kvtierd.log"
lines0=$(wc -l <"$TMP/kvtierd.log")
t0=$(date +%s%N)
"$HOSTILE" "${as_nobody[@]}" "$SOCK" flood 20000 "policy=$FORGE flood" >"$TMP/flood.out"
t1=$(date +%s%N)
check "row 6: the flood ran (20000 requests)" grep -q "sent 20000" "$TMP/flood.out"
# a burst for each interval the flood reached into (a loaded machine takes
# more than one for it), and a few lines.  The uid's window started at the
# rows before (ratelimit_below(): at its first line after the last window),
# so a flood shorter than an interval can still reach into two.
intervals=$(((t1 - t0) / (interval_ms * 1000000) + 2))
check_le "row 6: it logged at most the burst per interval and a few lines ($intervals intervals)" \
        $(($(wc -l <"$TMP/kvtierd.log") - lines0)) $((burst * intervals + 10))
# reported once the 1 s interval is over, by the next sweep (within another second)
reported() {
        for _ in $(seq 60); do grep -q "Suppressed [0-9]* lines caused by uid" "$TMP/kvtierd.log" && return 0; sleep 0.05; done
        false
}
check "row 6: the suppressed lines are reported" reported
check "row 6: still no forged line" every_line_ours "$TMP/kvtierd.log" "kvtierd: "

# Row 7: ESC, BEL and CR in a HELLO name, shown by kvtierctl status, top and --json.
"$HOSTILE" "${as_nobody[@]}" --hold 3000 "$SOCK" hello $'a\e[2J\a\rb\x9b' >"$TMP/term.out" &
holder=$!
for _ in $(seq 60); do grep -q welcome "$TMP/term.out" && break; sleep 0.05; done
"$KVTIERCTL" -s "$SOCK" status >"$TMP/status.txt"
"$KVTIERCTL" -s "$SOCK" top -n 1 >"$TMP/top.txt"
"$KVTIERCTL" -s "$SOCK" status --json >"$TMP/status.json"
check "row 7: kvtierctl status prints text only" only_text "$TMP/status.txt"
check "row 7: kvtierctl top prints text only" only_text "$TMP/top.txt"
check "row 7: kvtierctl status --json prints text only" only_text "$TMP/status.json"
check "row 7: the name shows escaped" grep -qF 'a\x1b[2J\x07\rb\x9b' "$TMP/status.txt"
wait "$holder"
check "kvtierd stops cleanly" stop_daemon

# kvtierctl escapes on its own, whatever comes over the socket.  (The
# impostor's socket appears once it listens; kvtierd's may be left.)
rm -f "$SOCK"
"$top_builddir/tests/integration/evil-daemon" "$SOCK" hostile-status >/dev/null 2>&1 &
evil=$!
for _ in $(seq 60); do [ -S "$SOCK" ] && break; sleep 0.05; done
"$KVTIERCTL" -s "$SOCK" status >"$TMP/evil.txt"
kill "$evil"; wait "$evil" 2>/dev/null
check "an impostor's control characters do not reach the terminal" only_text "$TMP/evil.txt"
check "they show escaped" grep -qF 'a\x1b[2J\x07\rb\nc' "$TMP/evil.txt"
rm -f "$SOCK"

# The journal: entries with the peer's fields, the message escaped; where
# the journal's socket is missing, the stream's "<N>" lines.  A private
# mount namespace puts a fake journald's socket at /run/systemd/journal.
if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null || ! command -v python3 >/dev/null ||
   ! unshare --mount true 2>/dev/null; then
        for _ in 1 2 3 4 5; do ok "# SKIP the journal checks need root, unshare and python3"; done
        done_testing; exit
fi
cat >"$TMP/fake-journal.py" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "ab") as out:
    while True:
        out.write(s.recv(1 << 20) + b"\x1e\n")
        out.flush()
EOF
cat >"$TMP/in-ns.sh" <<EOF
#!/bin/sh
# Runs "\$@" as a daemon under systemd would see it: JOURNAL_STREAM set; with
# FAKE_JOURNAL=1, a fake journald listens on the native socket.
mount -t tmpfs tmpfs /run || exit 99
if [ "\${FAKE_JOURNAL:-0}" = 1 ]; then
        mkdir -p /run/systemd/journal
        python3 "$TMP/fake-journal.py" /run/systemd/journal/socket "$TMP/journal.bin" &
        echo \$! >"$TMP/fake-journal.pid"
        for i in \$(seq 100); do [ -S /run/systemd/journal/socket ] && break; sleep 0.05; done
fi
JOURNAL_STREAM=8:8 exec "\$@"
EOF
chmod +x "$TMP/in-ns.sh"
mv "$TMP/kvtierd.log" "$TMP/kvtierd-plain.log"
FAKE_JOURNAL=1 DAEMON_WRAP="unshare --mount --propagation private $TMP/in-ns.sh" check "kvtierd starts under a fake journal" start_open
"$HOSTILE" "${as_nobody[@]}" --hold 200 "$SOCK" hello "$FORGE journal" >/dev/null
check "kvtierd stops cleanly" stop_daemon
kill "$(cat "$TMP/fake-journal.pid")" 2>/dev/null
LC_ALL=C awk 'BEGIN { RS = "\x1e\n" } /FORGED journal/' "$TMP/journal.bin" >"$TMP/entry"
entry_has() { for l in "$@"; do grep -qxF -- "$l" "$TMP/entry" || { diag "no '$l' in the entry"; return 1; }; done; }
check "journal: the client's line is an entry with the peer's uid and client" \
        entry_has KVTIER_PEER_UID=65534 KVTIER_CLIENT=1 PRIORITY=6 SYSLOG_IDENTIFIER=kvtierd
check "journal: its MESSAGE is one line, escaped" \
        grep -qF 'uid 65534, "x\n<3>kvtierd: FORGED journal", GPU 0.' "$TMP/entry"
mv "$TMP/kvtierd.log" "$TMP/kvtierd-journal.log"
DAEMON_WRAP="unshare --mount --propagation private $TMP/in-ns.sh" check "kvtierd starts with no journal to reach" start_open
"$HOSTILE" "$SOCK" hello "$FORGE stream" >/dev/null
check "stream: every line has a syslog level and none is forged" every_line_ours "$TMP/kvtierd.log" "<[3-7]>[A-Z]"
check "kvtierd stops cleanly" stop_daemon
done_testing
