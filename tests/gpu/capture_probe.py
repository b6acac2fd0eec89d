#!/usr/bin/env python3
"""Which allocation paths of real frameworks the shim captures.

Allocates --mib MiB through a framework, computes a checksum on the GPU,
asks kvtierctl (--ctl) how many regions the daemon lists for this process,
and prints one JSON line: framework, checksum, regions, reported memory.
Run with and without LD_PRELOAD=libkvtier.so and compare checksums.
"""
import argparse, json, os, subprocess


def regions(ctl):
    """Regions the daemon lists for this process, as "api/rule[/untiered]" with counts."""
    if not ctl:
        return None
    st = json.loads(subprocess.run([ctl, "status", "--json"], capture_output=True, text=True, check=True).stdout)
    seen = {}
    for c in st["clients"]:
        if c["pid"] != os.getpid():
            continue
        for r in c["regions"]:
            k = "%s/%s%s" % (r.get("api"), r.get("rule"), "/untiered" if r.get("untiered") else "")
            seen[k] = seen.get(k, 0) + 1
    return seen


def run_torch(mib):
    import torch
    g = torch.Generator(device="cuda").manual_seed(5)
    x = torch.empty(mib << 18, dtype=torch.float32, device="cuda")  # mib MiB
    x.uniform_(generator=g)
    s = float(x.double().sum().item())
    free, total = torch.cuda.mem_get_info()
    return x, s, {"free": free, "total": total}


def run_cupy(mib):
    import cupy as cp
    x = cp.arange(mib << 18, dtype=cp.float32) % 977
    s = float(x.sum(dtype=cp.float64))
    free, total = cp.cuda.runtime.memGetInfo()
    return x, s, {"free": free, "total": total}


def run_jax(mib):
    import jax, jax.numpy as jnp
    x = jnp.arange(mib << 18, dtype=jnp.float32) % 977
    s = float(jnp.sum(x.astype(jnp.float32)))
    return x, s, {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", choices=["torch", "cupy", "jax"], required=True)
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--ctl")
    a = ap.parse_args()
    x, s, mem = {"torch": run_torch, "cupy": run_cupy, "jax": run_jax}[a.framework](a.mib)
    print(json.dumps({"framework": a.framework, "checksum": s, "regions": regions(a.ctl), **mem}))
    del x


if __name__ == "__main__":
    main()
