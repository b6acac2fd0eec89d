#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where a paged_kv.py run under kvtier kept its hot and cold KV, from a
suite run's logs (tests/bench/suite-h200.sh with KVT_STATUS_JSON=1 and,
for the orders, KVT_DAEMON_TS=1 and [daemon] log_level = debug):

    residency-report.py [--sessions 64] [--hot 8] [--session-chunks 8]
                        [--pool-bytes 1073741824] [--client SECTION]
                        [--unseen-polls 8] DIR TAG

DIR holds status-TAG.N.json (the daemon's status every poll), kvtierd.log
and runs.log: of the last two, the lines under "== TAG" where the suite
heads each run's lines so.  TAG.rK is the K-th run of TAG in one suite
(its polls status-TAG.rK.N.json, its lines under the K-th "== TAG").
--client counts only the regions of the client of that [client.NAME]
section (the two-engine pairs: hi, lo), and places the snapshots by the
phase marks of that client's engine alone (paged_kv.py's marks name their
pid; the status, each client's); it leaves the orders out, since a region's
id is its client's and the daemon's order lines name no client.  A pool is a region of --pool-bytes; with the
contiguous layout, chunk i of a pool belongs to session i //
--session-chunks, and the hot sessions are paged_kv.py's (k * sessions //
hot for k < hot).

Prints, per snapshot, the pools' hot chunks in VRAM and read in place, their
cold chunks in VRAM, the other regions' chunks in VRAM (a region whose map
the daemon cut short is left out, and said so) and the engine's phase at
the time; the hot chunks booked in host memory unmapped ("H": their next
use should fault and be seen) in --unseen-polls polls or more in a row,
which the engine reads unseen; then the chunks the daemon's orders named (promoted, evicted,
probed, re-armed), hot, cold and other, by the engine's phase.  Phases come
from paged_kv.py's marks in runs.log and need kvtierd.log's lines to carry
the wall clock; without, the snapshots have none and the orders count for
the whole run.
"""
import argparse
import glob
import json
import os
import re
import sys

ORDER = re.compile(r"^(?:(\d+\.\d+) )?kvtierd: Order \d+: region (\d+) chunks (\d+)\+(\d+) "
                   r"(to vram|to host-mapped|to host|probed|re-armed)\.$")
MARK = re.compile(r"^paged_kv: (.*) at (\d+\.\d+)(?: pid (\d+))?$")
REPEAT = re.compile(r"^(.*)\.r(\d+)$")
STAMP = re.compile(r"^(\d+\.\d+) kvtierd: ")
# paged_kv.py's marks, in the order they come, and the phase each starts
PHASES = [("pools filled", "set-up"), ("warm-up starts", "warm-up"), ("measured turns start", "measured"),
          ("measured turns end", "after")]
PHASE_OF = dict(PHASES)


def chunk_list(chunk_map):
    """daemon/status.c's run-length map ("V16 M240 -256") as one letter a chunk."""
    out = []
    for tok in chunk_map.split():
        out.extend(tok[0] * int(tok[1:]))
    return out


def snapshots(d, tag):
    """status-TAG.N.json in d by N (not those of TAG.rK, a repeat's)."""
    prefix = "status-%s." % tag
    keyed = []
    for f in glob.glob(os.path.join(d, glob.escape(prefix) + "*.json")):
        n = os.path.basename(f)[len(prefix):-len(".json")]
        if n.isdigit():
            keyed.append((int(n), f))
    return [f for _, f in sorted(keyed)]


def section(d, name, tag):
    """The lines of file name in d under the K-th "== TAG" for TAG.rK, the
    first for TAG (the suite heads each run's lines so), or all of them
    where it heads none."""
    try:
        lines = open(os.path.join(d, name), errors="replace").read().splitlines()
    except OSError:
        return []
    if not any(x.startswith("== ") for x in lines):
        return lines
    m = REPEAT.match(tag)
    head, k = (m.group(1), int(m.group(2))) if m else (tag, 1)
    out, seen, mine = [], 0, False
    for line in lines:
        if line.startswith("== "):
            seen += line[3:].strip() == head
            mine = line[3:].strip() == head and seen == k
        elif mine:
            out.append(line)
    return out


def marks(lines, pid=None):
    """paged_kv.py's phase marks among lines: [(time, phase)]; those of
    process pid where it is given."""
    out = []
    for line in lines:
        m = MARK.match(line)
        if m and m.group(1) in PHASE_OF and (pid is None or m.group(3) == str(pid)):
            out.append((float(m.group(2)), PHASE_OF[m.group(1)]))
    return out


