#!/bin/bash
# The mover's pipeline (shim/pipeline.c and shim/evictors.c, linked into
# tests/bench/mover-bench) against the fake CUDA: a chunk the GPU wrote while
# in VRAM keeps the write through eviction (read on the host, and on the GPU
# after promotion); adjacent orders that arrive together coalesce into one
# run; the host tier goes to the GPU's NUMA node, and to plain host memory
# where CUDA refuses that node; evictions run on the evictor threads, each
# in a CUDA context of its own, split among them.
. "$(dirname "$0")/lib.sh"

BENCH="$top_builddir/tests/bench/mover-bench"

bench() { # NAME ENV...: runs the check, output in $TMP/NAME.out, stats in $TMP/NAME.stats
        local name=$1; shift
        env FAKECUDA_STATS="$TMP/$name.stats" "$@" "$BENCH" --size 64M --check-only >"$TMP/$name.out" 2>&1
}
lost_none() { grep -q "words lost or wrong: host 0, gpu 0" "$TMP/$1.out"; }

bench migrate; rc=$?
check "migrating: check exits 0" [ $rc -eq 0 ]
check "migrating: no write lost (host and GPU)" lost_none migrate
[ $rc -eq 0 ] || diag "$(cat "$TMP/migrate.out")"
check_gt "migrating: chunks copied to the GPU" "$(stat_of migrate h2d_bytes)" 0
check "evictions to mapped host memory by default" grep -q "evictions to host-mapped$" "$TMP/migrate.out"
# to unmapped host memory
env FAKECUDA_STATS="$TMP/unmapped.stats" "$BENCH" --size 64M --check-only --evict-to host \
        >"$TMP/unmapped.out" 2>&1; rc=$?
check "evictions to unmapped host memory: no write lost" rc_and $rc lost_none unmapped
check "evictions to unmapped host memory: said" grep -q "evictions to host$" "$TMP/unmapped.out"
# random orders of every kind (re-arms and probes too) while the GPU writes:
# no word lost (tests/bench/RESULTS.md: 1 TiB of the same soak)
env FAKECUDA_STATS="$TMP/soak.stats" "$BENCH" --size 64M --soak 4G >"$TMP/soak.out" 2>&1; rc=$?
check "soak: 4 GiB of random orders, every word checked, none lost" \
        rc_and $rc grep -q "words lost or wrong: 0$" "$TMP/soak.out"
[ $rc -eq 0 ] || diag "$(tail -5 "$TMP/soak.out")"
# Samples always take the same page of a chunk: the driver splits its 2 MiB
# block at the edges of a range advised and never merges it (the fake counts
# the first split at each edge), so a chunk sampled again and again is split
# once, not once more each time (a different page each time: 892 splits of
# these 32 chunks).
splits=$(stat_of soak block_splits)
check "soak: samples split each chunk's block once at most ($splits splits, 32 chunks)" \
        [ "${splits:-999}" -le 32 ]
"$BENCH" --size 64M --check-only --evict-to disk >"$TMP/evict-to-bad.out" 2>&1; rc=$?
check "a bad --evict-to is refused" [ $rc -eq 2 ]

# Batches of 64 single-chunk orders of one region: 32 chunks, so every
# batch of the check is one run.
read -r orders runs < <(sed -n 's/.* \([0-9]*\) orders in \([0-9]*\) runs.*/\1 \2/p' "$TMP/migrate.out")
check_gt "orders were issued" "${orders:-0}" 0
check_gt "adjacent orders coalesced (orders > runs)" "${orders:-0}" "${runs:-0}"

bench numa FAKECUDA_NUMA_NODES=2 KVTIER_LOG=debug; rc=$?
check "two NUMA nodes: check exits 0" [ $rc -eq 0 ]
check "host tier on the GPU's node (node 1)" grep -q "Host tier of GPU 0: NUMA node 1" "$TMP/numa.out"
check_gt "prefetches to the host named the node" "$(stat_of numa numa_location_calls)" 0
# the mover's threads go to that node's CPUs where sysfs has the node, and
# say why not where it has not (here, most likely: no node 1)
check "the mover's threads bound to the node's CPUs, or why not said" \
        grep -Eq "The mover's threads (run on|stay unbound, not on) NUMA node 1's CPUs" "$TMP/numa.out"

bench nonuma FAKECUDA_NUMA_NODES=2 KVTIER_DEBUG=host-numa=0; rc=$?
check "KVTIER_DEBUG=host-numa=0: check exits 0" [ $rc -eq 0 ]
check "KVTIER_DEBUG=host-numa=0: no NUMA location named" [ "$(stat_of nonuma numa_location_calls)" -eq 0 ]

