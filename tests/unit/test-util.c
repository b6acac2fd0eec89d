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
        return tap_done();
}
