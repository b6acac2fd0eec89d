#!/bin/bash
# Checks an installed tree (make install DESTDIR=ROOT, or the kvtier and
# kvtier-dev packages unpacked into ROOT) against the directories it was
# built for: every file where it belongs, and the socket, the configuration
# file and the shim named alike by the units, tmpfiles, the binaries, the
# sample configuration and README.md.  Prints TAP; exits 1 on a failure.
#   check-layout.sh ROOT   with prefix bindir sbindir sysconfdir runstatedir
#   pkglibdir includedir datadir mandir systemdsystemunitdir bashcompletiondir
#   and README (a path) in the environment.
set -u
root=$1
: "$prefix" "$bindir" "$sbindir" "$sysconfdir" "$runstatedir" "$pkglibdir" "$includedir" "$datadir" \
        "$mandir" "$systemdsystemunitdir" "$bashcompletiondir" "$README"
n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $*"; }
check() { local d=$1; shift; if "$@"; then ok "$d"; else not_ok "$d"; fi; }
# man pages: plain, or compressed by the packaging
man_page() { [ -f "$root$mandir/man$2/$1.$2" ] || [ -f "$root$mandir/man$2/$1.$2.gz" ]; }

sock=$runstatedir/kvtier/kvtierd.sock
conf=$sysconfdir/kvtier/kvtierd.conf
shim=$pkglibdir/libkvtier.so
unit=$root$systemdsystemunitdir
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-layout.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

for f in "$sbindir/kvtierd" "$bindir/kvtierctl" "$bindir/kvtier-run" "$bindir/kvtier-sim"; do
        check "$f is installed, executable" [ -x "$root$f" ]
done
check "the shim is $shim" [ -f "$root$shim" ]
check "no libtool archive (.la) is installed" [ -z "$(find "$root" -name '*.la')" ]
check "kvtierd.service and kvtierd.socket in $systemdsystemunitdir" \
        [ -f "$unit/kvtierd.service" ] && [ -f "$unit/kvtierd.socket" ]
check "sysusers.d and tmpfiles.d snippets" \
        [ -f "$root$prefix/lib/sysusers.d/kvtier.conf" ] && [ -f "$root$prefix/lib/tmpfiles.d/kvtier.conf" ]
check "the configuration file is $conf" [ -f "$root$conf" ]
for page in kvtierd.8 kvtierctl.1 kvtier-run.1 kvtier-sim.1 kvtierd.conf.5 libkvtier.7; do
        check "man page $page" man_page "${page%.*}" "${page##*.}"
done
check "bash completion for kvtierctl in $bashcompletiondir" bash -n "$root$bashcompletiondir/kvtierctl"
check "kvtier.h in $includedir" [ -f "$root$includedir/kvtier.h" ]
check "kvtier.pc in $datadir/pkgconfig" [ -f "$root$datadir/pkgconfig/kvtier.pc" ]

# One socket, one configuration file, one shim, wherever they are named.
check "kvtierd.service runs $sbindir/kvtierd -c $conf" \
        grep -qx "ExecStart=$sbindir/kvtierd -c $conf" "$unit/kvtierd.service"
check "kvtierd.socket listens on $sock" grep -qx "ListenSequentialPacket=$sock" "$unit/kvtierd.socket"
check "tmpfiles makes ${sock%/*}" grep -q "^d ${sock%/*} " "$root$prefix/lib/tmpfiles.d/kvtier.conf"
docs=$(sed -n 's/^Documentation=//p' "$unit/kvtierd.service" "$unit/kvtierd.socket" | tr ' ' '\n' | sort -u)
only_man_pages() { [ -n "$docs" ] && ! echo "$docs" | grep -qv '^man:'; }
check "the units' Documentation= names man pages" only_man_pages
for d in $docs; do
        p=${d#man:} name=${p%(*} sec=${p#*(}
        check "Documentation=$d is installed" man_page "$name" "${sec%)}"
done
check "kvtierd --help names $conf" bash -c "'$root$sbindir/kvtierd' --help | grep -qF '(default $conf;'"
"$root$sbindir/kvtierd" -c "$root$conf" --print-config >"$tmp/print-config" 2>"$tmp/print-config.err"
check "kvtierd's default socket is $sock" grep -qx "socket = $sock" "$tmp/print-config"
check "kvtierctl --help names $sock" bash -c "'$root$bindir/kvtierctl' --help | grep -qF '$sock'"
# (or reaches a daemon there)
check "kvtierctl connects to $sock by default" \
        bash -c "out=\$(env -u KVTIER_SOCKET '$root$bindir/kvtierctl' status 2>&1) || grep -qF 'kvtierd at $sock:' <<<\"\$out\""
check "kvtier-run preloads $shim" grep -qF "$shim" "$root$bindir/kvtier-run"
KVTIER_LIB="$root$shim" ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" \
        "$root$bindir/kvtier-run" --print-env >"$tmp/env" 2>&1
check "the shim's default socket is $sock" \
        bash -c "awk -F'\t' '\$1 == \"KVTIER_SOCKET\" { print \$3 }' '$tmp/env' | grep -qx '$sock'"
check "the sample configuration names $conf and $sock" \
        bash -c "grep -qF '$conf' '$root$conf' && grep -qx '#socket = $sock' '$root$conf'"
# README.md documents the default source build (/usr/local) and the package (/usr).
case "$prefix" in
/usr | /usr/local)
        check "README.md names $sock" grep -qF "$sock" "$README"
        check "README.md names $conf" grep -qF "$conf" "$README"
        check "README.md names $shim" grep -qF "$shim" "$README"
        check "README.md names $systemdsystemunitdir" grep -qF "$systemdsystemunitdir" "$README"
        ;;
