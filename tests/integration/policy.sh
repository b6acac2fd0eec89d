#!/bin/bash
# Policies in the daemon: selected in kvtierd.conf, shown in the status,
# switched live with `kvtierctl set` (root only, bad values change nothing),
# and a live budget cut evicts down to the new budget while an engine runs.
. "$(dirname "$0")/lib.sh"

jqs() { status_json | jq -r "$1"; }
gpu0() { jqs "[.gpus[] | select(.device == 0) | .$1] | max // 0"; }

write_config 64M "[policy]" "name = heat" "hysteresis_ticks = 6"
check "kvtierd starts with policy heat" start_daemon
check "status shows policy heat" [ "$(jqs .policy)" = heat ]
check "status shows its hysteresis_ticks" [ "$(jqs .policy_params.hysteresis_ticks)" = 6 ]

"$KVTIERCTL" -s "$SOCK" set policy lru >"$TMP/set.out" 2>&1; rc=$?
check "set policy lru exits 0" [ $rc -eq 0 ]
check "status shows policy lru" [ "$(jqs .policy)" = lru ]
check "lru has no window" [ "$(jqs .policy_params.window_bytes)" = 0 ]

# kvtierctl config: the table in effect, each section once, the file's values and the live ones.
cfg() { "$KVTIERCTL" -s "$SOCK" config --json | jq -r ".config[] | select(.section == \"$1\" and .key == \"$2\") | .value"; }
"$KVTIERCTL" -s "$SOCK" config >"$TMP/config.txt"; rc=$?
check "config exits 0" [ $rc -eq 0 ]
check "config prints each section once" rc_and $rc [ "$(grep '^\[' "$TMP/config.txt" | sort | uniq -d | wc -l)" -eq 0 ]
check "config shows [daemon] tick_ms from the file, and its default" grep -qE '^tick_ms = 20 +# default 10$' "$TMP/config.txt"
check "config --json: [policy] hysteresis_ticks = 6" [ "$(cfg policy hysteresis_ticks)" = 6 ]
check "config --json: [gpu] vram_budget = 64M" [ "$(cfg gpu vram_budget)" = 64M ]
check "config --json: every entry has help" [ "$("$KVTIERCTL" -s "$SOCK" config --json | jq '[.config[] | select(.help == "")] | length')" = 0 ]
check "config --json: the live policy is lru" [ "$(cfg policy name)" = lru ]

# A refused set says why, from the daemon: the reason comes in the reply.
"$KVTIERCTL" -s "$SOCK" set policy magic >"$TMP/set.out" 2>&1; rc=$?
bad_value() { [ $rc -eq 1 ] && grep -qx "kvtierctl: set policy=magic: invalid \[policy\] name = magic: expected one of demand, lru, heat, window, hybrid" "$TMP/set.out"; }
check "set policy magic exits 1 with the daemon's reason" bad_value
[ $rc -eq 1 ] || diag "$(cat "$TMP/set.out")"
check "a bad policy leaves the old one" [ "$(jqs .policy)" = lru ]
check "the daemon's log says why" grep -q "kvtierctl set \"policy=magic\" from pid [0-9]* (uid 0) refused: invalid \[policy\] name = magic" "$TMP/kvtierd.log"
"$KVTIERCTL" -s "$SOCK" set policy.window 17T >"$TMP/set.out" 2>&1; rc=$?
check "set policy.window 17T exits 1 naming the range" \
        rc_and $((rc != 1)) grep -qx "kvtierctl: set policy.window=17T: \[policy\] window = 17T is out of range 0..16T" "$TMP/set.out"
"$KVTIERCTL" -s "$SOCK" set policy.windwo 1G >"$TMP/set.out" 2>&1; rc=$?
check "a misspelt policy key exits 1 with a suggestion" \
        rc_and $((rc != 1)) grep -q "unknown key \[policy\] windwo (did you mean window?)" "$TMP/set.out"

"$KVTIERCTL" -s "$SOCK" set frobnicate 1 >"$TMP/set.out" 2>&1; rc=$?
unknown() { [ $rc -eq 1 ] && grep -q "unknown key frobnicate (keys: policy, policy.KEY, vram_budget\[.GPU\], host_budget.NODE)" "$TMP/set.out"; }
check "an unknown key exits 1, listing the keys" unknown
"$KVTIERCTL" -s "$SOCK" set policy >/dev/null 2>&1; rc=$?
check "set without a value is a usage error" [ $rc -eq 2 ]

"$KVTIERCTL" -s "$SOCK" set policy hybrid && "$KVTIERCTL" -s "$SOCK" set policy.window 64M
check "set policy.window reaches the hybrid policy" [ "$(jqs .policy_params.window_bytes)" = $((64 << 20)) ]
"$KVTIERCTL" -s "$SOCK" set policy.prefetch sometimes >/dev/null 2>&1; rc=$?
check "a bad policy.prefetch exits 1" [ $rc -eq 1 ]
check "prefetch unchanged" [ "$(jqs .policy_params.prefetch_depth)" = 4 ]

