#!/bin/bash
# A good client's control round trips while 1000 hostile connections are
# open (issue 18: p99 under 10 ms): a private kvtierd, 10 users (uids
# 70001..70010, each under max_connections_per_uid) holding 100 connections
# each, half never saying HELLO, half asking for status and never reading,
# and two more users flooding refused CTL_SETs throughout; root's status and
# CTL_SET round trips measured before and during; and a good engine (the
# test engine under the shim, fake CUDA, 4 x 64 MiB over a 64 MiB budget)
# runs through the attack (6000 steps: it must outlast both phases): its
# VRAM by the daemon's books, sampled alone and during, its data and its
# exit status.  The
# HELLO and send deadlines are lengthened so that all 1000 stay open while
# it measures (their defaults would close them within 5 and 30 s).  Root.
#   tests/bench/hostile-bench.sh BUILD_DIR [ROUND_TRIPS]
# (HOSTILE=PATH takes the attacker from another build, to measure an older kvtierd.)
set -eu
b=$(cd "$1" && pwd) n=${2:-2000}
h="${HOSTILE:-$b/tests/integration/hostile}"
[ "$(id -u)" -eq 0 ] || { echo "hostile-bench: needs root (the attackers are other users)" >&2; exit 77; }
T=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" "$dpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
printf '[daemon]\nsocket = %s/s\ntick_ms = 10\nlog_level = warning\nhello_timeout_ms = 120000\nsend_timeout_ms = 120000\n[gpu]\nvram_budget = 64M\n' \
        "$T" >"$T/c"
"$b/kvtierd" -c "$T/c" >"$T/log" 2>&1 &
dpid=$!
for _ in $(seq 100); do [ -S "$T/s" ] && break; sleep 0.05; done
chmod 0755 "$T"; chmod 0666 "$T/s"
open_conns() { "$b/kvtierctl" -s "$T/s" status --json | jq .connections.open; }

# The good engine, running through both phases; engine_vram: its VRAM now.
LD_LIBRARY_PATH="$b/tests/fakes/.libs" LD_PRELOAD="$b/.libs/libkvtier.so" KVTIER_SOCKET="$T/s" \
        "$b/tests/engine/kv-engine" --regions 4 --region-size 64M --window 32M --steps 6000 --step-ms 5 \
        --max-vram $((64 << 20)) >"$T/engine" 2>&1 &
epid=$!
engine_vram() { "$b/kvtierctl" -s "$T/s" status --json | jq "[.clients[] | select(.pid == $epid) | .vram_bytes] | add // 0"; }
vram_samples() { local v=() i; for i in $(seq 10); do v+=("$(engine_vram)"); sleep 0.1; done; echo "${v[*]}"; }
for _ in $(seq 200); do [ "$(engine_vram)" -gt 0 ] && break; sleep 0.05; done
base_vram=$(vram_samples)
base_status=$("$h" "$T/s" rtt "$n")
base_set=$("$h" "$T/s" rtt "$n" policy.hysteresis_ticks=2)
for u in $(seq 70001 70010); do
        mode=conns; [ $((u % 2)) -eq 0 ] && mode=noread
        "$h" --as "$u" --hold 600000 "$T/s" "$mode" 100 >"$T/h$u" 2>&1 &
        pids+=($!)
done
for _ in $(seq 600); do [ "$(cat "$T"/h* | grep -c "^opened\|^asked")" -eq 10 ] && break; sleep 0.05; done
for u in 70011 70012; do
        "$h" --as "$u" "$T/s" flood 100000000 policy=lru >/dev/null 2>&1 &
        pids+=($!)
done
sleep 0.5
during_open=$(open_conns)
att_status=$("$h" "$T/s" rtt "$n")
att_set=$("$h" "$T/s" rtt "$n" policy.hysteresis_ticks=2)
after_open=$(open_conns)
att_vram=$(vram_samples)
wait "$epid"; erc=$?
echo "no attack:        status $base_status"
echo "no attack:        set    $base_set"
echo "1000 hostile ($during_open..$after_open connections open: 500 idle, 500 not reading, 2 flooding):"
echo "                  status $att_status"
echo "                  set    $att_set"
echo "good engine's VRAM by the daemon's books (10 samples, MiB): alone $(for v in $base_vram; do printf '%d ' $((v >> 20)); done)"
echo "                  during the attack $(for v in $att_vram; do printf '%d ' $((v >> 20)); done)"
echo "good engine: exit status $erc, $(grep -o 'mismatched words [0-9]*' "$T/engine" | tail -1)"
