#!/bin/bash
# tests/bench/residency-report.py, the suite's reader of where a paged run
# kept its KV: on a live daemon's status it counts each pool's chunks in
# VRAM as the daemon's own per-region figures do, and on a hand-made log it
# sorts the orders' chunks and the snapshots into the engine's phases, the
# orders' chunks into hot, cold and other, each run's lines apart.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || { echo "1..0 # SKIP python3 not installed"; exit 0; }
REPORT="python3 $top_srcdir/tests/bench/residency-report.py"
D=$TMP/logs
mkdir -p "$D"

# A live run: four 64 MiB pools (32 chunks each) under a 64 MiB budget; the
# status saved while the engine runs, as the suite saves it.
KVT_DAEMON_LOG=debug write_config 64M
check "kvtierd starts" start_daemon
run_engine engine --regions 4 --region-size 64M --window 32M --steps 40 --step-ms 15 &
engine=$!
n=0
while kill -0 $engine 2>/dev/null; do
        status_json >"$D/status-live.$n.json" 2>/dev/null && n=$((n + 1))
        sleep 0.1
done
wait $engine
check "engine exits 0" [ $? -eq 0 ]
check_gt "status saved while the engine ran" $n 2
check "kvtierd exits 0" stop_daemon
cp "$TMP/kvtierd.log" "$D/kvtierd.log"

# Sessions of 4 chunks, 8 a pool, every second one hot: the report's hot and
# cold chunks in VRAM of the last snapshot with all four pools add up to the
# daemon's VRAM bytes of the 64 MiB regions.
idx=-1
for ((i = 0; i < n; i++)); do
        [ "$(jq '[.clients[].regions[]] | length' "$D/status-live.$i.json" 2>/dev/null)" = 4 ] && idx=$i
done
check "a snapshot shows the four pools" [ "$idx" -ge 0 ]
last=$D/status-live.$idx.json
out=$($REPORT --sessions 8 --hot 4 --session-chunks 4 --pool-bytes $((64 << 20)) "$D" live 2>&1)
check "the report reads the live run" [ $? -eq 0 ]
row=$(awk -v n="$idx" '$1 == n' <<<"$out")
hv=$(awk '{print $2}' <<<"$row") cv=$(awk '{print $6}' <<<"$row")
want=$(jq '[.clients[].regions[] | select(.size_bytes == 67108864) | .vram_bytes] | add / 2097152' "$last")
check "snapshot $idx: hot + cold chunks in VRAM ($hv + $cv) are the daemon's ($want)" [ "$((hv + cv))" -eq "$want" ]
check "snapshot $idx: 64 hot chunks in the pools" grep -q " / 64 " <<<"$row"
[ "$((hv + cv))" -eq "$want" ] || diag "$out"
check "the live run's orders are counted" grep -q "whole run" <<<"$out"

# A hand-made run: the engine's phase marks and daemon lines with the wall
# clock.  Region 1 is a pool (sessions 0 and 2 of 4 hot, 4 chunks each),
# region 2 is not.
cat >"$D/status-made.0.json" <<'EOF'
{"uptime_ms": 2500, "gpus": [{"demand": {"held_bytes": 4194304}}],
 "clients": [{"regions": [
   {"region_id": 1, "size_bytes": 33554432, "chunk_map": "V2 R2 V4 M4 V4"},
   {"region_id": 2, "size_bytes": 4194304, "chunk_map": "V1 h1"},
   {"region_id": 3, "size_bytes": 33554432, "chunk_map": "V16", "chunk_map_truncated": true}]}]}
EOF
cat >"$D/runs.log" <<'EOF'
== other
paged_kv: warm-up starts at 5.000
== made
paged_kv: pools filled at 10.000
paged_kv: warm-up starts at 11.000
paged_kv: measured turns start at 12.000
paged_kv: measured turns end at 13.000
EOF
cat >"$D/kvtierd.log" <<'EOF'
== other
1.000 kvtierd: Listening on /run/x.sock: policy demand, tick 10 ms.
1.500 kvtierd: Order 9: region 1 chunks 0+16 to vram.
== made
9.000 kvtierd: Listening on /run/x.sock: policy demand, tick 10 ms.
9.500 kvtierd: Order 1: region 1 chunks 0+8 to vram.
11.500 kvtierd: Order 2: region 1 chunks 2+4 probed.
12.100 kvtierd: Order 3: region 1 chunks 4+8 to host-mapped.
12.200 kvtierd: Order 4: region 2 chunks 0+2 to vram.
12.300 kvtierd: Order 4 done: status 0, 1.000 ms in the shim.
13.500 kvtierd: Order 5: region 1 chunks 15+1 re-armed.
EOF
out=$($REPORT --sessions 4 --hot 2 --session-chunks 4 --pool-bytes $((32 << 20)) "$D" made 2>&1)
check "the report reads the hand-made run" [ $? -eq 0 ]
diag "$out"
row() { grep -E "^$1 +$2 " <<<"$out" | awk '{print $(NF-2), $(NF-1), $NF}'; }
check "snapshot: hot 2 of 8 in VRAM, 2 read in place, cold 8 in VRAM, other 1, held 4 MiB" \
        grep -Eq "^ +0 +2 / 8 +2 +8 +1 +4 MiB" <<<"$out"
