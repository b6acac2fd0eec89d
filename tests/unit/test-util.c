/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>

#include "tap.h"
#include "util.h"

static void bytes_ok(const char *s, uint64_t want) {
        uint64_t v = 0;
        int r = parse_bytes(s, &v);

        TAP_OK(r == 0 && v == want, "parse_bytes(\"%s\") = %llu", s, (unsigned long long)want);
        if (r || v != want)
                TAP_DIAG("got r=%d v=%llu", r, (unsigned long long)v);
}

static void bytes_bad(const char *s, int want) {
        uint64_t v = 0;

        TAP_EQ_INT(parse_bytes(s, &v), want, "parse_bytes(\"%s\") rejected", s);
}

/* Peer strings: nothing a terminal or a log reader acts on survives. */
static void test_escape(void) {
        char buf[64];

        TAP_EQ_STR(kvt_escape("vllm", buf, sizeof(buf)), "vllm", "escape: plain text unchanged");
        TAP_EQ_STR(kvt_escape("a\n<3>kvtierd: FORGED", buf, sizeof(buf)), "a\\n<3>kvtierd: FORGED",
                   "escape: a newline cannot start a log line");
        TAP_EQ_STR(kvt_escape("\x1b[2J\a\r\x7f", buf, sizeof(buf)), "\\x1b[2J\\x07\\r\\x7f",
                   "escape: ESC, BEL, CR, DEL");
        TAP_EQ_STR(kvt_escape("a\\b", buf, sizeof(buf)), "a\\\\b", "escape: a backslash is doubled");
        TAP_EQ_STR(kvt_escape_controls("a\\b\n", buf, sizeof(buf)), "a\\b\\n",
                   "escape_controls: a backslash stays, a newline does not");
        TAP_EQ_STR(kvt_escape("caf\xc3\xa9", buf, sizeof(buf)), "caf\xc3\xa9", "escape: UTF-8 passes");
        TAP_EQ_STR(kvt_escape("\xc2\x9b[m", buf, sizeof(buf)), "\\xc2\\x9b[m",
                   "escape: a C1 control (CSI) is escaped");
        TAP_EQ_STR(kvt_escape("\xff\xc3(\xe0\x80\x80\xed\xa0\x80", buf, sizeof(buf)),
                   "\\xff\\xc3(\\xe0\\x80\\x80\\xed\\xa0\\x80",
                   "escape: invalid, overlong and surrogate bytes");
        TAP_EQ_STR(kvt_escape("ab\x1b", buf, 6), "ab", "escape: cut at a whole escape");
        TAP_OK(!kvt_escape_needed("kv-engine caf\xc3\xa9"), "escape_needed: no for text");
        TAP_OK(kvt_escape_needed("a=b\n"), "escape_needed: yes for a newline");
        TAP_OK(kvt_escape_needed("a\\b"), "escape_needed: yes for a backslash");
}

static void test_ratelimit(void) {
        struct ratelimit rl = {.interval_ns = 1000, .burst = 2};
        unsigned sup = 99, n = 0;

        for (int i = 0; i < 5; i++)
                n += ratelimit_below(&rl, 100 + (uint64_t)i, &sup);
        TAP_EQ_INT(n, 2, "ratelimit: a burst of 2 in the interval");
        TAP_OK(ratelimit_below(&rl, 1200, &sup) && sup == 3, "ratelimit: the next interval says 3 suppressed");
        TAP_OK(ratelimit_below(&(struct ratelimit){0}, 5, NULL), "ratelimit: interval 0 is no limit");
}

int main(void) {
        unsigned pct = 0;
        char buf[32];

        bytes_ok("0", 0);
        bytes_ok("4096", 4096);
        bytes_ok("64K", 64 << 10);
        bytes_ok("64M", 64 << 20);
        bytes_ok("64MiB", 64 << 20);
        bytes_ok("8G", 8ull << 30);
        bytes_ok("8gb", 8ull << 30);
        bytes_ok("1.5G", 3ull << 29);
        bytes_ok("2T", 2ull << 40);
        bytes_bad("", -EINVAL);
        bytes_bad("M", -EINVAL);
        bytes_bad("-1", -EINVAL);
        bytes_bad("12Q", -EINVAL);
        bytes_bad("12MX", -EINVAL);
        bytes_bad("0.5", -EINVAL);
        bytes_bad("99999999P", -ERANGE);
        TAP_EQ_INT(parse_percent("80%", &pct), 0, "80%% parses");
        TAP_EQ_INT(pct, 80, "80%% is 80");
        TAP_EQ_INT(parse_percent("80", &pct), -ENOENT, "no %% sign: not a percentage");
        TAP_EQ_INT(parse_percent("0%", &pct), -EINVAL, "0%% rejected");
        TAP_EQ_INT(parse_percent("101%", &pct), -EINVAL, "101%% rejected");
        TAP_EQ_INT(parse_percent("5%%", &pct), -EINVAL, "trailing junk rejected");
        TAP_EQ_STR(format_bytes(buf, sizeof(buf), 512), "512", "plain bytes");
        TAP_EQ_STR(format_bytes(buf, sizeof(buf), 64 << 20), "64.0M", "mebibytes");
        TAP_EQ_STR(format_bytes(buf, sizeof(buf), 3ull << 29), "1.5G", "gibibytes");
        test_escape();
        test_ratelimit();
        return tap_done();
}
