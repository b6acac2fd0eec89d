# SPDX-License-Identifier: MIT
"""Tests of the kvtier package.  Without the shim (the default) they check the
no-op behaviour; with KVTIER_TEST_SHIM=1 the process must run under
LD_PRELOAD=libkvtier.so with a kvtierd that has an SSD tier
(tests/integration/python.sh sets that up)."""

import os
import random
import unittest

import kvtier

UNDER_SHIM = os.environ.get("KVTIER_TEST_SHIM") == "1"


@unittest.skipIf(UNDER_SHIM, "the shim is loaded")
class WithoutShim(unittest.TestCase):
    def test_not_available(self):
        self.assertFalse(kvtier.available())
        self.assertFalse(kvtier.ssd_available())

    def test_hint_is_a_noop(self):
        self.assertEqual(kvtier.hint(0x1000, 4096, kvtier.HOT), kvtier.NOT_AVAILABLE)

    def test_ssd_says_not_available(self):
        buf = bytearray(4096)
        with self.assertRaises(kvtier.NotAvailableError) as cm:
            kvtier.spill(buf)
        self.assertEqual(cm.exception.rc, kvtier.NOT_AVAILABLE)
        for f in (kvtier.restore_wait, kvtier.drop, kvtier.readahead, kvtier.query):
            with self.assertRaises(kvtier.NotAvailableError):
                f(1)
        with self.assertRaises(kvtier.NotAvailableError):
            kvtier.restore(1, None)


@unittest.skipUnless(UNDER_SHIM, "needs the shim and a kvtierd with an SSD tier")
class UnderShim(unittest.TestCase):
    def test_available(self):
        self.assertTrue(kvtier.available())
        self.assertTrue(kvtier.ssd_available())

    def test_hint_of_uncaptured_memory(self):
        self.assertEqual(kvtier.hint(0x1000, 4096, kvtier.HOT), -2)  # -ENOENT

    def test_round_trip(self):
        rnd = random.Random(20)
        for size in (1, 4095, 4096, 1 << 20, (3 << 20) + 17, 40 << 20):
            data = bytes(rnd.getrandbits(8) for _ in range(min(size, 4096))) * (size // 4096 + 1)
            buf = bytearray(data[:size])
            want = bytes(buf)
            h = kvtier.spill(buf)
            info = kvtier.query(h)
            self.assertEqual((info.size_bytes, info.state), (size, kvtier.SPILLED))
            buf[:] = b"\0" * size
            kvtier.restore(h)
            kvtier.restore_wait(h)
            self.assertEqual(kvtier.query(h).state, kvtier.RESTORED)
            self.assertTrue(bytes(buf) == want, "size %d" % size)
            kvtier.drop(h)
            with self.assertRaises(kvtier.KvtierError):
                kvtier.query(h)

    def test_readahead_then_restore(self):
        buf = bytearray(os.urandom(5 << 20))
        want = bytes(buf)
        h = kvtier.spill((buf, len(buf)))
        kvtier.readahead(h)
        kvtier.restore(h, None)
        kvtier.restore_wait(h)
        self.assertTrue(bytes(buf) == want)
        kvtier.drop(h)

    def test_bad_handle(self):
        with self.assertRaises(kvtier.KvtierError) as cm:
            kvtier.drop(123456789)
        self.assertEqual(cm.exception.errno, 2)

    def test_quota(self):
        big = int(os.environ.get("KVTIER_TEST_OVER_QUOTA", "0"))
        if not big:
            self.skipTest("no quota set")
        with self.assertRaises(kvtier.QuotaError):
            kvtier.spill(bytearray(big))


if __name__ == "__main__":
    unittest.main()
