#!/bin/bash
# Installs what is missing (Debian 12 / Ubuntu 24.04, as root), then
# configures and builds kvtier in build/ (build-san/ with --sanitizers,
# build-tsan/ with --tsan).
#   scripts/build.sh [--sanitizers | --tsan] [--no-install]
#   scripts/build.sh --deps-only [PACKAGE...]   install what is missing of
#                         the build's packages and PACKAGEs, build nothing
# Only packages that are not installed are installed, never upgraded
# (--no-upgrade), without recommends; another apt or dpkg holding the dpkg
# lock is waited for, at most LOCK_WAIT_S seconds (default 300).
set -euo pipefail
cd "$(dirname "$0")/.."

san=false tsan=false install=true deps_only=false extra=
for a in "$@"; do
        case "$a" in
        --sanitizers) san=true ;;
        --tsan) tsan=true ;;
        --no-install) install=false ;;
        --deps-only) deps_only=true ;;
        -*) echo "usage: scripts/build.sh [--sanitizers | --tsan] [--no-install] | --deps-only [PACKAGE...]" >&2; exit 2 ;;
        *) if $deps_only; then extra="$extra $a"; else
                   echo "usage: scripts/build.sh [--sanitizers | --tsan] [--no-install] | --deps-only [PACKAGE...]" >&2; exit 2
           fi ;;
        esac
done

lock_wait_s=${LOCK_WAIT_S:-300}
# apt_get ARGS...: apt-get, waiting up to lock_wait_s for the dpkg lock
# (DPkg::Lock::Timeout) and, for update, for the package lists' lock.
apt_get() {
        local deadline=$((SECONDS + lock_wait_s)) out rc
        while :; do
                rc=0
                out=$(apt-get -o DPkg::Lock::Timeout="$lock_wait_s" "$@" 2>&1) || rc=$?
                if [ $rc -ne 0 ] && grep -q -e 'Could not get lock' -e 'Unable to lock' <<<"$out" &&
                        [ $SECONDS -lt $deadline ]; then
                        echo "build.sh: apt is busy (another apt or dpkg holds its lock), waiting" >&2
                        sleep "${LOCK_POLL_S:-5}"
                        continue
                fi
                [ -z "$out" ] || echo "$out"
                return $rc
        done
}

pkgs="build-essential autoconf automake libtool pkg-config libsystemd-dev libinih-dev libnuma-dev libjson-c-dev liburing-dev libxxhash-dev libzstd-dev liblz4-dev jq valgrind$extra"
# Installed means dpkg says "install ok installed"; dpkg-query prints
# nothing for packages it has never heard of, and exits 1 for them.
missing=
for p in $pkgs; do
        [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)" = "ii " ] || missing="$missing $p"
done
missing=$(echo $missing | tr ' ' '\n' | sort -u | tr '\n' ' ')
if [ -n "${missing// /}" ]; then
        if ! $install; then echo "missing packages: $missing" >&2; exit 1; fi
        if [ "$(id -u)" -ne 0 ]; then echo "missing packages: $missing (run as root to install them)" >&2; exit 1; fi
        export DEBIAN_FRONTEND=noninteractive
        echo "build.sh: installing $missing" >&2
        apt_get update -qq
        apt_get install -y -qq --no-install-recommends --no-upgrade $missing
fi
$deps_only && exit 0

[ -x configure ] && [ configure -nt configure.ac ] && [ configure -nt Makefile.am ] || autoreconf -fi
if $san; then dir=build-san; flags="--enable-sanitizers"; else dir=build; flags=""; fi
if $tsan; then dir=build-tsan; flags="--enable-tsan"; fi
mkdir -p "$dir"
cd "$dir"
[ -f Makefile ] || ../configure --enable-werror $flags
make -j"$(nproc)"
make -j"$(nproc)" check TESTS= >/dev/null # the fakes and test programs, nothing run yet
