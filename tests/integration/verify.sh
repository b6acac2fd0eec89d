#!/bin/bash
# A mapped eviction leaves each chunk's sample page unmapped, so that the
# GPU's next use of the chunk faults and is seen.  If a touch while the
# chunk moved mapped that page unseen, the chunk is read in place from
# then on and the daemon, which books it armed, never learns of its use.
# The sampler re-arms such a chunk once (policy_chunk_unverified()).
#
# The fake CUDA's FAKECUDA_SILENT_EVICT=1 makes every mapped eviction so.
# An engine reads a 32M window sliding over 192M of pool against a 64M
# budget, its kernels launched with no pointer the shim reads
# (FAKE_ENGINE_LAUNCH=direct: as a gather from a pool, whose kernels get
# the pool's base), so that faults are all the daemon sees.  Chunks behind
# the window are evicted and used again when it comes round: those uses
# must be seen, and the chunks come back into VRAM.  Without the re-arms
# 128M came back in 150 steps, then nothing (2.9G read in place against
# 1.6G with them).
. "$(dirname "$0")/lib.sh"

write_config 64M
check "kvtierd starts" start_daemon
export FAKECUDA_SILENT_EVICT=1 FAKE_ENGINE_LAUNCH=direct
check "an engine whose mapped evictions hide their next use runs" \
        run_engine e --regions 3 --region-size 64M --window 32M --step-ms 20 --steps 150
check "its pattern intact" grep -q "mismatched words 0" "$TMP/e.out"
S=$(status_json)
check_gt "mapped evictions were verified" "$(jq '.gpus[0].demand.verified_chunks' <<<"$S")" 0
check_gt "and uses seen next" "$(jq '.gpus[0].demand.verified_used' <<<"$S")" 0
check_gt "chunks kept coming back into VRAM: more than 3 budgets promoted" \
        "$(jq '.gpus[0].moves.to_vram.bytes' <<<"$S")" $((192 << 20))
check "kvtierd stops cleanly" stop_daemon
done_testing
