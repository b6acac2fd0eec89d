#!/bin/bash
# Builds the Debian packages kvtier and kvtier-dev from a clean copy of this
# tree (dpkg-buildpackage -b -us -uc), runs lintian on them (no error or
# warning may remain), and checks what they install: unpacked into a
# temporary root, tests/install/check-layout.sh with the package's
# directories.  The .deb files end up in OUTDIR (default build-deb/).
#   scripts/deb.sh [--no-install] [OUTDIR]
# Installs what the build needs (as root on Debian 12 / Ubuntu 24.04) unless
# --no-install.  DEB_BUILD_OPTIONS passes through (nocheck skips the
# package's own tests).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD install=true out=
for a in "$@"; do
        case "$a" in
        --no-install) install=false ;;
        -*) echo "usage: scripts/deb.sh [--no-install] [OUTDIR]" >&2; exit 2 ;;
        *) out=$a ;;
        esac
done
out=$(mkdir -p "${out:-build-deb}" && cd "${out:-build-deb}" && pwd)

# systemd.pc (the units' directory) is in systemd-dev where that exists
# (Ubuntu 24.04, Debian 13), in systemd before.
if $install; then
        sd=systemd
        apt-cache show systemd-dev >/dev/null 2>&1 && sd=systemd-dev
        scripts/build.sh --deps-only dpkg-dev debhelper fakeroot lintian jq groff-base "$sd"
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-deb.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/kvtier"
# The files git knows (and new ones it does not ignore); no build outputs.
if git rev-parse --git-dir >/dev/null 2>&1; then
        git ls-files -z -co --exclude-standard | tar -c --null --ignore-failed-read -T - 2>/dev/null |
                tar -x -C "$tmp/kvtier"
else
        tar -c --exclude='./build*' . | tar -x -C "$tmp/kvtier"
fi
(cd "$tmp/kvtier" && dpkg-buildpackage -b -us -uc -j"$(nproc)") >"$tmp/build.log" 2>&1 ||
        { tail -n 60 "$tmp/build.log"; echo "deb.sh: dpkg-buildpackage failed" >&2; exit 1; }
changes=$(ls "$tmp"/kvtier_*.changes)
cp "$tmp"/*.deb "$out/"
echo "deb.sh: built $(cd "$tmp" && ls *.deb | tr '\n' ' ')"

# --fail-on warning: an error or a warning fails; overrides carry reasons.
lintian --fail-on error,warning --info "$changes" | tee "$tmp/lintian.txt"
[ -s "$tmp/lintian.txt" ] || echo "lintian: clean"

# The kvtier user and groups before the directory tmpfiles makes for them.
dpkg-deb -e "$out"/kvtier_*.deb "$tmp/control"
sysusers=$(grep -n 'systemd-sysusers.*kvtier.conf' "$tmp/control/postinst" | head -n1 | cut -d: -f1)
tmpfiles=$(grep -n 'systemd-tmpfiles.*kvtier.conf' "$tmp/control/postinst" | head -n1 | cut -d: -f1)
[ -n "$sysusers" ] && [ -n "$tmpfiles" ] && [ "$sysusers" -lt "$tmpfiles" ] ||
        { echo "deb.sh: postinst must run systemd-sysusers, then systemd-tmpfiles" >&2; exit 1; }
echo "deb.sh: postinst runs systemd-sysusers, then systemd-tmpfiles --create"

mkdir "$tmp/root"
for d in "$tmp"/*.deb; do dpkg-deb -x "$d" "$tmp/root"; done
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
prefix=/usr bindir=/usr/bin sbindir=/usr/sbin sysconfdir=/etc runstatedir=/run \
        pkglibdir=/usr/lib/$multiarch/kvtier includedir=/usr/include datadir=/usr/share mandir=/usr/share/man \
        systemdsystemunitdir=$(pkg-config --variable=systemdsystemunitdir systemd) \
        bashcompletiondir=/usr/share/bash-completion/completions README="$src/README.md" \
        tests/install/check-layout.sh "$tmp/root" >"$tmp/layout.tap" || { grep -v '^ok' "$tmp/layout.tap"; exit 1; }
echo "deb.sh: layout: $(grep -c '^ok' "$tmp/layout.tap") checks passed"
