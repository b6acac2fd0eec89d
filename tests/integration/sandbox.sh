#!/bin/bash
# kvtierd.service's sandbox (issue 18, least privilege).  The unit as built
# (make install copies it as it is) rates at most 2.0 in `systemd-analyze
# security --offline=true` (the unit that ran kvtierd as root: 5.9); the
# sysusers and tmpfiles snippets make the user, groups and directory the
# units name; and kvtierd runs the way the unit runs it: socket-activated, as
# an unprivileged user with no capabilities, in a network namespace of its
# own (PrivateNetwork=), under the unit's SystemCallFilter= (seccomp-exec),
# serving root and a member of the socket's group.
. "$(dirname "$0")/lib.sh"

command -v systemd-analyze >/dev/null || { echo "1..0 # SKIP systemd-analyze not installed"; exit 0; }
# --offline came with systemd 250.
systemd-analyze security --help 2>&1 | grep -q -e '--offline' ||
        { echo "1..0 # SKIP systemd-analyze security has no --offline (systemd < 250)"; exit 0; }

units="$top_builddir/systemd"
service="$units/kvtierd.service"
socket="$units/kvtierd.socket"
key() { sed -n "s/^$2=//p" "$1"; } # key FILE KEY: its values, one a line

(cd "$units" && systemd-analyze security --offline=true ./kvtierd.service) >"$TMP/security.out" 2>&1
exposure=$(sed -n 's/.*Overall exposure level for kvtierd.service: \([0-9.]*\).*/\1/p' "$TMP/security.out")
check "systemd-analyze security rates kvtierd.service" [ -n "$exposure" ]
if awk -v e="${exposure:-99}" 'BEGIN { exit !(e <= 2.0) }'; then
        ok "exposure $exposure <= 2.0"
else
        not_ok "exposure ${exposure:-none} <= 2.0"
        diag "$(grep -e '✗' -e 'Overall' "$TMP/security.out")"
fi

# What the exposure does not weigh, and why the unit leaves it so.
check "runs as the kvtier user" [ "$(key "$service" User)" = kvtier ]
check "no capabilities, bounding or ambient" \
        bash -c "grep -q '^CapabilityBoundingSet=\$' '$service' && grep -q '^AmbientCapabilities=\$' '$service'"
# hidepid would hide clients' /proc/PID/cgroup ([client.*] unit=) from a
# non-root daemon; a user namespace would map peers' SO_PEERCRED uids to nobody.
check "clients' /proc/PID stays visible (no ProtectProc=invisible/ptraceable/noaccess)" \
        bash -c "! grep -q -E '^ProtectProc=(invisible|ptraceable|noaccess)' '$service'"
check "no PrivateUsers= (peers' uids stay real)" bash -c "! grep -q -E '^PrivateUsers=(yes|true|1|self|identity)' '$service'"
nofile=$(key "$service" LimitNOFILE)
check_le "LimitNOFILE= is set, at least 16384" 16384 "${nofile:-0}"
sockdir=$(dirname "$(key "$socket" ListenSequentialPacket)")
check "the socket's directory is the service's RuntimeDirectory ($sockdir)" \
        [ "$sockdir" = "/run/$(key "$service" RuntimeDirectory)" ]
check "RuntimeDirectory survives restarts (the socket unit's socket is in it)" \
        [ "$(key "$service" RuntimeDirectoryPreserve)" = yes ]

# The snippets, applied to an empty root: users and groups from sysusers,
# then the directory from tmpfiles with the owner that sysusers made.
root="$TMP/root"
mkdir -p "$root/etc"
if [ "$(id -u)" -ne 0 ]; then
        for _ in 1 2 3 4 5; do ok "# SKIP sysusers and tmpfiles on a scratch root need root"; done
else
        systemd-sysusers --root="$root" - <"$top_srcdir/systemd/kvtier.sysusers" >"$TMP/sysusers.out" 2>&1
        check "systemd-sysusers takes kvtier.sysusers without a complaint" \
                bash -c "! grep -E ':[0-9]+:' '$TMP/sysusers.out'"
        user=$(awk -F: '$1 == "kvtier" { print $3 ":" $4 }' "$root/etc/passwd")
        check "it makes the unit's User= ($user)" [ -n "$user" ]
        check "and the socket's SocketUser= and SocketGroup=" \
                bash -c "grep -q '^$(key "$socket" SocketUser):' '$root/etc/passwd' &&
                         grep -q '^$(key "$socket" SocketGroup):' '$root/etc/group'"
        check "and the kvtier-admin group" grep -q '^kvtier-admin:' "$root/etc/group"
        systemd-tmpfiles --root="$root" --create "$units/kvtier.tmpfiles" >"$TMP/tmpfiles.out" 2>&1
        check "systemd-tmpfiles makes $sockdir 0750, owned by kvtier" \
                [ "$(stat -c '%a %u:%g' "$root$sockdir" 2>/dev/null)" = "750 $user" ]
