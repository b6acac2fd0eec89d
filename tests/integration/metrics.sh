#!/bin/bash
# kvtierctl metrics beyond ctl.sh: the text is strictly valid (prom-lint, and
# promtool where it is installed) with kvtierd up and down; the move-latency
# histograms, bytes moved, faults on evicted chunks, the chunk uses by tier
# (the VRAM hit rate) and the evictions the thrash guard avoided agree with
# the status and only grow; --output replaces its file atomically and keeps the old one
# when it cannot; the kvtier-metrics units run that; the Grafana dashboard in
# contrib/ names only metrics that kvtierctl metrics emits.
. "$(dirname "$0")/lib.sh"

LINT="$top_builddir/tests/integration/prom-lint"
DASHBOARD="$top_srcdir/contrib/grafana/kvtier.json"

# The lint can fail: each broken text below is refused, a good one passes.
H='# HELP h A histogram.\n# TYPE h histogram\n'
G='# HELP g A gauge.\n# TYPE g gauge\n'
bad=(
        'g 1\n'                                                                  # no HELP, TYPE
        '# HELP c_total C.\n# TYPE c_total counter\nc_total -1\n'                # a counter below 0
        '# HELP c C.\n# TYPE c counter\nc 1\n'                                    # a counter not _total
        "$G"'g{x="1"} 1\ng{x="1"} 2\n'                                            # a series twice
        "$G"'g{x="a\\q"} 1\n'                                                     # a bad escape
        "$G"'g 1x\n'                                                              # a bad value
        "$G"'g{x="1",x="2"} 1\n'                                                  # a label twice
        "$G"'\ng 1\n'                                                             # a blank line
        "$G"'# TYPE g gauge\ng 1\n'                                               # TYPE twice
        "$G"'# HELP k K.\n# TYPE k gauge\ng 1\nk 1\ng{x="2"} 1\n'                 # samples apart
        "$H"'h_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n'     # not cumulative
        "$H"'h_bucket{le="1"} 1\nh_sum 1\nh_count 1\n'                            # no +Inf
        "$H"'h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 3\n'     # _count is not +Inf
        "$H"'h_bucket{le="2"} 1\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n' # le falling
        "$H"'h 1\n'                                                               # a plain sample
)
refused=0
for i in "${!bad[@]}"; do
        if printf '%b' "${bad[$i]}" | "$LINT" 2>/dev/null; then diag "prom-lint passed broken text $i"; else refused=$((refused + 1)); fi
