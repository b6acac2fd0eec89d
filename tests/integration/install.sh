#!/bin/bash
# make install into a temporary root, then tests/install/check-layout.sh:
# files where the build's directories say, and the socket, configuration
# file and shim named alike everywhere.  CI runs the same check on the
# Debian packages (prefix /usr, sysconfdir /etc).
set -u
: "${top_builddir:?}" "${top_srcdir:?}"
root=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-install.XXXXXX")
trap 'rm -rf "$root"' EXIT
if ! make -s -C "$top_builddir" install DESTDIR="$root" >"$root.log" 2>&1; then
        echo "1..1"; echo "not ok 1 - make install DESTDIR=..."; sed 's/^/# /' "$root.log"; rm -f "$root.log"; exit 1
fi
rm -f "$root.log"
README="$top_srcdir/README.md" "$top_srcdir/tests/install/check-layout.sh" "$root"
