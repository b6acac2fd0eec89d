#!/bin/bash
# The README's demo: a private kvtierd with a 64 MiB VRAM budget, a demo
# engine under LD_PRELOAD=libkvtier.so that allocates a KV pool four times the
# budget and reads it in a sliding window, then kvtierctl status.  Uses the
# real GPU engine when KVT_ENGINE names one (tests/gpu), the fake CUDA
# otherwise.  --verbose prints the daemon's view for a person to read, and
# ends with a plain summary of what the run measured: budget, peak VRAM,
# bytes moved, data intact.
. "$(dirname "$0")/lib.sh"

verbose=false
[ "${1:-}" = --verbose ] && verbose=true

# human BYTES: "64.0 MiB".
human() {
        awk -v b="$1" 'BEGIN { split("bytes KiB MiB GiB TiB", u); i = 1
                while (b >= 1024 && i < 5) { b /= 1024; i++ }
                printf(i == 1 ? "%d %s" : "%.1f %s", b, u[i]) }'
}

# summary STATUS-JSON ENGINE-OUTPUT ENGINE-STATUS: the run in plain words,
# every figure from what this run measured (the daemon's final status, the
# engine's own report and exit status); "unknown" where a source is silent.
summary() {
        local st="$1" out="$2" erc="$3" budget peak_gpu peak_books pool regions bad to_vram to_host orders who
        budget=$(jq '[.gpus[] | select(.device == 0) | .budget_bytes] | max // empty' "$st")
        peak_books=$(jq '[.gpus[] | select(.device == 0) | .peak_charged_bytes] | max // empty' "$st")
        to_vram=$(jq '.migrations.bytes_to_vram // empty' "$st")
        to_host=$(jq '.migrations.bytes_to_host // empty' "$st")
        orders=$(jq '.migrations.orders_done // empty' "$st")
        peak_gpu=$(sed -n 's/^kv-engine: peak managed VRAM \([0-9]*\) bytes.*/\1/p' "$out" | head -n 1)
        pool=$(sed -n 's/^kv-engine: pool \([0-9]*\) bytes in [0-9]* regions.*/\1/p' "$out" | head -n 1)
        regions=$(sed -n 's/^kv-engine: pool [0-9]* bytes in \([0-9]*\) regions.*/\1/p' "$out" | head -n 1)
        bad=$(sed -n 's/^kv-engine: pool .*, mismatched words \([0-9]*\)$/\1/p' "$out" | head -n 1)
        if [ -n "${KVT_ENGINE:-}" ]; then who="the GPU's own count"; else who="the fake CUDA's count: no GPU here"; fi
        echo
        echo "Summary of this run (measured, not configured):"
        if [ -n "$budget" ]; then
                echo "  VRAM budget:  $(human "$budget") on GPU 0 for the engine's captured memory"
        else
                echo "  VRAM budget:  unknown (kvtierd reported no GPU 0)"
        fi
        if [ -n "$pool" ] && [ -n "$budget" ] && [ "$budget" -gt 0 ]; then
                echo "  KV cache:     $(human "$pool") in $regions regions, $(awk -v p="$pool" -v b="$budget" 'BEGIN { printf "%.1f", p / b }') times the budget"
        fi
        if [ -n "$peak_gpu" ]; then
                echo "  Peak VRAM:    $(human "$peak_gpu") of captured memory in VRAM at most ($who)"
        else
                echo "  Peak VRAM:    unknown (the engine did not report it)"
        fi
        [ -n "$peak_books" ] && echo "                $(human "$peak_books") at most charged to the budget by kvtierd's books"
        if [ -n "$to_vram" ] && [ -n "$to_host" ]; then
                echo "  Bytes moved:  $(human "$to_vram") to VRAM, $(human "$to_host") to host memory, in $orders completed orders"
        else
                echo "  Bytes moved:  unknown (kvtierd reported no migrations)"
        fi
        if [ "$erc" -eq 0 ] && [ "$bad" = 0 ]; then
                echo "  Data intact:  yes (every word of the $(human "$pool") checked after the run: none differs)"
        elif [ -n "$bad" ] && [ "$bad" != 0 ]; then
                echo "  Data intact:  NO ($bad words differ from what the engine wrote)"
        else
                echo "  Data intact:  unknown (the engine exited $erc without its check)"
        fi
}