# A node CUDA refuses (here: one the fake does not have) falls back to
# plain host memory instead of failing every eviction.
bench refused FAKECUDA_HOST_NUMA_ID=5 KVTIER_LOG=info; rc=$?
check "refused NUMA node: check exits 0" [ $rc -eq 0 ]
check "refused NUMA node: no write lost" lost_none refused
check "refused NUMA node: fallback logged" grep -q "refused as a location" "$TMP/refused.out"
[ $rc -eq 0 ] || diag "$(cat "$TMP/refused.out")"

# Late completion: the pipeline must wait for its events, several runs at once.
bench late FAKECUDA_EVENT_DELAY_US=2000; rc=$?
check "late completion: check exits 0" [ $rc -eq 0 ]
check "late completion: no write lost" lost_none late
max_in_flight=$(sed -n 's/.*at most \([0-9]*\) in flight/\1/p' "$TMP/late.out")
check_gt "late completion: several runs in flight at once" "${max_in_flight:-0}" 1
[ $rc -eq 0 ] || diag "$(cat "$TMP/late.out")"

# Evictor threads: the fake's prefetch, like a prefetch to the host on the
# H200, returns only when its pages have moved.  A promotion ordered after
# 448 MiB of evictions completes before them: the evictor threads make the
# evictions' calls, not the owner.
overtake() { # NAME ENV...
        local name=$1; shift
        env FAKECUDA_PREFETCH_DELAY_US=1000 "$@" "$BENCH" --size 512M --overtake >"$TMP/$name.out" 2>&1
}
overtake overtake-2; rc=$?
check "evictor threads (default): the promotion does not wait for the evictions" [ $rc -eq 0 ]
check "evictor threads (default): two of them" grep -q ", 2 evictor threads" "$TMP/overtake-2.out"
diag "$(grep '^overtake:' "$TMP/overtake-2.out")"
# A batch that evicts and promotes issues its promotions first: no eviction
# starts while their prefetch calls run (they block the mover for the
# whole copy, on the H200 as in the fake), so none slows them.
env FAKECUDA_PREFETCH_DELAY_US=1000 "$BENCH" --size 256M --contend >"$TMP/contend.out" 2>&1; rc=$?
read -r under runs < <(sed -n 's/.* \([0-9]*\) of \([0-9]*\) eviction runs started while.*/\1 \2/p' "$TMP/contend.out")
check "promotions first: contend exits 0" [ $rc -eq 0 ]
check_gt "promotions first: eviction runs were made" "${runs:-0}" 1
check "promotions first: no eviction started while the promotions' calls ran" [ "${under:-x}" = 0 ]
diag "$(grep '^contend:' "$TMP/contend.out")"

# --scattered, for the GPU machine: every other chunk moved one call a chunk,
# then in batches (cudaMemPrefetchBatchAsync, whose arguments the fake
# checks as CUDA does); four rows of GB/s, none failed.
"$BENCH" --size 64M --scattered >"$TMP/scattered.out" 2>&1; rc=$?
check "scattered: exits 0, four rows of GB/s, none failed" \
        rc_and $rc [ "$(grep -c '^scattered \(evict\|promote\), .* GB/s$' "$TMP/scattered.out")" -eq 4 ]
diag "$(grep '^scattered' "$TMP/scattered.out" | tr '\n' ';')"

# Moves before samples: with advice as slow as on the H200 (~50 us a call,
# two calls a re-arm), an eviction ordered behind 56 chunks of re-arms
# completes before them, since the evictors take samples in parts and a
# move before any sample's next part.
FAKECUDA_ADVISE_DELAY_US=1000 "$BENCH" --size 128M --samples-first >"$TMP/samples.out" 2>&1; rc=$?
check "moves before samples: the eviction did not wait for the re-arms" [ $rc -eq 0 ]
diag "$(grep '^samples-first:' "$TMP/samples.out")"
# ...but no longer than half a second: with 1.5 s of moves queued (40
# one-chunk evictions of 75 ms each), a re-arm ordered after them is made
# once it has waited that long, not after them all.
FAKECUDA_PREFETCH_DELAY_US=75000 "$BENCH" --size 192M --samples-wait >"$TMP/samples-wait.out" 2>&1; rc=$?
check "samples wait behind moves half a second at most" [ $rc -eq 0 ]
diag "$(grep '^samples-wait:' "$TMP/samples-wait.out")"
# The process exits with an eviction's prefetch in flight: the shim's exit
# handler waits for the calls under way before the runtime tears down (a
# call the teardown overtakes may crash the process: one engine of the
# suite died of SIGSEGV at exit on an H100), starts no other, and every
# order is reported, none failed: what was not moved is cancelled, the
# memory going with the process.
FAKECUDA_PREFETCH_DELAY_US=50000 "$BENCH" --size 64M --exit-midway >"$TMP/exit.out" 2>&1; rc=$?
check "an exit with a move in flight reports every order, none failed" \
        rc_and $rc grep -q "^exit-midway: 3 of 3 orders reported after the exit began: [0-9]* cancelled, 0 failed" "$TMP/exit.out"
