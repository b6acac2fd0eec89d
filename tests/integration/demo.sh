#!/bin/bash
# The README's demo: a private kvtierd with a 64 MiB VRAM budget, a demo
# engine under LD_PRELOAD=libkvtier.so that allocates a KV pool four times the
# budget and reads it in a sliding window, then kvtierctl status.  Uses the
# real GPU engine when KVT_ENGINE names one (tests/gpu), the fake CUDA
# otherwise.  --verbose prints the daemon's view for a person to read.
. "$(dirname "$0")/lib.sh"

verbose=false
[ "${1:-}" = --verbose ] && verbose=true

write_config 64M
check "kvtierd starts with a 64 MiB VRAM budget" start_daemon
run_engine demo --regions 4 --region-size 64M --window 32M --steps 24 --step-ms 25 --hint &
engine=$!
sleep 0.3
mid=$("$KVTIERCTL" -s "$SOCK" status 2>&1)
wait $engine; rc=$?
check "demo engine (256 MiB of KV) exits 0" [ $rc -eq 0 ]
check "kvtierctl showed the engine while it ran" grep -q kv-engine <<<"$mid"
final=$("$KVTIERCTL" -s "$SOCK" status 2>&1); rc=$?
shows_migrations() { [ $rc -eq 0 ] && grep -q "^Migrations: [1-9]" <<<"$final"; }
check "kvtierctl status after the run shows migrations" shows_migrations
if $verbose; then
        echo "# ---- kvtierctl status, while the engine ran:"
        diag "$mid"
        echo "# ---- the engine said:"
        diag "$(cat "$TMP/demo.out")"
        echo "# ---- kvtierctl status, after it exited:"
        diag "$final"
fi
check "kvtierd stops cleanly" stop_daemon
done_testing
