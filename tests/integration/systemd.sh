#!/bin/bash
# kvtierd under systemd's protocols, with tests/integration/activate playing
# systemd: socket activation (the socket kvtierd.socket would pass), sd_notify
# READY/STOPPING, and watchdog pings at the rate WATCHDOG_USEC asks.  Also
# checks that the unit templates name the installed paths.
. "$(dirname "$0")/lib.sh"

ACTIVATE="$top_builddir/tests/integration/activate"
write_config 64M
# The configured socket is not the activated one: activation must win.
sed -i "s|^socket = .*|socket = $TMP/unused.sock|" "$TMP/kvtierd.conf"

WATCHDOG_USEC=200000 "$ACTIVATE" "$SOCK" "$TMP/notify.sock" ${DAEMON_WRAP:-} "$KVTIERD" -c "$TMP/kvtierd.conf" \
        >"$TMP/notify.out" 2>"$TMP/kvtierd.log" &
act=$!
for _ in $(seq 100); do grep -q '^READY=1' "$TMP/notify.out" 2>/dev/null && break; sleep 0.05; done
check "READY=1 sent once the socket is served" grep -q '^READY=1' "$TMP/notify.out"
check "STATUS names the activated socket" grep -q "^STATUS=Listening on $SOCK" "$TMP/notify.out"
check "kvtierctl talks to the activated socket" "$KVTIERCTL" -s "$SOCK" status
check "status JSON reports the activated socket" [ "$(status_json | jq -r .socket)" = "$SOCK" ]
check "the configured socket was not created" [ ! -e "$TMP/unused.sock" ]

run_engine engine --regions 2 --region-size 64M --window 32M --steps 10 --step-ms 5; rc=$?
check "an engine under the shim runs against the activated daemon" [ $rc -eq 0 ]
check_gt "its regions were captured" "$(stat_of engine managed_allocs)" 0

sleep 0.5
pings=$(grep -c '^WATCHDOG=1' "$TMP/notify.out")
# 200 ms watchdog: sd-event pings every quarter to half of it.
check_gt "watchdog pinged at least twice in 0.5 s" "$pings" 1

pid=$(sed -n 's/^PID=//p' "$TMP/notify.out")
kill -TERM "$pid"
wait $act; rc=$?
check "kvtierd exits 0 on SIGTERM" [ $rc -eq 0 ]
check "STOPPING=1 sent on the way out" grep -q '^STOPPING=1' "$TMP/notify.out"
check "READY came before STOPPING" \
        [ "$(grep -n '^READY=1' "$TMP/notify.out" | cut -d: -f1)" -lt "$(grep -n '^STOPPING=1' "$TMP/notify.out" | cut -d: -f1)" ]

# The units as built name the paths the build installs.
units="$top_builddir/systemd"
check "kvtierd.service is Type=notify with a watchdog" \
        grep -q '^Type=notify' "$units/kvtierd.service" && grep -q '^WatchdogSec=' "$units/kvtierd.service"
check "kvtierd.service runs kvtierd by absolute path on the installed config" \
        grep -q '^ExecStart=/[^ ]*/sbin/kvtierd -c /[^ ]*/kvtier/kvtierd.conf$' "$units/kvtierd.service"
check "kvtierd.socket listens on a SEQPACKET socket, mode 0660" \
        grep -q '^ListenSequentialPacket=/.*/kvtier/kvtierd.sock$' "$units/kvtierd.socket" && grep -q '^SocketMode=0660' "$units/kvtierd.socket"
check "no placeholder left in the units" bash -c "! grep -q '@[a-z]*@' '$units/kvtierd.service' '$units/kvtierd.socket'"
if command -v systemd-analyze >/dev/null; then
        # verify needs the binary where ExecStart says: point it at the build.
        sed "s|^ExecStart=[^ ]*|ExecStart=$KVTIERD|" "$units/kvtierd.service" >"$TMP/kvtierd.service"
        cp "$units/kvtierd.socket" "$TMP/kvtierd.socket"
        check "systemd-analyze verify accepts the units" \
                bash -c "cd '$TMP' && systemd-analyze verify --man=no ./kvtierd.socket ./kvtierd.service 2>&1 | tee '$TMP/verify.out' | grep -v -e 'Failed to connect' -e 'not executable' -e 'PrivateDevices' ; ! grep -qi 'unknown\|invalid\|failed to parse' '$TMP/verify.out'"
fi
done_testing