def phase_at(ms, t):
    phase = "before fill"
    for at, p in ms:
        if t >= at:
            phase = p
    return phase


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--hot", type=int, default=8)
    ap.add_argument("--session-chunks", type=int, default=8)
    ap.add_argument("--pool-bytes", type=int, default=1 << 30)
    ap.add_argument("--client", metavar="SECTION", help="only the client of this [client.NAME] section")
    ap.add_argument("--unseen-polls", type=int, default=8, metavar="N",
                    help="count the hot chunks booked in host memory unmapped in N polls or more in a row")
    ap.add_argument("dir")
    ap.add_argument("tag")
    a = ap.parse_args()
    if not 0 < a.hot <= a.sessions or a.session_chunks <= 0:
        ap.error("need 0 < --hot <= --sessions and --session-chunks > 0")
    hot = {k * a.sessions // a.hot for k in range(a.hot)}

    def is_hot(i):
        return i // a.session_chunks in hot

    files = snapshots(a.dir, a.tag)
    if not files:
        sys.exit("no status-%s.N.json in %s" % (a.tag, a.dir))
    def mine(c):
        return a.client is None or c.get("section") == a.client

    pid = None
    if a.client is not None:
        for f in files:
            with open(f) as fh:
                pid = next((c.get("pid") for c in json.load(fh).get("clients", []) if mine(c)), None)
            if pid is not None:
                break
        if pid is None:
            sys.exit("no client of section %s in the status of %s" % (a.client, a.tag))
    ms = marks(section(a.dir, "runs.log", a.tag), pid)
    if pid is not None and not ms:
        print("(no phase marks of pid %s: marks without a pid are not told apart, phases not placed)" % pid)
    log = section(a.dir, "kvtierd.log", a.tag)
    # the daemon's start by the wall clock: its first stamped line (a snapshot
    # is then that plus its uptime_ms, to within the daemon's start-up)
    started = next((float(m.group(1)) for m in map(STAMP.match, log) if m), None)
    sizes = {}
    cut = 0
    # hot chunks booked H (host memory, unmapped: a use should fault and be
    # seen) in polls in a row: now, and the longest, by (region, chunk)
    streak, longest = {}, {}
    print("snapshot  pool hot in VRAM  hot read in place  cold in VRAM  other in VRAM  held back  phase"
          + ("  (held back: all clients')" if a.client is not None else ""))
    for n, f in enumerate(files):
        with open(f) as fh:
            st = json.load(fh)
        hv = hn = hr = cv = ov = 0
        for c in st.get("clients", []):
            for r in c.get("regions", []):
                if not mine(c):
                    continue
                sizes[r["region_id"]] = r["size_bytes"]
                m = r.get("chunk_map")
                if not m or r.get("chunk_map_truncated"):
                    cut += 1
                    continue
                ch = chunk_list(m)
                if r["size_bytes"] != a.pool_bytes:
                    ov += sum(x in "Vv" for x in ch)
                    continue
                for i, x in enumerate(ch):
                    if is_hot(i):
                        hn += 1
                        hv += x in "Vv"
                        hr += x in "Rr"
                        k = (r["region_id"], i)
                        streak[k] = streak.get(k, 0) + 1 if x == "H" else 0
                        longest[k] = max(longest.get(k, 0), streak[k])
                    else:
                        cv += x in "Vv"
        held = sum(g.get("demand", {}).get("held_bytes", 0) for g in st.get("gpus", [])) >> 20
        phase = phase_at(ms, started + st["uptime_ms"] / 1e3) if started and ms and "uptime_ms" in st else "-"
        print("%8d  %9d / %-5d  %17d  %12d  %13d  %7d MiB  %s" % (n, hv, hn, hr, cv, ov, held, phase))

    if cut:
        print("(%d maps missing or cut short in all: those regions not counted)" % cut)
    # a hot chunk the engine reads every step, booked unmapped, would fault
    # and come in: one that stays H poll after poll is read unseen
    unseen = sorted(k for k, v in longest.items() if v >= a.unseen_polls)
    print("hot chunks booked in host memory unmapped (H) in %d polls or more in a row: %d%s"
          % (a.unseen_polls, len(unseen),
             " (the longest %d polls), in regions %s" % (max(longest[k] for k in unseen),
                                                        ", ".join(str(r) for r in sorted({k[0] for k in unseen})))
             if unseen else ""))

    if a.client is not None:
        # a region's id is its client's: the daemon's order lines name no client
        print("\n(--client: the orders are not counted, their lines name no client)")
        return
    counts = {}
    for line in log:
        m = ORDER.match(line)
        if not m:
            continue
        ts, reg, first, n, what = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5)
        phase = phase_at(ms, float(ts)) if ts is not None and ms else "whole run"
        row = counts.setdefault((phase, what), [0, 0, 0])
        if sizes.get(reg) != a.pool_bytes:
            row[2] += n
            continue
        h = sum(1 for i in range(first, first + n) if is_hot(i))
        row[0] += h
        row[1] += n - h
    if not counts:
        print("\nno orders in kvtierd.log (the daemon's log_level debug names them)")
        return
    if started is None or not ms:
        print("\n(kvtierd.log without the wall clock, or no phase marks: the whole run in one)")
    print("\nchunks named by orders   phase        hot   cold  other")
    order = ["before fill"] + [p for _, p in PHASES] + ["whole run"]
    for (phase, what) in sorted(counts, key=lambda k: (order.index(k[0]), k[1])):
        h, c, o = counts[(phase, what)]
        print("%-24s %-10s %6d %6d %6d" % (what, phase, h, c, o))


if __name__ == "__main__":
    main()
