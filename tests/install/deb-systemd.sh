#!/bin/bash
# The fresh-machine sequence with systemd running: boots /lib/systemd/systemd
# as PID 1 of a Debian root of its own (debootstrap --variant=minbase
# --include=systemd, or ROOT given), in new PID, mount, UTS, IPC and cgroup
# namespaces, then inside it: apt install ./kvtier_*.deb ./kvtier-dev_*.deb,
# systemctl enable --now kvtierd.socket, the demo engine under kvtier-run as
# a user of group kvtier (against the fake CUDA: the package does not ship
# it, so the engine and tests/fakes/.libs are copied in, as scripts/demo.sh
# runs without a GPU), kvtierctl status showing its client, kvtierd.service
# started by its socket, systemctl stop; then the namespaces are killed.
#   tests/install/deb-systemd.sh DEBDIR BUILDDIR [ROOT]
# DEBDIR holds the .deb files (scripts/deb.sh), BUILDDIR a build where
# `make check TESTS=` made tests/engine/kv-engine and the fakes.  As root.
# Prints TAP; where systemd cannot boot here (not root, no namespaces, no
# cgroup2, no debootstrap or mirror) it prints "1..0 # SKIP why" and exits 0.
#
# Nothing outside ROOT is given to that systemd: its / is ROOT (pivot_root,
# the old root unmounted), /proc its own, /proc/sys and /sys read-only,
# /dev a tmpfs with the harmless nodes, /run and /tmp tmpfs of its own, its
# cgroup a new one below this shell's, and the capabilities that reach past
# a container dropped.  (systemd booted with the host's / ran
# systemd-tmpfiles on it and wiped the machine's /tmp.)  It is stopped by
# SIGKILL from outside, which takes the whole PID namespace with it: at the
# end, on any exit of this script, and when unshare dies (--kill-child).
# On this kind of machine (2 CPUs, mirror reachable) it takes about 40 s,
# 30 of them debootstrap's.
set -uo pipefail
skip() { [ -z "${work:-}" ] || rm -rf "$work"; echo "1..0 # SKIP $*"; exit 0; }
[ $# -ge 2 ] || { echo "usage: tests/install/deb-systemd.sh DEBDIR BUILDDIR [ROOT]" >&2; exit 2; }
debs=$(cd "$1" && pwd) || exit 2
build=$(cd "$2" && pwd) || exit 2
root=${3:-}
started=$(date +%s)

[ "$(id -u)" = 0 ] || skip "not root"
ls "$debs"/kvtier_*.deb "$debs"/kvtier-dev_*.deb >/dev/null 2>&1 || { echo "no kvtier .deb files in $debs" >&2; exit 2; }
engine=$build/tests/engine/kv-engine fakes=$build/tests/fakes/.libs
[ -x "$engine" ] && [ -e "$fakes/libcudart.so.13" ] ||
        { echo "no $engine or fake CUDA in $fakes (make -C $build check TESTS= builds them)" >&2; exit 2; }
for t in unshare nsenter pivot_root findmnt; do command -v "$t" >/dev/null || skip "$t not installed"; done
unshare --pid --fork --mount --uts --ipc --cgroup true 2>/dev/null || skip "no PID, mount, UTS, IPC and cgroup namespaces here"
cg2=$(findmnt -n -t cgroup2 -o TARGET | head -n 1)
[ -n "$cg2" ] || skip "no cgroup2 hierarchy mounted"
cgself=$(sed -n 's/^0:://p' /proc/self/cgroup)
work=$(mktemp -d /var/tmp/kvtier-systemd.XXXXXX)
if [ -z "$root" ]; then
        command -v debootstrap >/dev/null || skip "debootstrap not installed"
        codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
        [ -n "$codename" ] || skip "no VERSION_CODENAME in /etc/os-release"
        root=$work/root
        t=$(date +%s)
        debootstrap --variant=minbase --include=systemd "$codename" "$root" >"$work/debootstrap.log" 2>&1 ||
                { tail -n 5 "$work/debootstrap.log" | sed 's/^/# /'; rm -rf "$work"; skip "debootstrap $codename failed (no mirror?)"; }
        echo "# debootstrap --variant=minbase --include=systemd $codename: $(($(date +%s) - t)) s"
fi
root=$(cd "$root" && pwd)
# A root of its own, never this machine's.
[ "$root" != / ] && [ "$(stat -c %d:%i "$root")" != "$(stat -c %d:%i /)" ] || { echo "ROOT must not be /" >&2; exit 2; }
[ -x "$root/lib/systemd/systemd" ] || { echo "no systemd in $root (debootstrap --include=systemd)" >&2; exit 2; }

n=0 failed=0
check() { local d=$1; shift; n=$((n + 1)); if "$@"; then echo "ok $n - $d"; else echo "not ok $n - $d"; failed=$((failed + 1)); fi; }
diag() { sed 's/^/# /'; }

cg=$cg2$cgself/kvtier-systemd.$$
sd=
teardown() {
        local u
        if [ -n "$sd" ]; then
                kill -KILL "$sd" 2>/dev/null
                for _ in $(seq 100); do [ -e "/proc/$sd" ] || break; sleep 0.1; done
        fi
        [ -n "${upid:-}" ] && wait "$upid" 2>/dev/null
        # The cgroups it made, deepest first (empty now that its processes are gone).
        [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
        u=$sd sd=
        [ -z "$u" ] || [ ! -e "/proc/$u" ]
}
trap teardown EXIT
trap 'exit 143' TERM # so that the EXIT trap runs under timeout(1)
trap 'exit 130' INT

# Every command inside: in all of PID 1's namespaces, its root, a clean environment.
inside() {
        nsenter -t "$sd" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 "$@"
}

mkdir "$cg" || skip "cannot make a cgroup in $cg2$cgself"
[ -s "$root/etc/machine-id" ] || systemd-machine-id-setup --root="$root" >/dev/null 2>&1 ||
        tr -dc a-f0-9 </dev/urandom | head -c 32 >"$root/etc/machine-id"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mkdir -p "$root/debs" "$root/opt/kvtier-e2e"
rm -f "$root"/debs/*.deb
cp "$debs"/kvtier_*.deb "$debs"/kvtier-dev_*.deb "$root/debs/"
cp "$engine" "$root/opt/kvtier-e2e/"
cp -P "$fakes"/lib*.so* "$root/opt/kvtier-e2e/"

# The boot: this subshell moves to the new cgroup, unshare makes the
# namespaces (the cgroup one rooted there) and forks PID 1, which mounts
# the root's file systems, pivots into it and becomes systemd.
(
        echo 0 >"$cg/cgroup.procs" || exit 1
        exec unshare --pid --fork --kill-child=SIGKILL --mount --uts --ipc --cgroup --propagation private bash -euc '
                root=$1
                mount --bind "$root" "$root"
                mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
                for p in sys sysrq-trigger; do
                        [ -e "$root/proc/$p" ] || continue
                        mount --bind "$root/proc/$p" "$root/proc/$p"
                        mount -o remount,bind,ro "$root/proc/$p"
                done
                mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys"
                mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$root/sys/fs/cgroup"
                mount -t tmpfs -o mode=755,nosuid,size=64m dev "$root/dev"
                for d in null zero full random urandom tty; do
                        touch "$root/dev/$d"
                        mount --bind "/dev/$d" "$root/dev/$d"
                done
                mkdir "$root/dev/pts" "$root/dev/shm"
                mount -t devpts -o newinstance,ptmxmode=0666,mode=620,nosuid,noexec devpts "$root/dev/pts"
                ln -s pts/ptmx "$root/dev/ptmx"
                ln -s /proc/self/fd "$root/dev/fd"
                mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"
                mount -t tmpfs -o mode=755,nosuid,nodev,size=256m run "$root/run"
                mount -t tmpfs -o mode=1777,nosuid,nodev tmp "$root/tmp"
                cd "$root"
                mkdir -p .oldroot
                pivot_root . .oldroot
                cd /
                umount -l /.oldroot
                rmdir /.oldroot
                export container=kvtier-e2e
                exec setpriv --bounding-set=-sys_module,-sys_time,-sys_rawio,-syslog,-sys_pacct,-wake_alarm,-mac_admin,-mac_override,-audit_control,-audit_read,-audit_write,-block_suspend \
                        /lib/systemd/systemd
        ' boot "$root"
) </dev/null >"$work/systemd.log" 2>&1 &
upid=$!
for _ in $(seq 100); do
        sd=$(cat "/proc/$upid/task/$upid/children" 2>/dev/null | awk '{ print $1 }')
        [ -n "$sd" ] && [ "$(cat "/proc/$sd/comm" 2>/dev/null)" = systemd ] && break
        sd=
        kill -0 "$upid" 2>/dev/null || break
        sleep 0.1
done
if [ -z "$sd" ]; then
        # The namespaces could be made (above): a boot that fails is a failure.
        echo "not ok 1 - systemd starts as PID 1 of its own namespaces"
        diag <"$work/systemd.log"
        echo "1..1"
        echo "# kept $work"
        exit 1
fi

t=$(date +%s)
state=
for _ in $(seq 120); do
        state=$(inside systemctl is-system-running 2>/dev/null)
        case "$state" in running | degraded) break ;; esac
        sleep 0.5
done
echo "# systemd $(inside systemctl --version | head -n 1 | cut -d' ' -f2) booted in $(($(date +%s) - t)) s: $state"
check "systemd boots as PID 1 of its own namespaces and reaches its default target ($state)" \
        [ "$state" = running ] || [ "$state" = degraded ]
[ "$state" = degraded ] && inside systemctl --failed --no-legend --plain | diag
check "PID 1 there is systemd, in a root of its own" \
        bash -c "[ \"\$(nsenter -t $sd -p -m cat /proc/1/comm)\" = systemd ] && [ ! -e /proc/$sd/root/.oldroot ]"

t=$(date +%s)
inside apt-get update -qq >"$work/apt.log" 2>&1
debs_in=$(cd "$root/debs" && printf '/debs/%s ' kvtier_*.deb kvtier-dev_*.deb)
inside apt-get install -y -qq --no-install-recommends $debs_in >>"$work/apt.log" 2>&1; rc=$?
echo "# apt-get update and install: $(($(date +%s) - t)) s"
check "apt install ./kvtier_*.deb ./kvtier-dev_*.deb" bash -c "[ $rc -eq 0 ] && nsenter -t $sd -a dpkg-query -W kvtier kvtier-dev >/dev/null"
[ "$rc" -eq 0 ] || tail -n 20 "$work/apt.log" | diag
check "the postinst started kvtierd.socket" inside systemctl is-active --quiet kvtierd.socket
check "the postinst started kvtier-metrics.timer" inside systemctl is-active --quiet kvtier-metrics.timer
no_failed() { inside systemctl --failed --no-legend --plain >"$work/failed.txt"; [ ! -s "$work/failed.txt" ]; }
check "no unit failed after the install" no_failed
diag <"$work/failed.txt"

inside systemctl enable --now kvtierd.socket >"$work/enable.log" 2>&1; rc=$?
check "systemctl enable --now kvtierd.socket" [ "$rc" -eq 0 ]
# (running: the postinst started kvtierd.service too, and the socket passed to it)
socket_up() { [ "$(inside systemctl is-enabled kvtierd.socket)" = enabled ] && grep -qxE 'listening|running' <(inside systemctl show -P SubState kvtierd.socket); }
check "kvtierd.socket is enabled and active" socket_up
check "/run/kvtier/kvtierd.sock is a socket, 0660 kvtier:kvtier" \
        [ "$(inside stat -c '%F %a %U:%G' /run/kvtier/kvtierd.sock 2>/dev/null)" = "socket 660 kvtier:kvtier" ]

# Socket activation: with the service stopped and the socket left, the
# first connection starts it.
inside systemctl stop kvtierd.service 2>/dev/null # "it can still be activated by kvtierd.socket"
check "kvtierd.service stopped, kvtierd.socket still listening" \
        bash -c "! nsenter -t $sd -a systemctl is-active --quiet kvtierd.service &&
                 [ \"\$(nsenter -t $sd -a systemctl show -P SubState kvtierd.socket)\" = listening ]"
inside kvtierctl status >"$work/first.txt" 2>&1; rc=$?
check "kvtierctl status answers on the default socket" [ "$rc" -eq 0 ]
check "and its connection started kvtierd.service (socket activated)" inside systemctl is-active --quiet kvtierd.service
check "kvtierd.service is triggered by kvtierd.socket" \
        bash -c "nsenter -t $sd -a systemctl show -P TriggeredBy kvtierd.service | grep -qw kvtierd.socket"
mainpid=$(inside systemctl show -P MainPID kvtierd.service)
check "kvtierd runs as user kvtier" [ "$(inside stat -c %U "/proc/$mainpid" 2>/dev/null)" = kvtier ]

# The demo engine under kvtier-run, as a user of group kvtier, with a 64 MiB
# budget set live: 256 MiB of KV read in a sliding window.
inside useradd -m -G kvtier alice
inside kvtierctl set vram_budget 64M >"$work/set.log" 2>&1; rc=$?
check "kvtierctl set vram_budget 64M" [ "$rc" -eq 0 ]
inside setpriv --reuid=alice --regid=alice --init-groups --reset-env env LD_LIBRARY_PATH=/opt/kvtier-e2e \
        kvtier-run /opt/kvtier-e2e/kv-engine --regions 4 --region-size 64M --window 32M --steps 120 \
        --step-ms 25 --hint >"$work/engine.out" 2>&1 &
epid=$!
seen=
for _ in $(seq 100); do
        inside kvtierctl status --json >"$work/mid.json" 2>/dev/null &&
                [ "$(jq '[.clients[] | select(.name == "kv-engine") | .regions[]] | length' "$work/mid.json" 2>/dev/null)" = 4 ] &&
                { seen=1; break; }
        kill -0 "$epid" 2>/dev/null || break
        sleep 0.1
done
inside kvtierctl status >"$work/mid.txt" 2>&1
check "kvtierctl status shows the engine's client and its four regions while it runs" \
        bash -c "[ -n '$seen' ] && grep -q kv-engine '$work/mid.txt' && [ \"\$(grep -c cudaMalloc '$work/mid.txt')\" -eq 4 ]"
check "the client is alice's, through the shim kvtier-run preloads" \
        bash -c "[ \"\$(jq -r '.clients[] | select(.name == \"kv-engine\") | .uid' '$work/mid.json')\" = \"\$(nsenter -t $sd -a id -u alice)\" ]"
wait "$epid"; rc=$?
check "the engine under kvtier-run exits 0 with its data intact" \
        bash -c "[ $rc -eq 0 ] && grep -q 'mismatched words 0\$' '$work/engine.out'"
[ "$rc" -eq 0 ] || diag <"$work/engine.out"
inside kvtierctl status >"$work/final.txt" 2>&1
check "kvtierctl status after it shows migrations" grep -q '^Migrations: [1-9]' "$work/final.txt"
check "kvtierctl metrics says kvtier_up 1" bash -c "nsenter -t $sd -a kvtierctl metrics | grep -qx 'kvtier_up 1'"
inside systemctl status --no-pager kvtierd.service >"$work/service.txt" 2>&1
check "systemctl status kvtierd.service: active (running)" grep -q 'Active: active (running)' "$work/service.txt"
same_daemon() { [ "$(inside systemctl show -P MainPID kvtierd.service)" = "$mainpid" ] && [ "$(inside systemctl show -P NRestarts kvtierd.service)" = 0 ]; }
check "the same kvtierd served it all (MainPID $mainpid, no restart)" same_daemon
check "journalctl -u kvtierd has the daemon's log" bash -c "nsenter -t $sd -a journalctl -u kvtierd.service --no-pager | grep -q 'kvtierd\['"

inside systemctl stop kvtierd.socket kvtierd.service; rc=$?
check "systemctl stop kvtierd.socket kvtierd.service" [ "$rc" -eq 0 ]
check "both inactive, the socket file removed" \
        bash -c "! nsenter -t $sd -a systemctl is-active --quiet kvtierd.service &&
                 ! nsenter -t $sd -a systemctl is-active --quiet kvtierd.socket &&
                 ! nsenter -t $sd -a test -e /run/kvtier/kvtierd.sock"
inside journalctl -b --no-pager >"$work/journal.txt" 2>&1
torn_down() { teardown && [ ! -d "$cg" ]; }
check "the namespaces are torn down (PID 1 killed, its cgroups removed)" torn_down
trap - EXIT

echo "1..$n"
echo "# kvtierctl status while the engine ran:"
diag <"$work/mid.txt"
echo "# systemctl status kvtierd.service:"
head -n 3 "$work/service.txt" | diag
echo "# $(($(date +%s) - started)) s in all"
if [ "$failed" -eq 0 ]; then
        # No mount of that namespace is left on ROOT: it can go.
        findmnt -rn -o TARGET | grep -q "^$work" || rm -rf "$work"
else
        echo "# kept $work (journal.txt, apt.log, engine.out)"
fi
[ "$failed" -eq 0 ]
