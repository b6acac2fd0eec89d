# shellcheck shell=bash
# What the device benchmarks (suite-h200.sh, ssd-decode-h200.sh,
# prefill-h200.sh) share, sourced from the carry folder C: a private kvtierd
# per run, and one JSON line per run in a results file.

# bench_setup FILE: what a benchmark's runs use: RET (the folder that comes
# back, $OUT), T (scratch), CTL (kvtierctl), SOCK (the private daemon's
# socket) and R ($RET/FILE, emptied for the JSON lines).
bench_setup() {
        RET=${OUT:-/tmp/kvtier-out}
        T=$(mktemp -d)
        mkdir -p "$RET"
        export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
        CTL=$C/bin/kvtierctl SOCK=$T/kvtierd.sock
        R=$RET/$1
        : >"$R"
}

# bench_start_daemon CONF: kvtierd -c CONF in the background (DPID; its
# output to $RET/kvtierd.log, each line after the wall clock where
# KVT_DAEMON_TS is set); 0 once
# it is the one answering status (a daemon left from an earlier run would
# serve with another configuration), tried once more after a start that did
# not answer.  Up to 60 s each: a first start on a freshly booted machine
# has been seen to take longer than 20 s.
bench_start_daemon() {
        local try t0 why
        for try in 1 2; do
                if [ -n "${KVT_DAEMON_TS:-}" ]; then
                        # each line with the wall clock (time.time(), as
                        # paged_kv.py's phase marks), for residency-report.py
                        "$C/bin/kvtierd" -c "$1" > >(python3 -u -c 'import sys, time
for l in sys.stdin: sys.stdout.write("%.3f %s" % (time.time(), l))' >>"$RET/kvtierd.log") 2>&1 &
                else
                        "$C/bin/kvtierd" -c "$1" >>"$RET/kvtierd.log" 2>&1 &
                fi
                DPID=$!
                t0=$SECONDS
                # By the clock, not a count of tries: seen twice on the GPU
                # machine, a wait of 1200 tries over in under a second with
                # the daemon up (not understood).  why says how it ended.
                why="no answer in 60 s"
                while [ $((SECONDS - t0)) -lt 60 ]; do
                        kill -0 "$DPID" 2>/dev/null || { why="kill -0 $DPID failed"; break; }
                        if [ "$("$CTL" -s "$SOCK" status --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])' 2>/dev/null)" = "$DPID" ]; then
                                [ $((SECONDS - t0)) -lt 5 ] || echo "kvtierd took $((SECONDS - t0)) s to answer" | tee -a "$RET/kvtierd.log"
                                return 0
                        fi
                        sleep 0.05
                done
                # what status said last, to the log that comes back (seen: a
                # daemon that logged "Listening" and was still taken for not started)
                { echo "kvtierd did not answer status in $((SECONDS - t0)) s (try $try, $why; alive: $(kill -0 "$DPID" 2>/dev/null && echo yes || echo no)):"
                  "$CTL" -s "$SOCK" status --json 2>&1 | head -c 600; echo; ls -la "$SOCK" 2>&1; } | tee -a "$RET/kvtierd.log"
                bench_stop_daemon
        done
        return 1
}
# bench_budget_daemon BUDGET: bench_start_daemon with a configuration of
# the socket and the budget only, and KVT_DAEMON_EXTRA (more sections: the
# two-engine runs' [client.*]) and KVT_POLICY_EXTRA ([policy] lines for a
# comparison of settings, never in a defaults run) where set.
bench_budget_daemon() {
        printf '[daemon]\nsocket = %s\n[gpu]\nvram_budget = %s\n' "$SOCK" "$1" >"$T/kvtierd.conf"
        [ -n "${KVT_DAEMON_EXTRA:-}" ] && printf '%b\n' "$KVT_DAEMON_EXTRA" >>"$T/kvtierd.conf"
        [ -n "${KVT_POLICY_EXTRA:-}" ] && printf '[policy]\n%b\n' "$KVT_POLICY_EXTRA" >>"$T/kvtierd.conf"
        echo "-- kvtierd, budget $1" >>"$RET/kvtierd.log"
        bench_start_daemon "$T/kvtierd.conf"
}
bench_stop_daemon() { kill -TERM "$DPID" 2>/dev/null; wait "$DPID" 2>/dev/null; }

# bench_record TAG RC T0 LINE [EXTRA]: appends to $R the run's JSON line
# LINE (else {"error": its tail}), with its tag, exit status and wall time,
# and the keys of the JSON object EXTRA.
bench_record() {
        python3 - "$@" >>"$R" <<'PYEOF'
import json, sys, time
tag, rc, t0, line = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
try:
    d = json.loads(line)
    if not isinstance(d, dict):
        raise ValueError
except ValueError:
    d = {"error": line[-300:] or "no output"}
d.update(tag=tag, rc=rc, wall_s=round(time.time() - t0, 1))
if len(sys.argv) > 5:
    d.update(json.loads(sys.argv[5]))
print(json.dumps(d))
PYEOF
        tail -n 1 "$R" | cut -c1-240
}