check "... and the runtime's teardown found no call of the shim's under way" \
        rc_and $rc [ "$(grep -c "calls under way" "$TMP/exit.out")" = 0 ]
diag "$(grep '^exit-midway:\|^fakecuda:' "$TMP/exit.out")"
# ... and with a promotion issued when the exit comes: ended with no CUDA
# call, reported cancelled.
FAKECUDA_PREFETCH_DELAY_US=50000 "$BENCH" --size 64M --exit-midway-up >"$TMP/exit-up.out" 2>&1; rc=$?
check "an exit with a promotion in flight: reported cancelled, none failed" \
        rc_and $rc grep -q "^exit-midway: 4 of 4 orders reported after the exit began: 1 cancelled, 0 failed" \
        "$TMP/exit-up.out"
diag "$(grep '^exit-midway:\|^fakecuda:' "$TMP/exit-up.out")"

# The interference probe keeps working (its figures mean something only on
# a GPU): idle, five moving phases, each with steps counted.
"$BENCH" --size 64M --interfere >"$TMP/interfere.out" 2>&1; rc=$?
check "interfere: exits 0" [ $rc -eq 0 ]
check "interfere: idle and five phases probed" \
        [ "$(grep -c '^interfere: .* steps, median' "$TMP/interfere.out")" -eq 6 ]
[ $rc -eq 0 ] || diag "$(cat "$TMP/interfere.out")"

