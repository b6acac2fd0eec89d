#!/bin/bash
# Malformed and hostile peers are dropped; the daemon keeps serving.
. "$(dirname "$0")/lib.sh"

# its heat table test registers 1 TiB: past the default quota of a small host
write_config 64M "[daemon]" "max_registered_per_uid = 2T"
check "kvtierd starts" start_daemon
# abuse prints its own TAP lines: renumber them into ours.
while IFS= read -r line; do
        case "$line" in
        "ok "*) ok "${line#ok * - }" ;;
        "not ok "*) not_ok "${line#not ok * - }" ;;
        "1.."*) ;;
        *) echo "$line" ;;
        esac
done < <("$top_builddir/tests/integration/abuse" "$SOCK")
check "daemon alive after the abuse" kill -0 "$DAEMON_PID"
check "the hostile heat table's slots were read and refused" grep -q "Heat table slot" "$TMP/kvtierd.log"
check "the fd sent with another message was reported" grep -q "sent a file descriptor with REGION_ADD" "$TMP/kvtierd.log"
check "kvtierd stops cleanly" stop_daemon
done_testing