fi

# kvtierd as the unit runs it.  A uid and gid of no account here stand for
# kvtier, another for a member of the group.
run_uid=64990 member_uid=64991
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null || ! unshare -n true 2>/dev/null; then
        echo "# the unprivileged run needs root, setpriv and unshare"
        done_testing
        exit
fi
# The unit's allow list, groups expanded: the first SystemCallFilter= line
# allows, ~ lines take away.
syscalls() {
        local n
        for n in "$@"; do
                case "$n" in
                @*) syscalls $(systemd-analyze syscall-filter "$n" |
                        awk -v g="$n" '$1 == g { f = 1; next } f && NF == 0 { exit } f && $1 != "#" { print $1 }') ;;
                *) echo "$n" ;;
                esac
        done
}
filters=$(key "$service" SystemCallFilter)
check "SystemCallFilter= is an allow list" [ -n "$filters" -a "${filters:0:1}" != "~" ]
: >"$TMP/allow"
while read -r f; do
        case "$f" in
        "~"*) syscalls ${f#\~} | sort -u >"$TMP/deny"; sort -u "$TMP/allow" | comm -23 - "$TMP/deny" >"$TMP/allow.new" ;;
        *) { cat "$TMP/allow"; syscalls $f; } | sort -u >"$TMP/allow.new" ;;
        esac
        mv "$TMP/allow.new" "$TMP/allow"
done <<<"$filters"
# systemd allows these whatever the list says (it needs them to start the service).
printf '%s\n' execve exit exit_group getrlimit rt_sigreturn sigreturn >>"$TMP/allow"
check "SystemCallErrorNumber=EPERM (what libnuma's probe below gets)" [ "$(key "$service" SystemCallErrorNumber)" = EPERM ]

write_config 64M
chown "$run_uid:$run_uid" "$TMP"
chmod 0750 "$TMP" # as RuntimeDirectoryMode=
mkdir -m 0777 "$TMP/member"
# Outside the filter, what kvtierd may call and take EPERM for: libnuma
# probes set_mempolicy(MPOL_PREFERRED_MANY) at start.  Anything else kills it.
WATCHDOG_USEC=1000000 "$top_builddir/tests/integration/activate" "$SOCK" "$TMP/notify.sock" \
        unshare -n setpriv --reuid=$run_uid --regid=$run_uid --clear-groups --inh-caps=-all --bounding-set=-all \
        "$top_builddir/tests/integration/seccomp-exec" "$TMP/allow" set_mempolicy \
        "$KVTIERD" -c "$TMP/kvtierd.conf" >"$TMP/notify.out" 2>"$TMP/kvtierd.log" &
act=$!
for _ in $(seq 200); do grep -q '^READY=1' "$TMP/notify.out" 2>/dev/null && break; sleep 0.05; done
chgrp "$run_uid" "$SOCK" # as SocketGroup=
check "READY=1 from the sandboxed kvtierd" grep -q '^READY=1' "$TMP/notify.out"
pid=$(sed -n 's/^PID=//p' "$TMP/notify.out")
check "it runs as uid $run_uid with no capabilities" \
        bash -c "grep -q '^Uid:[[:space:]]*$run_uid[[:space:]]' /proc/$pid/status && grep -q '^CapEff:[[:space:]]*0*\$' /proc/$pid/status"
check "root's kvtierctl talks to it" "$KVTIERCTL" -s "$SOCK" status
run_engine engine --regions 2 --region-size 64M --window 32M --steps 10 --step-ms 5; rc=$?
check "root's engine runs" [ $rc -eq 0 ]
check_gt "its regions were captured" "$(stat_of engine managed_allocs)" 0
check "root changes a setting" "$KVTIERCTL" -s "$SOCK" set policy lru
ENGINE_WRAP="setpriv --reuid=$member_uid --regid=$member_uid --groups=$run_uid" \
        run_engine member/engine --regions 2 --region-size 64M --window 32M --steps 10 --step-ms 5; rc=$?
check "an engine of a group member runs" [ $rc -eq 0 ]
check_gt "its regions were captured" "$(stat_of member/engine managed_allocs)" 0
kill -TERM "$pid"
wait $act; rc=$?
check "kvtierd exits 0 on SIGTERM (not killed by the filter)" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "$(tail -20 "$TMP/kvtierd.log")"
check_gt "watchdog pinged" "$(grep -c '^WATCHDOG=1' "$TMP/notify.out")" 0
done_testing