check "snapshot: 2.5 s after the daemon's start is in the warm-up" grep -Eq "^ +0 .* MiB +warm-up$" <<<"$out"
check "a map cut short is left out, and said" grep -q "1 maps missing or cut short" <<<"$out"
check "before the fill: 4 hot, 4 cold promoted (not the other run's 16)" [ "$(row "to vram" "before fill")" = "4 4 0" ]
check "warm-up: a probe of 2 hot, 2 cold" [ "$(row probed warm-up)" = "2 2 0" ]
check "measured: 4 hot, 4 cold evicted mapped" [ "$(row "to host-mapped" measured)" = "4 4 0" ]
check "measured: 2 chunks of another region promoted" [ "$(row "to vram" measured)" = "0 0 2" ]
check "after: a cold chunk re-armed" [ "$(row re-armed after)" = "0 1 0" ]
check "a bad hot set is refused" bash -c "! $REPORT --hot 0 '$D' made 2>/dev/null"

# A hand-made pair, twice in one suite: two clients whose region ids are the
# same (each client numbers its own), hi's and lo's phase marks in one log,
# the second run's polls and lines apart from the first's.
P=$TMP/pair
mkdir -p "$P"
pair_status() { # FILE UPTIME_MS HI_MAP LO_MAP
        cat >"$1" <<EOF2
{"uptime_ms": $2, "gpus": [{"demand": {"held_bytes": 0}}],
 "clients": [{"pid": 101, "section": "hi", "regions": [{"region_id": 1, "size_bytes": 33554432, "chunk_map": "$3"}]},
             {"pid": 202, "section": "lo", "regions": [{"region_id": 1, "size_bytes": 33554432, "chunk_map": "$4"}]}]}
EOF2
}
pair_status "$P/status-pair.0.json" 2500 "V4 R8 V4" "H16"
pair_status "$P/status-pair.r2.0.json" 2500 "V8 H8" "V16"
pair_status "$P/status-pair.r2.1.json" 3500 "V8 H8" "V16"
cat >"$P/runs.log" <<'EOF2'
== pair
paged_kv: warm-up starts at 11.000 pid 101
paged_kv: measured turns start at 12.000 pid 202
== pair
paged_kv: measured turns start at 30.000 pid 101
EOF2
cat >"$P/kvtierd.log" <<'EOF2'
== pair
10.000 kvtierd: Listening on /run/x.sock: policy demand, tick 10 ms.
== pair
28.000 kvtierd: Listening on /run/x.sock: policy demand, tick 10 ms.
EOF2
out=$($REPORT --sessions 4 --hot 2 --session-chunks 4 --pool-bytes $((32 << 20)) --client hi "$P" pair 2>&1)
check "--client hi reads the pair" [ $? -eq 0 ]
diag "$out"
check "--client hi: hi's chunks only (hot 4 of 8 in VRAM, 4 read in place, cold 4 in VRAM)" \
        grep -Eq "^ +0 +4 / 8 +4 +4 +0 " <<<"$out"
check "--client hi: placed by hi's marks (its warm-up), not lo's (measured)" grep -Eq "^ +0 .* MiB +warm-up$" <<<"$out"
check "--client: the orders, which name no client, are not counted, and said" grep -q "orders are not counted" <<<"$out"
check "pair: its own polls only, not its repeat's" [ "$(grep -Ec '^ +[0-9]+ ' <<<"$out")" = 1 ]
out=$($REPORT --sessions 4 --hot 2 --session-chunks 4 --pool-bytes $((32 << 20)) --client lo "$P" pair.r2 2>&1)
check "pair.r2: the repeat's two polls" [ "$(grep -Ec '^ +[0-9]+ ' <<<"$out")" = 2 ]
check "pair.r2 --client lo: lo's chunks (16 in VRAM: 8 hot, 8 cold)" grep -Eq "^ +0 +8 / 8 +0 +8 +0 " <<<"$out"
check "pair.r2 --client lo: no mark of lo's there, and said" grep -q "no phase marks of pid 202" <<<"$out"
out=$($REPORT --sessions 4 --hot 2 --session-chunks 4 --pool-bytes $((32 << 20)) --client hi "$P" pair.r2 2>&1)
check "pair.r2 --client hi: placed by the second run's lines (measured)" grep -Eq "^ +1 .* MiB +measured$" <<<"$out"
check "pair.r2 --client hi: no hot chunk unmapped in 8 polls in a row" \
        grep -q "in 8 polls or more in a row: 0$" <<<"$out"
out=$($REPORT --sessions 4 --hot 2 --session-chunks 4 --pool-bytes $((32 << 20)) --client hi --unseen-polls 2 \
        "$P" pair.r2 2>&1)
check "pair.r2 --client hi: its 4 hot chunks unmapped in both polls, in region 1" \
        grep -q "in 2 polls or more in a row: 4 (the longest 2 polls), in regions 1$" <<<"$out"
check "an unknown client is refused" bash -c "! $REPORT --client nobody '$P' pair 2>/dev/null"
done_testing
