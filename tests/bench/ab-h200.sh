#!/bin/bash
# Runs of suite-h200.sh side by side, on the GPU machine, for comparing
# binaries or settings in one device call:
#
#   bash .carry/ab-h200.sh "LABEL:CARRY:RUNS[:VAR=V,...]" ...
#
# Each item runs suite-h200.sh from the carry folder CARRY (one built by
# tests/bench/package-suite.sh) with KVT_RUNS="RUNS" into $OUT/LABEL, with
# the environment variables given (KVT_POLICY_EXTRA=...), and prints each
# run's result, the demand counters of its kvtierd's last status, and, for
# runs made with KVTIER_LOG=debug, the shim's runs' times.
set -u
B=${OUT:-/tmp/kvtier-out}
mkdir -p "$B"
for item in "$@"; do
        IFS=: read -r label carry tags envs <<<"$item"
        t0=$(date +%s)
        ( [ -n "$envs" ] && export ${envs//,/ }; OUT=$B/$label KVT_RUNS="$tags" bash "$carry/suite-h200.sh" >"$B/$label.log" 2>&1 )
        echo "== $label ($carry, $(cat "$carry/COMMIT")) $(( $(date +%s) - t0 )) s ${envs}"
        python3 - "$B/$label" <<'PY'
import json, sys, os, tarfile, re, io, statistics as st
d = sys.argv[1]
for l in open(os.path.join(d, "results.jsonl")):
    r = json.loads(l)
    keep = {k: (round(r[k], 3) if isinstance(r[k], float) else r[k]) for k in r if k in ("tag", "rc", "wall_s", "step_ms", "pool_sum", "ttft_s", "decode_ms_per_token", "decode_total_ms_per_token", "full_prefill_s", "ids_sha", "vram_peak_bytes", "error")}
    print(" ", json.dumps(keep))
tf = os.path.join(d, "logs.tar.gz")
if not os.path.exists(tf):
    sys.exit()
t = tarfile.open(tf)
for m in t.getmembers():
    n = os.path.basename(m.name)
    if n.startswith("status-") and n.endswith(".json") and not re.search(r"\.\d+\.json$", n):  # not the polls
        try:
            s = json.load(t.extractfile(m))
        except Exception:
            continue
        for g in s.get("gpus", []):
            mv = g.get("moves", {}); dm = g.get("demand", {})
            av = lambda x: round(x["sum_ns"] / x["orders"] / 1e6, 1) if x.get("orders") else None
            print("  ", n, "to_host", mv.get("to_host", {}).get("orders"), "avg", av(mv.get("to_host", {})), "ms; to_vram",
                  mv.get("to_vram", {}).get("orders"), "avg", av(mv.get("to_vram", {})), "ms;",
                  {k: dm.get(k) for k in ("rearmed_chunks", "rearm_ms", "probes", "probe_ms", "probes_back", "evictions_avoided", "demand_faults", "refaults", "protect_ms", "own_maps_ignored")},
                  "hit", g.get("vram_hit_rate"))
    if n == "runs.log":
        runs = {}
        for line in io.TextIOWrapper(t.extractfile(m), errors="replace"):
            x = re.search(r"Run of (\d+) MiB to (\S+) \(map (\d)\): ([\d.]+) ms queued, ([\d.]+) ms advised, ([\d.]+) ms moved", line)
            if x:
                runs.setdefault(("map" + x[3]), []).append((int(x[1]), float(x[4]), float(x[5]), float(x[6])))
                continue
            x = re.search(r"Run of (\d+) MiB to vram: ([\d.]+) ms", line)
            if x:
                runs.setdefault("vram", []).append((int(x[1]), 0, 0, float(x[2])))
        for k, v in sorted(runs.items()):
            q = [a[1] for a in v]; ad = [a[2] for a in v]; mo = [a[3] for a in v]; mib = [a[0] for a in v]
            print("   runs", k, "n", len(v), "MiB avg", round(st.mean(mib), 1), "queued avg/p50/max", round(st.mean(q), 1), round(st.median(q), 1), round(max(q), 1),
                  "advised avg", round(st.mean(ad), 1), "moved avg/p50/max", round(st.mean(mo), 1), round(st.median(mo), 1), round(max(mo), 1))
PY
done