done
check "prom-lint refuses each of ${#bad[@]} broken texts" [ $refused -eq ${#bad[@]} ]
check "prom-lint passes a good histogram" \
        bash -c "printf '%b' '$H''h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1.5\nh_count 2\n' | '$LINT'"

jqe() { jq -e "$@" >/dev/null; }
promcheck() { # FILE: promtool check metrics, where promtool is installed (Debian: prometheus)
        promtool check metrics <"$1" >"$TMP/promtool.out" 2>&1 || { diag "$(cat "$TMP/promtool.out")"; return 1; }
}

write_config 32M "[capture]" "min_size = 16M" "[policy]" "name = lru"
check "kvtierd starts" start_daemon
run_engine first --regions 4 --region-size 32M --window 16M --steps 40 --step-ms 10
check "an engine with four times the budget runs" [ $? -eq 0 ]
"$KVTIERCTL" -s "$SOCK" metrics >"$TMP/m1.txt"; rc=$?
status_json >"$TMP/s1.json"
check "metrics exits 0" [ $rc -eq 0 ]
check "metrics pass the strict format check" "$LINT" <"$TMP/m1.txt"
if command -v promtool >/dev/null; then
        check "promtool check metrics is clean with kvtierd up" promcheck "$TMP/m1.txt"
else
        ok "# SKIP promtool check metrics (promtool not installed; prom-lint ran)"
fi

m() { awk -v k="$2" '$1 == k { print $2 }' "$1"; } # FILE SERIES: its value
js() { jq -r "$1" "$TMP/s1.json"; }
for dir in to_vram to_host; do
        count=$(m "$TMP/m1.txt" "kvtier_move_duration_seconds_count{gpu=\"0\",direction=\"$dir\"}")
        check_gt "moves $dir were observed in the histogram" "${count:-0}" 0
        check "the $dir histogram counts the status's completed move orders" \
                [ "$count" = "$(js ".gpus[0].moves.$dir.orders")" ]
        check "the $dir histogram's +Inf bucket is its count" \
                [ "$(m "$TMP/m1.txt" "kvtier_move_duration_seconds_bucket{gpu=\"0\",direction=\"$dir\",le=\"+Inf\"}")" = "$count" ]
        check "the $dir histogram's sum is in seconds, above 0" \
                awk -v s="$(m "$TMP/m1.txt" "kvtier_move_duration_seconds_sum{gpu=\"0\",direction=\"$dir\"}")" \
                'BEGIN { exit !(s > 0 && s < 60) }'
        check "the 50 us bucket is the first" \
                grep -q "^kvtier_move_duration_seconds_bucket{gpu=\"0\",direction=\"$dir\",le=\"5e-05\"} " "$TMP/m1.txt"
done
key=(to_vram bytes_to_vram to_host bytes_to_host)
for i in 0 2; do
        bytes=$(m "$TMP/m1.txt" "kvtier_gpu_moved_bytes_total{gpu=\"0\",direction=\"${key[$i]}\"}")
        check_gt "bytes moved ${key[$i]} counted" "${bytes:-0}" 0
        check "bytes moved ${key[$i]} on the one GPU = all GPUs' (migrations.${key[$((i + 1))]})" \
                [ "$bytes" = "$(js ".migrations.${key[$((i + 1))]}")" ]
done
faults=$(m "$TMP/m1.txt" 'kvtier_gpu_evicted_chunk_faults_total{gpu="0"}')
check_gt "faults on evicted chunks counted (the engine reads what was evicted)" "${faults:-0}" 0
check "faults on evicted chunks = the status's demand_faults" [ "$faults" = "$(js '.gpus[0].demand.demand_faults')" ]
check "evicted chunks counted" [ "$(m "$TMP/m1.txt" 'kvtier_gpu_evicted_chunks_total{gpu="0"}')" = "$(js '.gpus[0].demand.evicted_chunks')" ]

# The VRAM hit rate: the chunk uses seen, by the tier their chunk was in.
# Four times the budget, read evenly: some uses in VRAM, most not.
uses() { m "$TMP/m1.txt" "kvtier_gpu_chunk_uses_total{gpu=\"0\",tier=\"$1\"}"; }
check_gt "chunk uses seen in VRAM" "$(uses vram)" 0
check_gt "chunk uses seen in host memory" "$(uses host)" 0
for t in vram host_mapped host none; do
        check "chunk uses in $t = the status's chunk_uses.$t" [ "$(uses $t)" = "$(js ".gpus[0].chunk_uses.$t")" ]
done
check "kvtier_gpu_vram_hit_ratio = uses in VRAM over all uses (and the status's vram_hit_rate)" \
        awk -v r="$(m "$TMP/m1.txt" 'kvtier_gpu_vram_hit_ratio{gpu="0"}')" -v s="$(js '.gpus[0].vram_hit_rate')" \
        -v v="$(uses vram)" -v a="$(( $(uses vram) + $(uses host_mapped) + $(uses host) + $(uses none) ))" \
        'BEGIN { exit !(r > 0 && r < 1 && (r - v / a) ^ 2 < 1e-10 && (r - s) ^ 2 < 1e-10) }'
"$KVTIERCTL" -s "$SOCK" status >"$TMP/s1.txt"
check "kvtierctl status gives the hit rate" \
        grep -q "^GPU 0 VRAM hit rate: [0-9.]*% of $(( $(uses vram) + $(uses host_mapped) + $(uses host) + $(uses none) )) chunk uses seen ($(uses vram) in VRAM, " "$TMP/s1.txt"
check "lru has no thrash guard: no eviction avoided" [ "$(m "$TMP/m1.txt" 'kvtier_gpu_evictions_avoided_total{gpu="0"}')" = 0 ]

# Counters only grow: a second engine adds to them.
run_engine second --regions 4 --region-size 32M --window 16M --steps 20 --step-ms 10
"$KVTIERCTL" -s "$SOCK" metrics >"$TMP/m2.txt"
grew() { # SERIES
        awk -v a="$(m "$TMP/m1.txt" "$1")" -v b="$(m "$TMP/m2.txt" "$1")" 'BEGIN { exit !(b > a) }'
}
check "bytes moved to VRAM grew with the second engine" grew 'kvtier_gpu_moved_bytes_total{gpu="0",direction="to_vram"}'
check "the to_vram histogram's count grew" grew 'kvtier_move_duration_seconds_count{gpu="0",direction="to_vram"}'
check "no counter went down" bash -c "join <(grep '_total[{ ]' '$TMP/m1.txt' | grep -v '^#' | sort) \
        <(grep '_total[{ ]' '$TMP/m2.txt' | grep -v '^#' | sort) | awk '\$3 < \$2 { print; bad = 1 } END { exit bad }'"

# The demand policy's thrash guard: a working set past the budget is read
# in place rather than promoted over the chunks in use; each demand it held
# back while the budget was full is an eviction avoided.
"$KVTIERCTL" -s "$SOCK" set policy demand >/dev/null
run_engine guard --regions 4 --region-size 32M --window 16M --steps 40 --step-ms 10
check "an engine under the demand policy runs" [ $? -eq 0 ]
"$KVTIERCTL" -s "$SOCK" metrics >"$TMP/m3.txt"
status_json >"$TMP/s3.json"
avoided=$(m "$TMP/m3.txt" 'kvtier_gpu_evictions_avoided_total{gpu="0"}')
check_gt "demand: evictions avoided by the thrash guard" "${avoided:-0}" 0
check "demand: the status's evictions_avoided" [ "$avoided" = "$(jq '.gpus[0].demand.evictions_avoided' "$TMP/s3.json")" ]
check_le "demand: at most one per demand seen" "$avoided" "$(jq '.gpus[0].demand.demand_faults' "$TMP/s3.json")"
"$KVTIERCTL" -s "$SOCK" status >"$TMP/s3.txt"
check "kvtierctl status gives them" grep -q "^GPU 0 demand: .* $avoided evictions avoided, " "$TMP/s3.txt"
# Of the stale bytes (a capture may displace them), the cold ones (a demand may).
check "demand: the status's cold_bytes are the metric's" \
        [ "$(m "$TMP/m3.txt" 'kvtier_gpu_cold_bytes{gpu="0"}')" = "$(jq '.gpus[0].demand.cold_bytes' "$TMP/s3.json")" ]
check "kvtierctl status tells how much of the stale VRAM was found unused" \
        grep -q "^GPU 0 demand: .* stale in VRAM ([0-9.]*[KMGT]\{0,1\}i\{0,1\}B\{0,1\} found unused)," "$TMP/s3.txt"
check "no counter went down with it" bash -c "join <(grep '_total[{ ]' '$TMP/m2.txt' | grep -v '^#' | sort) \
        <(grep '_total[{ ]' '$TMP/m3.txt' | grep -v '^#' | sort) | awk '\$3 < \$2 { print; bad = 1 } END { exit bad }'"

# Regions of one client and one size, four or more, are siblings
# (policy/siblings.h): while the engine's four run, status shows their group.
run_engine siblings --regions 4 --region-size 32M --window 16M --steps 60 --step-ms 10 &
sib_pid=$!
status_when '.gpus[0].demand.sibling_regions' 4 >"$TMP/s4.json"
"$KVTIERCTL" -s "$SOCK" status >"$TMP/s4.txt"
"$KVTIERCTL" -s "$SOCK" metrics >"$TMP/m4.txt"
wait $sib_pid
check "demand: an engine's four regions of one size are one group of siblings" \
        [ "$(jq -c '.gpus[0].demand | [.sibling_regions, .sibling_groups]' "$TMP/s4.json")" = "[4,1]" ]
check "kvtierctl status names the group" grep -q "^GPU 0 siblings: 4 regions in 1 group (" "$TMP/s4.txt"
check "metrics give what siblings told" grep -q '^kvtier_gpu_sibling_stale_bytes{gpu="0"} [0-9]' "$TMP/m4.txt"
# While the engine runs: stale on the siblings' word is cold, and cold is stale.
check_le "demand: what siblings found unused is cold" "$(jq '.gpus[0].demand.sibling_stale_bytes' "$TMP/s4.json")" \
        "$(jq '.gpus[0].demand.cold_bytes' "$TMP/s4.json")"
check_le "demand: cold bytes are stale bytes" "$(jq '.gpus[0].demand.cold_bytes' "$TMP/s4.json")" \
        "$(jq '.gpus[0].demand.stale_bytes' "$TMP/s4.json")"
check "those metrics pass the strict format check" "$LINT" <"$TMP/m3.txt"
# kvtierctl(1) lists them (man/metrics-list renders metrics.c's HELP lines).
if command -v groff >/dev/null; then
        "$LINT" --names <"$TMP/m3.txt" | sort -u >"$TMP/families.txt"
        LC_ALL=C.UTF-8 groff -man -rLL=300n -Tutf8 -P-cbou "$top_builddir/man/kvtierctl.1" 2>/dev/null |
                sed -n 's/^       \(kvtier_[a-z0-9_]*\) ([a-z]*)$/\1/p' | sort -u >"$TMP/man-metrics.txt"
        check "kvtierctl(1) lists every metric kvtierctl metrics writes, and no other" \
                diff -u "$TMP/families.txt" "$TMP/man-metrics.txt"
else
        ok "# SKIP kvtierctl(1)'s metrics (groff not installed)"
fi

# --output: a temporary file beside the target, renamed over it.
dir="$TMP/textfile"
mkdir -p "$dir"
F="$dir/kvtier.prom"
"$KVTIERCTL" -s "$SOCK" metrics --output "$F"; rc=$?
check "metrics --output exits 0" [ $rc -eq 0 ]
check "the file passes the strict format check" "$LINT" <"$F"
check "the file is mode 0644 (node_exporter reads it as another user)" [ "$(stat -c %a "$F")" = 644 ]
check "no temporary file is left" [ "$(ls -A "$dir")" = kvtier.prom ]
cp "$F" "$TMP/before.prom"
exec 3<"$F"
ino=$(stat -c %i "$F")
"$KVTIERCTL" -s "$SOCK" metrics -o "$F"
check "a rewrite is a new file renamed over the old (inode changed)" [ "$(stat -c %i "$F")" != "$ino" ]
check "a reader that had the old file open still reads it whole" cmp -s - "$TMP/before.prom" <&3
exec 3<&-
# A reader racing a writer never sees part of a file.
( for _ in $(seq 40); do "$KVTIERCTL" -s "$SOCK" metrics -o "$F" || echo fail >>"$TMP/writer.err"; done ) &
writer=$!
reads=0 torn=0
while kill -0 $writer 2>/dev/null; do
        cat "$F" >"$TMP/read.prom" 2>/dev/null || { torn=$((torn + 1)); continue; }
        reads=$((reads + 1))
        "$LINT" <"$TMP/read.prom" 2>/dev/null && grep -q '^kvtier_up 1$' "$TMP/read.prom" || torn=$((torn + 1))
done
wait $writer
check "a reader racing 40 rewrites read $reads whole files, none torn" rc_and $torn [ ! -e "$TMP/writer.err" ]
check "no temporary file is left after them" [ "$(ls -A "$dir")" = kvtier.prom ]
# A write that fails (the file size limit) keeps the old file and cleans up.
cp "$F" "$TMP/before.prom"
( trap '' XFSZ; ulimit -f 1; "$KVTIERCTL" -s "$SOCK" metrics -o "$F" ) 2>"$TMP/fail.err"; rc=$?
check "a write that fails exits 1" [ $rc -eq 1 ]
check "and says the old file was left as it was" grep -q "left as it was" "$TMP/fail.err"
check "the old file is intact" cmp -s "$F" "$TMP/before.prom"
check "no temporary file is left after the failure" [ "$(ls -A "$dir")" = kvtier.prom ]
"$KVTIERCTL" -s "$SOCK" metrics -o "$TMP/no-such-dir/kvtier.prom" 2>"$TMP/fail.err"; rc=$?
check "--output into a missing directory exits 1 naming it" rc_and $((rc != 1)) grep -q "no-such-dir" "$TMP/fail.err"
"$KVTIERCTL" -s "$SOCK" status -o "$F" >/dev/null 2>&1; rc=$?
check "--output with another command is a usage error" [ $rc -eq 2 ]

# The units: kvtier-metrics.timer runs kvtier-metrics.service, whose command
# line is run here as systemd would run it (the build's kvtierctl, the file
# from its Environment= replaced).
units="$top_builddir/systemd"
svc="$units/kvtier-metrics.service"
timer="$top_srcdir/systemd/kvtier-metrics.timer"
check "kvtier-metrics.service runs kvtierctl metrics --output by absolute path" \
        grep -q '^ExecStart=/[^ ]*/bin/kvtierctl metrics --output=${KVTIER_METRICS_FILE}$' "$svc"
check "kvtier-metrics.service writes node_exporter's textfile directory by default" \
        grep -q '^Environment=KVTIER_METRICS_FILE=/var/lib/prometheus/node-exporter/kvtier.prom$' "$svc"
check "kvtier-metrics.timer repeats" grep -q '^OnUnitActiveSec=' "$timer"
check "no placeholder left in kvtier-metrics.service" bash -c "! grep -q '@[a-z]*@' '$svc'"
cmd=$(sed -n 's/^ExecStart=//p' "$svc")
cmd=${cmd/#*\/kvtierctl/$KVTIERCTL}
cmd=${cmd//\$\{KVTIER_METRICS_FILE\}/$dir/unit.prom}
KVTIER_SOCKET="$SOCK" $cmd; rc=$?
check "the unit's command line writes the file" rc_and $rc "$LINT" <"$dir/unit.prom"
if command -v systemd-analyze >/dev/null; then
        sed "s|^ExecStart=[^ ]*|ExecStart=$KVTIERCTL|" "$svc" >"$TMP/kvtier-metrics.service"
        cp "$timer" "$TMP/kvtier-metrics.timer"
        check "systemd-analyze verify accepts the metrics units" \
                bash -c "cd '$TMP' && systemd-analyze verify --man=no ./kvtier-metrics.service ./kvtier-metrics.timer >'$TMP/verify.out' 2>&1; ! grep -qi 'unknown\|invalid\|failed to parse\|error' '$TMP/verify.out'"
else
        ok "# SKIP systemd-analyze verify (not installed)"
fi

# The dashboard names only metrics that kvtierctl metrics emits (their
# families, as prom-lint lists them; a histogram's series by its suffixes).
"$LINT" --names <"$TMP/m1.txt" >"$TMP/names.txt"
unknown_metrics() { # DASHBOARD: prints the metric names it uses that kvtierctl does not emit
        jq -r '.. | objects | (.expr?, .query?.query?, .definition?) | strings' "$1" |
                grep -o 'kvtier_[a-z0-9_]*' | sort -u | while read -r n; do
                        base=$(sed -E 's/_(bucket|sum|count)$//' <<<"$n")
                        grep -qx "$n" "$TMP/names.txt" ||
                                { [ "$base" != "$n" ] && grep -qx "$base" "$TMP/names.txt" &&
                                  grep -q "^# TYPE $base histogram$" "$TMP/m1.txt"; } || echo "$n"
                done
}
check "the dashboard is valid JSON" jqe '.panels | length > 0' "$DASHBOARD"
unknown=$(unknown_metrics "$DASHBOARD")
check "the dashboard names only metrics kvtierctl metrics emits" [ -z "$unknown" ]
[ -z "$unknown" ] || diag "unknown: $unknown"
check_gt "the dashboard uses that many of them" "$(jq -r '.. | objects | .expr? | strings' "$DASHBOARD" |
        grep -o 'kvtier_[a-z0-9_]*' | sed -E 's/_(bucket|sum|count)$//' | sort -u | wc -l)" 15
check "every panel target has a kvtier expression" \
        jqe '[.panels[] | select(.type != "row") | .targets[] | .expr | test("kvtier_")] | all' "$DASHBOARD"
jq '.panels[1].targets[0].expr = "rate(kvtier_no_such_metric_total[5m])"' "$DASHBOARD" >"$TMP/bad-dashboard.json"
check "the check finds a metric that does not exist" [ "$(unknown_metrics "$TMP/bad-dashboard.json")" = kvtier_no_such_metric_total ]

check "kvtierd stops" stop_daemon
"$KVTIERCTL" -s "$SOCK" metrics >"$TMP/down.txt" 2>/dev/null; rc=$?
check "metrics with kvtierd down exits 0" [ $rc -eq 0 ]
check "and passes the strict format check" "$LINT" <"$TMP/down.txt"
if command -v promtool >/dev/null; then
        check "promtool check metrics is clean with kvtierd down" promcheck "$TMP/down.txt"
else
        ok "# SKIP promtool check metrics with kvtierd down (promtool not installed)"
fi
"$KVTIERCTL" -s "$SOCK" metrics -o "$F" 2>/dev/null; rc=$?
check "metrics --output with kvtierd down exits 0 and writes kvtier_up 0" rc_and $rc grep -qx 'kvtier_up 0' "$F"
check "that file passes the strict format check too" "$LINT" <"$F"
done_testing