write_config 64M
check "kvtierd starts with a 64 MiB VRAM budget" start_daemon
run_engine demo --regions 4 --region-size 64M --window 32M --steps 24 --step-ms 25 --hint &
engine=$!
# The snapshot once the whole pool is registered and some of it is in VRAM.
for _ in $(seq 60); do
        [ "$(status_json 2>/dev/null | jq '[.clients[].regions[]] | length')" = 4 ] &&
                [ "$(status_json 2>/dev/null | jq '[.gpus[].vram_bytes] | add // 0')" -gt 0 ] && break
        sleep 0.05
done
mid=$("$KVTIERCTL" -s "$SOCK" status 2>&1)
wait $engine; engine_rc=$?
check "demo engine (256 MiB of KV) exits 0" [ $engine_rc -eq 0 ]
check "kvtierctl showed the engine while it ran" grep -q kv-engine <<<"$mid"
check "the snapshot shows all four regions" [ "$(grep -c 'cudaMalloc' <<<"$mid")" -eq 4 ]
final=$("$KVTIERCTL" -s "$SOCK" status 2>&1); rc=$?
shows_migrations() { [ $rc -eq 0 ] && grep -q "^Migrations: [1-9]" <<<"$final"; }
check "kvtierctl status after the run shows migrations" shows_migrations
status_json >"$TMP/final.json"

# The summary says what this run measured, and says it when data was lost.
summary "$TMP/final.json" "$TMP/demo.out" "$engine_rc" >"$TMP/summary.txt"
check "the summary gives the budget kvtierd reported" \
        grep -qx "  VRAM budget:  $(human "$(jq '.gpus[0].budget_bytes' "$TMP/final.json")") on GPU 0 .*" "$TMP/summary.txt"
check "the summary gives the bytes kvtierd moved" \
        grep -q "^  Bytes moved:  $(human "$(jq .migrations.bytes_to_vram "$TMP/final.json")") to VRAM, $(human "$(jq .migrations.bytes_to_host "$TMP/final.json")") to host memory, in $(jq .migrations.orders_done "$TMP/final.json") completed orders$" "$TMP/summary.txt"
check "the summary gives the engine's peak VRAM" \
        grep -q "^  Peak VRAM:    $(human "$(sed -n 's/^kv-engine: peak managed VRAM \([0-9]*\) bytes.*/\1/p' "$TMP/demo.out")") " "$TMP/summary.txt"
check "the summary says the data is intact" grep -q "^  Data intact:  yes" "$TMP/summary.txt"
sed 's/mismatched words 0$/mismatched words 7/' "$TMP/demo.out" >"$TMP/lost.out"
check "a run that lost words is summed up as NO" \
        grep -q "^  Data intact:  NO (7 words differ" <(summary "$TMP/final.json" "$TMP/lost.out" 3)
grep -v "mismatched words" "$TMP/demo.out" >"$TMP/silent.out"
check "an engine that did not check is summed up as unknown" \
        grep -q "^  Data intact:  unknown" <(summary "$TMP/final.json" "$TMP/silent.out" 134)
if $verbose; then
        echo "# ---- kvtierctl status, while the engine ran:"
        diag "$mid"
        echo "# ---- the engine said:"
        diag "$(cat "$TMP/demo.out")"
        echo "# ---- kvtierctl status, after it exited:"
        diag "$final"
fi
check "kvtierd stops cleanly" stop_daemon
done_testing; rc=$?
$verbose && cat "$TMP/summary.txt"
exit $rc
