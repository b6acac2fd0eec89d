#!/bin/bash
# Installs what is missing (Debian 12 / Ubuntu 24.04, as root), then
# configures and builds kvtier in build/ (build-san/ with --sanitizers,
# build-tsan/ with --tsan).
#   scripts/build.sh [--sanitizers | --tsan] [--no-install]
set -euo pipefail
cd "$(dirname "$0")/.."

san=false tsan=false install=true
for a in "$@"; do
        case "$a" in
        --sanitizers) san=true ;;
        --tsan) tsan=true ;;
        --no-install) install=false ;;
        *) echo "usage: scripts/build.sh [--sanitizers | --tsan] [--no-install]" >&2; exit 2 ;;
        esac
done

pkgs="build-essential autoconf automake libtool pkg-config libsystemd-dev libinih-dev libnuma-dev libjson-c-dev liburing-dev libxxhash-dev libzstd-dev jq valgrind"
# dpkg-query exits 1 when it knows some of them not at all: not an error here.
missing=$( (dpkg-query -W -f='${Package} ${db:Status-Status}\n' $pkgs 2>/dev/null || true) | awk '$2 != "installed" { print $1 }')
# dpkg-query prints nothing for packages it has never heard of.
for p in $pkgs; do dpkg-query -W "$p" >/dev/null 2>&1 || missing="$missing $p"; done
missing=$(echo $missing | tr ' ' '\n' | sort -u | tr '\n' ' ')
if [ -n "${missing// /}" ]; then
        if ! $install; then echo "missing packages: $missing" >&2; exit 1; fi
        if [ "$(id -u)" -ne 0 ]; then echo "missing packages: $missing (run as root to install them)" >&2; exit 1; fi
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends $missing
fi

[ -x configure ] && [ configure -nt configure.ac ] && [ configure -nt Makefile.am ] || autoreconf -fi
if $san; then dir=build-san; flags="--enable-sanitizers"; else dir=build; flags=""; fi
if $tsan; then dir=build-tsan; flags="--enable-tsan"; fi
mkdir -p "$dir"
cd "$dir"
[ -f Makefile ] || ../configure --enable-werror $flags
make -j"$(nproc)"
make -j"$(nproc)" check TESTS= >/dev/null # the fakes and test programs, nothing run yet
