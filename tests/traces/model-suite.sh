#!/bin/bash
# model-suite.sh [-p POLICY] [-g GEN-WORKLOADS] LABEL=KVTIER-SIM...
#
# The benchmark suite's shapes in the model, side by side for several
# builds of kvtier-sim (a branch against main, say): one row a workload,
# one column a build, each cell the policy's speed as a fraction of
# all-VRAM (kvtier-sim's speed=).  The traces come from one gen-workloads
# (-g; default: the one beside the first kvtier-sim), so every build reads
# the same records.  Rows: the paged pools at 4G over the whole trace (hot
# set 5, 8, 16, 64 sessions; interleaved 16, 64), as tests/traces/
# workloads.sh runs them; the long contexts at 1G (DynamicCache, the
# static cache by repeat_kv, the static cache in the engine's segments:
# whole, its prefill and its decode, closed loop); and the suite's own
# windows of the paged pool captured at each fill (closed loop, as
# workloads.sh checks them against the GPU).  A cell kvtier-sim fails on
# reads "error".  For comparing policies in the model before a GPU runs
# them: a difference the model shows is a question for the GPU, not an
# answer (docs/design.md, the simulator).
set -u
policy=demand gen=""
while getopts p:g: o; do
        case $o in
        p) policy=$OPTARG ;;
        g) gen=$OPTARG ;;
        *) exit 2 ;;
        esac
done
shift $((OPTIND - 1))
if [ $# -eq 0 ]; then
        echo "usage: model-suite.sh [-p POLICY] [-g GEN-WORKLOADS] LABEL=KVTIER-SIM..." >&2
        exit 2
fi
labels=() sims=()
for a in "$@"; do
        if [[ $a != *=* ]] || [ ! -x "${a#*=}" ]; then
                echo "model-suite.sh: $a: want LABEL=PATH of an executable kvtier-sim" >&2
                exit 2
        fi
        labels+=("${a%%=*}") sims+=("${a#*=}")
done
[ -n "$gen" ] || gen=$(dirname "${sims[0]}")/tests/traces/gen-workloads
if [ ! -x "$gen" ]; then
        echo "model-suite.sh: no gen-workloads at $gen (-g names one)" >&2
        exit 2
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# row NAME TRACE SIM-ARGS...: one line, a cell per build
row() {
        local name=$1 trace=$2 s speed
        shift 2
        printf '%-22s' "$name"
        for s in "${sims[@]}"; do
                speed=$("$s" -p "$policy" "$@" "$dir/$trace" 2>/dev/null |
                        sed -n "s/^policy=$policy .* speed=\([^ ]*\).*/\1/p")
                printf ' %12s' "${speed:-error}"
        done
        echo
}

for n in 5 8 16 64; do "$gen" paged-contiguous 10 "$n" >"$dir/pc$n"; done
for n in 16 64; do "$gen" paged-interleaved 10 "$n" >"$dir/pi$n"; done
for n in 5 8 16; do "$gen" paged-contiguous 2 "$n" at-fill >"$dir/af$n"; done
"$gen" long-context 64 >"$dir/lc"
"$gen" long-static 64 >"$dir/ls"
"$gen" long-static-engine 64 >"$dir/lse"

printf '%-22s' workload
printf ' %12s' "${labels[@]}"
echo
for n in 5 8 16 64; do row "paged hot $n" "pc$n" --budget=4G; done
for n in 16 64; do row "interleaved hot $n" "pi$n" --budget=4G; done
row "dynamic" lc --budget=1G
row "dynamic, decode" lc --budget=1G --closed-loop --measure-ms=256
row "static" ls --budget=1G
row "static engine" lse --budget=1G
row "static eng. prefill" lse --budget=1G --closed-loop --measure-ms=0:256
row "static eng. decode" lse --budget=1G --closed-loop --measure-ms=256
row "suite hot 5, 1088" af5 --budget=4G --closed-loop --measure-ms=1088:1344
row "suite hot 8, 1088" af8 --budget=4G --closed-loop --measure-ms=1088:1344
row "suite hot 16, 1088" af16 --budget=4G --closed-loop --measure-ms=1088:1344
row "suite hot 16, 1792" af16 --budget=4G --closed-loop --measure-ms=1792:2048
