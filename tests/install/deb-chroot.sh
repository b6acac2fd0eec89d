#!/bin/bash
# By hand, as root, with a mirror reachable: installs the kvtier packages
# into a Debian chroot (made with debootstrap --variant=minbase, or given),
# as `apt install ./kvtier_*.deb` would on a machine, and checks what the
# postinst made and that the daemon serves kvtierctl there.  Nothing on this
# machine is changed outside the chroot (its /proc is mounted in a mount
# namespace of its own).  No systemd runs in a chroot: units are checked
# as files and by systemctl's offline view, kvtierd is started by hand as
# the unit would (user kvtier).  tests/install/deb-systemd.sh boots systemd
# in such a root and runs the units themselves (CI runs it).
#   tests/install/deb-chroot.sh DEBDIR [CHROOT]
set -euo pipefail
debs=$(cd "$1" && pwd)
chroot=${2:-}
if [ -z "$chroot" ]; then
        chroot=$(mktemp -d /var/tmp/kvtier-chroot.XXXXXX)
        debootstrap --variant=minbase "$(. /etc/os-release && echo "$VERSION_CODENAME")" "$chroot" >"$chroot.log" 2>&1
fi
mkdir -p "$chroot/debs"
cp "$debs"/kvtier_*.deb "$debs"/kvtier-dev_*.deb "$chroot/debs/"
cp /etc/resolv.conf "$chroot/etc/resolv.conf"
unshare --mount --fork bash -euo pipefail -c '
chroot=$1
mount -t proc proc "$chroot/proc"
inside() { chroot "$chroot" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }
export chroot; export -f inside
n=0 failed=0
check() { local d=$1; shift; n=$((n + 1)); if "$@"; then echo "ok $n - $d"; else echo "not ok $n - $d"; failed=$((failed + 1)); fi; }
inside apt-get update -qq
debs=$(cd "$chroot/debs" && printf "/debs/%s " kvtier_*.deb kvtier-dev_*.deb)
inside apt-get install -y -qq --no-install-recommends $debs man-db pkgconf >"$chroot/apt.log" 2>&1
check "apt install ./kvtier_*.deb ./kvtier-dev_*.deb" bash -c "inside dpkg-query -W kvtier kvtier-dev >/dev/null"
check "postinst made user kvtier" bash -c "inside id kvtier >/dev/null"
check "postinst made group kvtier-admin" bash -c "inside getent group kvtier-admin >/dev/null"
check "postinst made /run/kvtier 0750 kvtier:kvtier" [ "$(inside stat -c "%a %U:%G" /run/kvtier)" = "750 kvtier:kvtier" ]
check "kvtierd.socket is enabled" inside systemctl is-enabled --quiet kvtierd.socket
check "the units name /usr/sbin/kvtierd and /run/kvtier/kvtierd.sock" \
        bash -c "grep -qx \"ExecStart=/usr/sbin/kvtierd -c /etc/kvtier/kvtierd.conf\" \"$chroot\"/lib/systemd/system/kvtierd.service &&
                 grep -qx ListenSequentialPacket=/run/kvtier/kvtierd.sock \"$chroot\"/lib/systemd/system/kvtierd.socket"
conffiles=$(inside dpkg-query -W -f="\${Conffiles}" kvtier)
check "/etc/kvtier/kvtierd.conf is a conffile" grep -q /etc/kvtier/kvtierd.conf <<<"$conffiles"
check "man kvtierd.conf lists [policy] protect_min" bash -c "inside man kvtierd.conf 2>/dev/null | grep -q protect_min"
check "pkg-config --cflags kvtier" bash -c "inside pkg-config --cflags kvtier >/dev/null"
# chroot, env and setpriv exec: $! is kvtierd itself (not through the function).
chroot "$chroot" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin setpriv --reuid=kvtier --regid=kvtier --init-groups /usr/sbin/kvtierd -c /etc/kvtier/kvtierd.conf >"$chroot/kvtierd.log" 2>&1 &
daemon=$!
trap "kill -TERM $daemon 2>/dev/null" EXIT
for _ in $(seq 50); do [ -S "$chroot/run/kvtier/kvtierd.sock" ] && break; sleep 0.1; done
check "kvtierd as user kvtier listens on /run/kvtier/kvtierd.sock" [ -S "$chroot/run/kvtier/kvtierd.sock" ]
check "kvtierctl status reaches it on the default socket" bash -c "inside kvtierctl status >\"$chroot/status.txt\" 2>&1"
check "kvtierctl metrics says kvtier_up 1" bash -c "inside kvtierctl metrics | grep -qx \"kvtier_up 1\""
check "kvtier-run --print-env names the same socket" \
        bash -c "inside kvtier-run --print-env | grep -q \"^KVTIER_SOCKET\".*/run/kvtier/kvtierd.sock"
kill -TERM "$daemon"
rc=0; wait "$daemon" || rc=$?
trap - EXIT
check "kvtierd exits 0 on SIGTERM (status $rc)" [ "$rc" -eq 0 ]
inside apt-get purge -y -qq kvtier kvtier-dev >/dev/null
check "apt purge removes the binaries, units and configuration" \
        bash -c "[ ! -e \"$chroot\"/usr/sbin/kvtierd ] && [ ! -e \"$chroot\"/lib/systemd/system/kvtierd.service ] && [ ! -e \"$chroot\"/etc/kvtier/kvtierd.conf ]"
echo "1..$n"
cat "$chroot/status.txt" | sed "s/^/# /"
[ "$failed" -eq 0 ]
' deb-chroot "$chroot"
