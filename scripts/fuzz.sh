#!/bin/bash
# Builds the fuzz targets in tests/fuzz for libFuzzer (clang, ASan, UBSan)
# and runs each for SECONDS (default 60), keeping corpora in build/fuzz/.
# make check runs the same targets briefly with a stand-alone driver; a
# crash file from either replays with: build/tests/fuzz/fuzz-X FILE
#   scripts/fuzz.sh [SECONDS] [TARGET...]      targets: protocol config daemon ssd
# (ssd, one block's decoding and the spills' index, small and fast: half of SECONDS)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}; shift || true
targets=${*:-protocol config daemon ssd}
command -v clang >/dev/null || { echo "fuzz.sh: clang not installed (apt-get install clang)" >&2; exit 2; }
[ -f build/config.h ] || scripts/build.sh --no-install >/dev/null
out=build/fuzz
mkdir -p "$out"
flags=(-g -O1 -fsanitize=fuzzer,address,undefined -Ibuild -Icommon -Ipolicy -Idaemon -Itests/fuzz
       '-DKVT_RUNSTATEDIR="/run"' '-DKVT_SYSCONFDIR="/etc"' $(pkg-config --cflags inih))
common=(common/protocol.c common/log.c common/util.c -lm)
for t in $targets; do
        case "$t" in
        protocol) src=(tests/fuzz/fuzz-protocol.c) ;;
        config) src=(tests/fuzz/fuzz-config.c daemon/conf.c policy/*.c $(pkg-config --libs inih)) ;;
        daemon) src=(tests/fuzz/fuzz-daemon.c daemon/conf.c daemon/registry.c daemon/grants.c daemon/planner.c daemon/workers.c
                     policy/*.c -pthread $(pkg-config --libs inih)) ;;
        ssd) src=(tests/fuzz/fuzz-ssd.c daemon/ssd-block.c daemon/ssd-journal.c $(pkg-config --libs libxxhash libzstd liblz4)) ;;
        *) echo "fuzz.sh: unknown target $t" >&2; exit 2 ;;
        esac
        clang "${flags[@]}" "${src[@]}" "${common[@]}" -o "$out/fuzz-$t"
        mkdir -p "$out/corpus-$t"
        t_secs=$secs
        [ "$t" = ssd ] && t_secs=$(( (secs + 1) / 2 ))
        echo "== fuzz-$t for ${t_secs}s"
        rc=0
        "$out/fuzz-$t" -max_total_time="$t_secs" -max_len=$([ "$t" = ssd ] && echo 70000 || echo 4096) -print_final_stats=1 "$out/corpus-$t" \
                >"$out/fuzz-$t.log" 2>&1 || rc=$?
        grep -E '^(stat::number_of_executed_units|stat::new_units_added|SUMMARY|fuzz:)' "$out/fuzz-$t.log" || true
        [ $rc -eq 0 ] || { echo "fuzz.sh: fuzz-$t failed (exit $rc): see $out/fuzz-$t.log and the crash-* file" >&2; exit 1; }
done
