#!/bin/bash
# kvtierctl beyond status: Prometheus metrics agree with the status JSON and
# follow the text format (labels escaped), top refreshes, bad usage exits 2.
. "$(dirname "$0")/lib.sh"

write_config 64M
check "kvtierd starts" start_daemon

# An engine whose process name needs escaping in a label: a quote and a backslash.
odd="$TMP/kv\"x\\y"
ln -s "$ENGINE" "$odd"
ENGINE="$odd" run_engine engine --regions 2 --region-size 64M --window 32M --steps 400 --step-ms 10 &
engine=$!
for _ in $(seq 100); do
        [ "$(status_json | jq '[.clients[].regions[]] | length')" -ge 2 ] && break
        sleep 0.05
done
"$KVTIERCTL" -s "$SOCK" metrics >"$TMP/metrics.txt"; rc=$?
status_json >"$TMP/status.json"
check "metrics exits 0" [ $rc -eq 0 ]
check "every sample line is NAME{LABELS} VALUE" \
        bash -c "! grep -v '^#' '$TMP/metrics.txt' | grep -Ev '^[a-z_]+(\{([a-z_]+=\"([^\"\\\\]|\\\\.)*\",?)*\})? [0-9.e+-]+$'"
check "every metric has HELP and TYPE before its samples (a histogram's series by its name)" awk '
        /^# HELP / { help[$3] = 1; next }
        /^# TYPE / { type[$3] = $4; next }
        { n = $1; sub(/\{.*/, "", n); b = n; sub(/_(bucket|sum|count)$/, "", b); if (type[b] == "histogram") n = b
          if (!help[n] || !type[n]) { print "no HELP/TYPE: " n; bad = 1 } }
        END { exit bad }' "$TMP/metrics.txt"
metric() { awk -v k="$1" '$1 == k { print $2 }' "$TMP/metrics.txt"; }
check "budget matches the status JSON" \
        [ "$(metric 'kvtier_gpu_budget_bytes{gpu="0"}')" = "$(jq '.gpus[] | select(.device == 0) | .budget_bytes' "$TMP/status.json")" ]
check "one client counted" [ "$(metric kvtier_clients)" = 1 ]
pid=$(jq '.clients[0].pid' "$TMP/status.json")
check "client label carries the escaped process name" \
        grep -qF "kvtier_client_tier_bytes{client=\"$(jq '.clients[0].client_id' "$TMP/status.json")\",pid=\"$pid\",name=\"kv\\\"x\\\\y\",tier=\"host_mapped\"}" "$TMP/metrics.txt"
captured=$(grep '^kvtier_client_tier_bytes{' "$TMP/metrics.txt" | awk '{ s += $2 } END { print s }')
check "client bytes over all tiers add up to its regions" \
        [ "$captured" = "$(jq '[.clients[0].regions[].size_bytes] | add' "$TMP/status.json")" ]
check "orders counter present" grep -q '^kvtier_orders_total{result="sent"} [0-9]' "$TMP/metrics.txt"
# The chunk map ("V16 m4 M12 R3": runs of chunks by tier, R for host memory
# the GPU reads in place, lower case while an order is in flight) covers
# each region and agrees with its byte counts.
map_sum() { # REGION-INDEX LETTERS: bytes in the runs whose letter is one of LETTERS
        jq -r ".clients[0].regions[$1].chunk_map" "$TMP/status.json" |
                tr ' ' '\n' | awk -v l="$2" 'index(l, substr($0, 1, 1)) { s += substr($0, 2) } END { print s * 2097152 }'
}
for i in 0 1; do
        check "region $i: the chunk map covers the region" \
                [ "$(map_sum $i VvMmHhRr-_)" = "$(jq ".clients[0].regions[$i].size_bytes" "$TMP/status.json")" ]
        check "region $i: VRAM runs in the chunk map = vram_bytes" \
                [ "$(map_sum $i Vv)" = "$(jq ".clients[0].regions[$i].vram_bytes" "$TMP/status.json")" ]
        check "region $i: host-mapped runs = host_mapped_bytes" \
                [ "$(map_sum $i Mm)" = "$(jq ".clients[0].regions[$i].host_mapped_bytes" "$TMP/status.json")" ]
        check "region $i: host runs, read in place or not, = host_bytes" \
                [ "$(map_sum $i HhRr)" = "$(jq ".clients[0].regions[$i].host_bytes" "$TMP/status.json")" ]
done
# While the engine runs, its two regions (twice the budget) hold chunks in
# VRAM and chunks elsewhere: the map has more than one kind of run.
letters=
for _ in $(seq 100); do
        letters=$(status_json | jq -r '[.clients[0].regions[].chunk_map] | join(" ")' 2>/dev/null |
                grep -o '[-_A-Za-z][0-9]' | cut -c1 | tr a-z_ A-Z- | sort -u | tr -d '\n')
        [[ $letters == *V* ]] && [ ${#letters} -ge 2 ] && break
        sleep 0.05
done
check "the engine's regions hold VRAM and other chunks under a budget of half their size (map: $letters)" \
        bash -c "[[ '$letters' == *V* ]] && [ ${#letters} -ge 2 ]"

start=$(date +%s%N)
"$KVTIERCTL" -s "$SOCK" top -n 3 -d 0.2 >"$TMP/top.txt"; rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
check "top -n 3 exits 0" [ $rc -eq 0 ]
check "top drew the status three times" [ "$(grep -c '^kvtierd ' "$TMP/top.txt")" -eq 3 ]
check_gt "top waited between refreshes (ms)" $elapsed_ms 399
check "no terminal codes when not on a terminal" bash -c "! grep -q $'\e' '$TMP/top.txt'"
"$KVTIERCTL" -s "$SOCK" top -d 0 >/dev/null 2>&1; rc=$?
check "top -d 0 is a usage error" [ $rc -eq 2 ]
"$KVTIERCTL" -s "$SOCK" top -n x >/dev/null 2>&1; rc=$?
check "top -n x is a usage error" [ $rc -eq 2 ]
"$KVTIERCTL" -s "$SOCK" frobnicate >/dev/null 2>&1; rc=$?
check "unknown command is a usage error" [ $rc -eq 2 ]
wait $engine
check "engine exits 0" [ $? -eq 0 ]

# The status table draws each region's chunk map as a bar of 32 cells in
# address order ('#' all in VRAM, '+' some, '.' none).  An engine holds two
# 64 MiB regions under the 64M budget; once the daemon is done placing them,
# each bar must be what the chunk map in the JSON says.
rm -f "$TMP/go"
ENGINE="$top_builddir/tests/integration/api-engine" run_engine held --mode runtime --regions 2 --size 64M \
        --hold "$TMP/go" &
held=$!
same=0 last=
for _ in $(seq 200); do # settled: the same maps, nothing in flight, in 5 polls running
        status_json >"$TMP/held.json" 2>/dev/null
        now=$(jq -c '[.gpus[0].inflight_orders, [.clients[].regions[].chunk_map]]' "$TMP/held.json")
        if [ "$now" = "$last" ] && [ "$(jq '[.clients[].regions[]] | length' "$TMP/held.json")" = 2 ] &&
                [ "$(jq '.gpus[0].inflight_orders' "$TMP/held.json")" = 0 ]; then
                same=$((same + 1))
                [ $same -ge 5 ] && break
        else
                same=0
        fi
        last=$now
        sleep 0.05
done
"$KVTIERCTL" -s "$SOCK" status >"$TMP/held.txt"
status_json >"$TMP/held2.json"
check "the placement held still while the table was read" \
        [ "$(jq -c '[.clients[].regions[].chunk_map]' "$TMP/held.json")" = "$(jq -c '[.clients[].regions[].chunk_map]' "$TMP/held2.json")" ]
# expected_bar MAP CHUNKS: the bar kvtierctl should draw for a chunk map.
expected_bar() {
        echo "$1" | tr ' ' '\n' | awk -v n="$2" '
                { t = substr($0, 1, 1); len = substr($0, 2) + 0
                  for (i = at; i < at + len; i++) { c = int(i * 32 / n); all[c]++; if (t == "V" || t == "v") v[c]++ }
                  at += len }
                END { for (c = 0; c < 32; c++) printf "%s", !all[c] ? " " : v[c] == all[c] ? "#" : v[c] ? "+" : "."; print "" }'
}
bars=0
for i in 0 1; do
        base=$(jq -r ".clients[0].regions[$i].base" "$TMP/held.json")
        want=$(expected_bar "$(jq -r ".clients[0].regions[$i].chunk_map" "$TMP/held.json")" 32)
        got=$(awk -v b="$base" '$3 == b { print substr($0, length($0) - 31) }' "$TMP/held.txt")
        check "region $i: the table's bar ($got) is its chunk map ($want)" [ "$got" = "$want" ]
        [ "$got" = "$want" ] && bars=$((bars + 1))
done
check "the bars show what is in VRAM and what is not" \
        bash -c "grep -q '#' '$TMP/held.txt' && grep -Eq ' [.]{8}' '$TMP/held.txt'"
touch "$TMP/go"
wait $held
check "held engine exits 0" [ $? -eq 0 ]

"$KVTIERCTL" -s "$SOCK" top -d 0.1 >"$TMP/top2.txt" 2>&1 & top=$!
sleep 0.3
check "stopped" stop_daemon
for _ in $(seq 50); do kill -0 $top 2>/dev/null || break; sleep 0.05; done
wait $top; rc=$?
check "top ends with status 1 when the daemon goes away" [ $rc -eq 1 ]
"$KVTIERCTL" -s "$SOCK" metrics >"$TMP/metrics-down.txt" 2>/dev/null; rc=$?
check "metrics without a daemon exits 0 (a scrape that succeeds)" [ $rc -eq 0 ]
check "and says kvtier_up 0" grep -qx "kvtier_up 0" "$TMP/metrics-down.txt"
check "and nothing else but its help and type" [ "$(grep -vc '^#' "$TMP/metrics-down.txt")" -eq 1 ]
"$KVTIERCTL" -s "$SOCK" status >/dev/null 2>&1; rc=$?
check "status without a daemon exits 1" [ $rc -eq 1 ]
done_testing