*) ok "# SKIP README.md documents prefixes /usr and /usr/local, not $prefix" ;;
esac

# systemd finds the snippets and units there (it looks under /usr and
# /usr/local, not under other prefixes), and the snippets make what the
# units need: run on the tree itself (--root), never on this machine.
case "$prefix" in
/usr | /usr/local)
        if command -v systemd-sysusers >/dev/null && command -v systemd-tmpfiles >/dev/null; then
                check "systemd-sysusers --root reads kvtier.conf from there" \
                        bash -c "systemd-sysusers --root='$root' --cat-config 2>/dev/null | grep -qx '# $root$prefix/lib/sysusers.d/kvtier.conf'"
                check "systemd-tmpfiles --root reads kvtier.conf from there" \
                        bash -c "systemd-tmpfiles --root='$root' --cat-config 2>/dev/null | grep -qx '# $root$prefix/lib/tmpfiles.d/kvtier.conf'"
                if [ "$(id -u)" -eq 0 ]; then
                        mkdir -p "$root/etc"
                        systemd-sysusers --root="$root" >"$tmp/sysusers.out" 2>&1
                        check "systemd-sysusers --root makes user kvtier, groups kvtier and kvtier-admin" \
                                bash -c "grep -q '^kvtier:' '$root/etc/passwd' && grep -q '^kvtier:' '$root/etc/group' && grep -q '^kvtier-admin:' '$root/etc/group'"
                        systemd-tmpfiles --root="$root" --create kvtier.conf >"$tmp/tmpfiles.out" 2>&1
                        uid=$(awk -F: '$1 == "kvtier" { print $3 }' "$root/etc/passwd")
                        check "systemd-tmpfiles --root makes ${sock%/*} 0750, owned by kvtier" \
                                [ "$(stat -c '%a %u' "$root${sock%/*}" 2>/dev/null)" = "750 ${uid:-none}" ]
                fi
        fi
        if command -v systemd-analyze >/dev/null; then
                check "$systemdsystemunitdir is on systemd's unit path" \
                        bash -c "systemd-analyze unit-paths 2>/dev/null | grep -qx '$systemdsystemunitdir'"
        fi ;;
*) ok "# SKIP systemd reads snippets and units under /usr and /usr/local, not $prefix" ;;
esac

# kvtier.pc gives the flags that find kvtier.h.
if command -v pkg-config >/dev/null; then
        cflags=$(PKG_CONFIG_SYSROOT_DIR="$root" PKG_CONFIG_LIBDIR="$root$datadir/pkgconfig" pkg-config --cflags kvtier)
        check "pkg-config --cflags kvtier is -I$root$includedir" [ "$(echo $cflags)" = "-I$root$includedir" ]
        version=$(PKG_CONFIG_LIBDIR="$root$datadir/pkgconfig" pkg-config --modversion kvtier)
        check "pkg-config --modversion kvtier is kvtierd's version ($version)" \
                [ "kvtierd $version" = "$("$root$sbindir/kvtierd" --version)" ]
        printf '#include <kvtier.h>\nint main(void) { return KVTIER_HINT_HOT == 1 ? 0 : 1; }\n' >"$tmp/hint.c"
        check "a program that includes <kvtier.h> builds with those flags" \
                ${CC:-cc} $cflags -o "$tmp/hint" "$tmp/hint.c"
fi
echo "1..$n"
[ "$failed" -eq 0 ]
