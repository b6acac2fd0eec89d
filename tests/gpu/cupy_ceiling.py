"""The capture ceiling (issue 18, row 11) as CuPy's own tests meet it.

CuPy's TestMemoryAsyncPool::test_free_all_blocks_large_chunk and
::test_interaction_with_CuPy_default_pool allocate most of what
cudaMemGetInfo calls the card, then more, and expect CuPy's
OutOfMemoryError: an engine's own out-of-memory handling must still fire
under the shim.  This is the same sequence, for both pools:

  1. a block of 70% of the total, which must succeed;
  2. a second block of 40%, which must fail with OutOfMemoryError;
  3. the pool's blocks freed, a block of 70% again, which must succeed
     (the refused allocation left nothing behind).

Run under the shim with KVTIER_CAPACITY=auto (the total is the daemon's VRAM
budget plus its host grant) and a small budget: never more managed memory
than that at once.  Prints one JSON line per pool; exits 1 if any step
differs from what plain CUDA does.
"""
import json
import sys

import cupy


def one(name, pool):
    cupy.cuda.set_allocator(pool.malloc)
    free, total = cupy.cuda.Device().mem_info
    res = {"pool": name, "total": total, "free": free}
    try:
        a = cupy.empty(int(total * 0.7), dtype=cupy.uint8)
        a[:] = 1
        res["first"] = "ok"
    except cupy.cuda.memory.OutOfMemoryError:
        res["first"] = "oom"
        return res
    try:
        b = cupy.empty(int(total * 0.4), dtype=cupy.uint8)
        b[:] = 2
        res["second"] = "ok"
        del b
    except cupy.cuda.memory.OutOfMemoryError:
        res["second"] = "oom"
    res["first_intact"] = bool(int(a[:: 1 << 20].sum()) == a[:: 1 << 20].size)
    del a
    cupy.cuda.Stream.null.synchronize()
    pool.free_all_blocks()
    try:
        c = cupy.empty(int(total * 0.7), dtype=cupy.uint8)
        c[:] = 3
        cupy.cuda.Stream.null.synchronize()
        res["again"] = "ok"
        del c
    except cupy.cuda.memory.OutOfMemoryError:
        res["again"] = "oom"
    pool.free_all_blocks()
    return res


def main():
    ok = True
    for name, pool in (("async", cupy.cuda.MemoryAsyncPool()), ("default", cupy.get_default_memory_pool())):
        r = one(name, pool)
        r["as_plain_cuda"] = r.get("first") == "ok" and r.get("second") == "oom" and r.get("again") == "ok" and \
            r.get("first_intact", False)
        ok &= r["as_plain_cuda"]
        print(json.dumps(r), flush=True)
    cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