# Evictions in a CUDA context of their own: a prefetch holds back every
# other call of its context (on the H200, and in the fake), so evictions
# made in the engine's context would stall its launches.  The fake counts
# the prefetches made in a created context.
check_gt "default: prefetches made in the evictors' context" "$(stat_of migrate prefetch_calls_created_ctx)" 0
for v in "ectx:" "ectx-late:FAKECUDA_EVENT_DELAY_US=1000"; do
        name=${v%%:*} extra=${v#*:}
        bench "$name" KVTIER_LOG=info $extra; rc=$?
        check "$name: check exits 0, no write lost" rc_and $rc lost_none "$name"
        check "$name: contexts created" grep -q "evictions run in CUDA contexts of their own" "$TMP/$name.out"
        # one per evictor that evicted (two evictors by default)
        check_gt "$name: a context made" "$(stat_of "$name" ctx_created)" 0
        check_le "$name: no more than one per evictor" "$(stat_of "$name" ctx_created)" 2
        check "$name: each with its stack, printf and heap limits lowered to 0" \
                [ "$(stat_of "$name" ctx_limits_lowered)" -eq "$(stat_of "$name" ctx_created)" ]
        check_gt "$name: prefetches made in them" "$(stat_of "$name" prefetch_calls_created_ctx)" 0
        # promotions stay in the engine's context
        check_gt "$name: promotions were made" "$(stat_of "$name" h2d_bytes)" 0
        check "$name: none in the evictors' context" [ "$(stat_of "$name" prefetch_to_device_created_ctx)" -eq 0 ]
        [ $rc -eq 0 ] || diag "$(cat "$TMP/$name.out")"
done
bench ectx-refused KVTIER_LOG=info FAKECUDA_FAIL=ctx_create:1+; rc=$?
check "no context to be had: check exits 0, no write lost" rc_and $rc lost_none ectx-refused
check "no context to be had: logged" grep -q "no CUDA context of its own for an evictor" "$TMP/ectx-refused.out"
check "no context to be had: evictions in the engine's context" \
        [ "$(stat_of ectx-refused prefetch_calls_created_ctx)" -eq 0 ]
# An eviction is split among the evictors, each in its own context, and
# the parts move side by side (the H200 moved pages to the host faster from
# several contexts than from one).  The check's batches of 64 one-chunk
# orders make runs of 32 chunks: split, each takes several prefetches.
# Evictors without a context of their own (ectx-refused) take whole runs,
# and the fake, like CUDA, makes one prefetch of a context at a time.
bench split FAKECUDA_PREFETCH_DELAY_US=2000; rc=$?
check "split: check exits 0, no write lost" rc_and $rc lost_none split
[ $rc -eq 0 ] || diag "$(cat "$TMP/split.out")"
check_gt "evictors in their contexts: evictions moved at once" \
        "$(stat_of split host_prefetch_overlap_max)" 1
check_le "evictors in their contexts: one context each at most" "$(stat_of split ctx_created)" 2
check_gt "evictors in their contexts split runs into more prefetches than evictors without" \
        "$(stat_of split prefetch_calls)" "$(stat_of ectx-refused prefetch_calls)"
# Advice waits for other contexts' prefetches on the H200: a run is advised
# once, whole, not part by part, so split or not it takes as many calls.
check "evictors split each run, and advise it as often as whole runs are" \
        [ "$(stat_of split advise_calls)" -eq "$(stat_of ectx-refused advise_calls)" ]
# One evictor refused a context: it takes whole runs, in the engine's
# context; the other goes on in its own.
bench split-refused KVTIER_LOG=info FAKECUDA_FAIL=ctx_create:2 FAKECUDA_PREFETCH_DELAY_US=2000; rc=$?
check "one evictor without a context: check exits 0, no write lost" rc_and $rc lost_none split-refused
check "one evictor without a context: its refusal logged" \
        grep -q "no CUDA context of its own for an evictor" "$TMP/split-refused.out"
check_gt "one evictor without a context: the other evicts in its own" \
        "$(stat_of split-refused prefetch_calls_created_ctx)" 0

# A chunk's advice is made at its first eviction and kept: promotions make
# none, and the chunk's later evictions repeat none (each piece of advice
# takes the driver's lock on the whole address space).  With the preferred
# location left on the host, the GPU's writes after each promotion find the
# pages in VRAM: no fault past the first touches, nothing over the link.
# Then each chunk is probed: its 4 KiB sample page alone goes to the host
# (the chunk's preferred location is the host already, so the probe makes
# no advice of its own there), and the GPU's next read faults on it once.
trips() { # NAME ENV...: three round trips of 64M in 16M orders
        local name=$1; shift
        env FAKECUDA_STATS="$TMP/$name.stats" "$@" "$BENCH" --size 64M --round-trips 3 >"$TMP/$name.out" 2>&1
}
advice_of() { # NAME TRIP: the advice calls down and up
        sed -n "s/^round trip $2: down [^,]*, \([0-9]*\) advice calls in [^;]*; up [^,]*, \([0-9]*\) advice.*/\1 \2/p" \
                "$TMP/$1.out"
}
trips kept; rc=$?
check "round trips: exit 0, no write lost" \
        rc_and $rc grep -q "round trips: words lost or wrong: host 0, gpu 0" "$TMP/kept.out"
[ $rc -eq 0 ] || diag "$(cat "$TMP/kept.out")"
check "first eviction: the preferred location, and accessed-by for each of 32 chunks" \
        [ "$(advice_of kept 0)" = "33 0" ]
check "later trips: no advice either way" [ "$(advice_of kept 1) $(advice_of kept 2)" = "0 0 0 0" ]
check "the GPU's accesses after each promotion found VRAM: 32 first touches and 32 probed pages faulted, no more" \
        [ "$(stat_of kept faults)" -eq 64 ]
check "nothing read over the link" [ "$(stat_of kept remote_bytes)" -eq 0 ]
check "moved to the host: four evictions of 64M, and a 4 KiB page for each of 32 probes" \
        [ "$(stat_of kept d2h_bytes)" -eq $((4 * (64 << 20) + 32 * 4096)) ]

BUDGET=$((64 << 20))
write_config 64M
check "kvtierd starts" start_daemon
# late_engine NAME LABEL [VAR=VALUE...]: the test engine under the shim,
# its completions late, with more environment; its checks named LABEL.
late_engine() {
        local name=$1 label=$2 done0 s rc
        shift 2
        done0=$(status_json | jq .migrations.orders_done)
        ENGINE_ENV="FAKECUDA_EVENT_DELAY_US=3000 $*" \
                run_engine "$name" --regions 4 --region-size 64M --window 32M --steps 30 --step-ms 15 \
                --hint --max-vram $BUDGET; rc=$?
        check "$label, engine under the shim: exits 0" [ $rc -eq 0 ]
        check "$label, engine: pattern intact" grep -q "mismatched words 0" "$TMP/$name.out"
        [ $rc -eq 0 ] || diag "$(cat "$TMP/$name.out")"
        s=$(status_json)
        check_gt "$label, engine: orders completed" "$(echo "$s" | jq .migrations.orders_done)" "${done0:-0}"
        check "$label, engine: no order failed" [ "$(echo "$s" | jq .migrations.orders_failed)" -eq 0 ]
        check "$label, engine: none in flight after exit" \
                [ "$(echo "$s" | jq '[.gpus[].inflight_orders] | add')" -eq 0 ]
        check_le "$label, engine: peak VRAM by the fake's counters within the budget" \
                "$(stat_of "$name" managed_resident_peak_bytes)" $BUDGET
}
late_engine late-engine "late completion"
check_gt "late completion, engine: evictions in the evictors' own context" \
        "$(stat_of late-engine prefetch_calls_created_ctx)" 0
stop_daemon

done_testing