"$KVTIERCTL" -s "$SOCK" set vram_budget 0 32M; rc=$?
check "set vram_budget 0 32M exits 0" [ $rc -eq 0 ]
check "GPU 0 budget is 32M" [ "$(gpu0 budget_bytes)" = $((32 << 20)) ]
check "overlap is 0 by default" [ "$(gpu0 overlap_bytes)" = 0 ]
"$KVTIERCTL" -s "$SOCK" set policy.overlap 16M
check "set policy.overlap reaches GPU 0" [ "$(gpu0 overlap_bytes)" = $((16 << 20)) ]
"$KVTIERCTL" -s "$SOCK" set policy.overlap lots >/dev/null 2>&1; rc=$?
check "a bad policy.overlap exits 1, overlap unchanged" \
        rc_and $((rc != 1)) [ "$(gpu0 overlap_bytes)" = $((16 << 20)) ]
"$KVTIERCTL" -s "$SOCK" set policy.overlap 25%
check "overlap 25% of GPU 0's 32M budget is 8M" [ "$(gpu0 overlap_bytes)" = $((8 << 20)) ]
"$KVTIERCTL" -s "$SOCK" set policy.overlap 0
"$KVTIERCTL" -s "$SOCK" set vram_budget 64 1G >"$TMP/set.out" 2>&1; rc=$?
check "a GPU out of range exits 1, saying so" rc_and $((rc != 1)) grep -q "GPU index must be 0..63" "$TMP/set.out"

# Only root may change things: a peer with another uid is refused.
chmod 755 "$TMP" && chmod 666 "$SOCK"
if setpriv --reuid=65534 --regid=65534 --clear-groups "$KVTIERCTL" -s "$SOCK" status >/dev/null 2>&1; then
        setpriv --reuid=65534 --regid=65534 --clear-groups "$KVTIERCTL" -s "$SOCK" set policy window \
                >"$TMP/set.out" 2>&1; rc=$?
        denied() { [ $rc -eq 1 ] && grep -q "permission denied: uid 65534 is not root" "$TMP/set.out"; }
        check "a non-root set is refused, with the daemon's reason" denied
        check "policy unchanged after the refusal" [ "$(jqs .policy)" = hybrid ]
        setpriv --reuid=65534 --regid=65534 --clear-groups "$KVTIERCTL" -s "$SOCK" config >"$TMP/config.out" 2>&1; rc=$?
        check "config is read-only, open to a non-root peer as status is" rc_and $rc grep -q '^name = hybrid' "$TMP/config.out"
else
        ok "# SKIP a non-root set is refused (cannot run kvtierctl as nobody here)"
        ok "# SKIP policy unchanged after the refusal"
        ok "# SKIP config open to a non-root peer"
fi

# Under load: start at 64M with heat fed by the engine's hints, switch the
# policy and cut the budget to 32M while the engine runs.
"$KVTIERCTL" -s "$SOCK" set vram_budget 0 64M
"$KVTIERCTL" -s "$SOCK" set policy heat
run_engine live --regions 4 --region-size 64M --window 32M --steps 60 --step-ms 15 --hint &
engine=$!
for _ in $(seq 100); do [ "$(gpu0 charged_bytes)" -gt $((32 << 20)) ] && break; sleep 0.02; done
charged_before=$(gpu0 charged_bytes)
"$KVTIERCTL" -s "$SOCK" set policy window && "$KVTIERCTL" -s "$SOCK" set vram_budget 0 32M
switched=$(jqs .policy)
for _ in $(seq 200); do [ "$(gpu0 charged_bytes)" -le $((32 << 20)) ] && break; sleep 0.02; done
charged_after=$(gpu0 charged_bytes)
wait $engine; rc=$?
check "engine exits 0 across the live switch" [ $rc -eq 0 ]
check "pattern intact" grep -q "mismatched words 0" "$TMP/live.out"
check "policy switched while the engine ran" [ "$switched" = window ]
check_gt "charged above 32M before the cut" "$charged_before" $((32 << 20))
check_le "charged down to the new budget after the cut" "$charged_after" $((32 << 20))
check_gt "orders completed" "$(jqs .migrations.orders_done)" 0
check "kvtierd stops cleanly" stop_daemon

# A [client.NAME] quota caps the engine's VRAM below the GPU budget (the section matches its uid).
write_config 128M "[client.kv-engine]" "uid = $(id -u)" "quota = 32M" "priority = 2"
check "kvtierd starts with a client quota" start_daemon
run_engine quota --regions 4 --region-size 64M --window 64M --steps 40 --step-ms 15 --hint &
engine=$!
max_charged=0
while kill -0 $engine 2>/dev/null; do
        c=$(gpu0 charged_bytes 2>/dev/null || echo 0)
        [ "$c" -gt "$max_charged" ] && max_charged=$c
        sleep 0.02
done
wait $engine; rc=$?
check "engine exits 0 under a quota" [ $rc -eq 0 ]
check_gt "the engine got VRAM" "$max_charged" 0
check_le "charged never above the client's quota" "$max_charged" $((32 << 20))
check "kvtierd stops cleanly" stop_daemon
done_testing
