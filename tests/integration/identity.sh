#!/bin/bash
# Issue 18, row 10 and control by group: [client.NAME] sections match the
# kernel's identity of a peer (uid, gid), never the name it sends; settings
# may be changed by root or the [daemon] admin_group, nobody else.  The
# attacker is uid 65534 (nobody), which needs root to become.
. "$(dirname "$0")/lib.sh"
HOSTILE="${KVT_HOSTILE:-$top_builddir/tests/integration/hostile}"

if [ "$(id -u)" -ne 0 ]; then echo "1..0 # SKIP needs root to act as another user"; exit 0; fi
NOGROUP=$(getent group 65534 | cut -d: -f1)
[ -n "$NOGROUP" ] || { echo "1..0 # SKIP no group 65534"; exit 0; }

# start_open: the daemon, its socket reachable by anyone (the attacker is another user).
start_open() { start_daemon && chmod 0755 "$TMP" && chmod 0666 "$SOCK"; }

# hello_bg WHO NAME OUT: a shim-like HELLO named NAME as WHO (uid[:gid], or
# root), held for 1.5 s in the background; waits for its WELCOME in OUT.
hello_bg() {
        local as=()
        [ "$1" != root ] && as=(--as "$1")
        "$HOSTILE" "${as[@]}" --hold 1500 "$SOCK" hello "$2" >"$3" 2>&1 &
        HELLO_PID=$!
        for _ in $(seq 60); do grep -q welcome "$3" && return 0; sleep 0.05; done
        diag "no WELCOME: $(cat "$3")"; return 1
}
grant_of() { sed -n 's/.*vram_grant=\([0-9]*\).*/\1/p' "$1"; }
section_of_uid() { status_json | jq -r --argjson u "$1" '[.clients[] | select(.uid == $u) | .section][0]'; }

# Row 10: uid 65534 says it is "vllm"; [client.vllm] is root's, with a 2M quota.
write_config 64M "[client.vllm]" "uid = 0" "quota = 2M" "priority = 5" "[client.named]" "priority = 7"
check "kvtierd starts" start_open
hello_bg 65534 vllm "$TMP/liar.out"
check_gt "row 10: the name vllm does not lend uid 65534 [client.vllm]'s 2M quota" "$(grant_of "$TMP/liar.out")" \
        $((2 << 20))
check "row 10: status shows uid 65534 in no section" [ "$(section_of_uid 65534)" = null ]
wait "$HELLO_PID"
hello_bg root anything "$TMP/root.out"
check "root, whatever its name, is [client.vllm]" [ "$(section_of_uid 0)" = vllm ]
check "root's grant is [client.vllm]'s quota" [ "$(grant_of "$TMP/root.out")" -eq $((2 << 20)) ]
wait "$HELLO_PID"
check "a section with a name only is reported as matching nothing" \
        grep -q "\[client.named\] has no uid, gid or unit: it matches no process" "$TMP/kvtierd.log"
check "kvtierd stops cleanly" stop_daemon

# gid: a section by group matches the primary group; settings: root or the admin group.
write_config 64M "[client.grp]" "gid = $NOGROUP" "[daemon]" "admin_group = kvtier-admin-not-here"
check "kvtierd starts with no such admin group" start_open
hello_bg 65534:65534 w "$TMP/grp.out"
check "gid $NOGROUP matches [client.grp]" [ "$(section_of_uid 65534)" = grp ]
wait "$HELLO_PID"
check "uid 65534 outside any admin group may not set the policy" \
        [ "$("$HOSTILE" --as 65534 "$SOCK" set policy=lru)" = "status -1" ]
check "root may" [ "$("$HOSTILE" "$SOCK" set policy=lru)" = "status 0" ]
check "the refusal is logged with the group" grep -q "uid 65534 is not root, not kvtierd's user and not in group kvtier-admin-not-here" \
        "$TMP/kvtierd.log"
check "kvtierd stops cleanly" stop_daemon

write_config 64M "[daemon]" "admin_group = $NOGROUP"
check "kvtierd starts with admin_group = $NOGROUP" start_open
check "a member of the admin group may set the policy" \
        [ "$("$HOSTILE" --as 65534:65534 "$SOCK" set policy=lru)" = "status 0" ]
check "the policy changed" [ "$(status_json | jq -r .policy)" = lru ]
check "the same uid in another group may not" [ "$("$HOSTILE" --as 65534:65533 "$SOCK" set policy=heat)" = "status -1" ]
check "kvtierctl set says who may" \
        sh -c "setpriv --reuid=65534 --regid=65533 --clear-groups '$KVTIERCTL' -s '$SOCK' set policy heat 2>&1 |
               grep -q 'permission denied: uid 65534 is not root, not kvtierd.s user and not in group $NOGROUP (\[daemon\] admin_group)'"
check "kvtierd stops cleanly" stop_daemon
done_testing
