#!/bin/bash
# scripts/build.sh's package step, against a fake dpkg-query, apt-get and id
# on PATH: it asks only for what is not installed, with --no-upgrade and
# without recommends, waits while another apt holds the lock (bounded by
# LOCK_WAIT_S), and gives up once that time has passed.
. "$(dirname "$0")/lib.sh"

fake="$TMP/bin"
mkdir -p "$fake"
# Installed: every package but jq and valgrind.
cat >"$fake/dpkg-query" <<'FAKE'
#!/bin/bash
case "${!#}" in jq|valgrind|extra-pkg) exit 1 ;; esac
printf 'ii '
FAKE
# apt-get: busy (the lock message) for the first $BUSY calls.
cat >"$fake/apt-get" <<'FAKE'
#!/bin/bash
n=$(cat "$CALLS" 2>/dev/null || echo 0); echo $((n + 1)) >"$CALLS"
echo "$*" >>"$ARGS"
if [ "$n" -lt "$BUSY" ]; then
        echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2; exit 100
fi
FAKE
printf '#!/bin/sh\necho 0\n' >"$fake/id"
chmod +x "$fake"/*
run_build() {
        env PATH="$fake:$PATH" CALLS="$TMP/calls" ARGS="$TMP/args" LOCK_POLL_S=0.1 "$@" \
                "$top_srcdir/scripts/build.sh" --deps-only extra-pkg >"$TMP/out.txt" 2>&1
}

rm -f "$TMP/calls" "$TMP/args"
run_build BUSY=3 LOCK_WAIT_S=30; rc=$?
check "with the lock free after 3 tries, build.sh --deps-only exits 0" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "$(cat "$TMP/out.txt")"
check "it said it was waiting" grep -q 'waiting' "$TMP/out.txt"
install=$(grep '^-o DPkg::Lock::Timeout=30 install' "$TMP/args" | tail -n1)
check "apt-get install waits for the dpkg lock itself (DPkg::Lock::Timeout)" [ -n "$install" ]
check "it installs only the missing packages" [ "$(echo "$install" | grep -o ' extra-pkg jq valgrind$')" = " extra-pkg jq valgrind" ]
check "with --no-upgrade and --no-install-recommends" \
        bash -c "grep -q -- '--no-upgrade' <<<'$install' && grep -q -- '--no-install-recommends' <<<'$install'"

rm -f "$TMP/calls" "$TMP/args"
start=$SECONDS
run_build BUSY=1000 LOCK_WAIT_S=1; rc=$?
check "with the lock held for good it fails" [ $rc -ne 0 ]
check_le "and gives up after LOCK_WAIT_S (1 s), within 5 s" "$((SECONDS - start))" 5

# Nothing missing: no apt-get at all.
printf '#!/bin/sh\nprintf "ii "\n' >"$fake/dpkg-query"
rm -f "$TMP/calls" "$TMP/args"
run_build BUSY=0 LOCK_WAIT_S=1; rc=$?
check "with everything installed it exits 0 without running apt-get" rc_and "$rc" [ ! -e "$TMP/args" ]
done_testing
