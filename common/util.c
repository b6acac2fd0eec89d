/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "util.h"

int parse_bytes(const char *s, uint64_t *ret_bytes) {
        static const char units[] = "KMGTP";
        char *end;
        double v;
        uint64_t mult = 1;

        if (!s || !isdigit((unsigned char)*s))
                return -EINVAL;
        errno = 0;
        v = strtod(s, &end);
        if (errno || end == s)
                return -EINVAL;
        if (*end) {
                const char *u = strchr(units, toupper((unsigned char)*end));
                if (!u)
                        return -EINVAL;
                mult = 1ull << (10 * (u - units + 1));
                end++;
                if (strcasecmp(end, "") != 0 && strcasecmp(end, "B") != 0 && strcasecmp(end, "iB") != 0)
                        return -EINVAL;
        }
        v *= (double)mult;
        if (!isfinite(v) || v >= 18446744073709551615.0)
                return -ERANGE;
        if (v != floor(v))
                return -EINVAL; /* a fraction of a byte */
        *ret_bytes = (uint64_t)v;
        return 0;
}

int parse_percent(const char *s, unsigned *ret_percent) {
        char *end;
        unsigned long v;

        if (!strchr(s, '%'))
                return -ENOENT;
        if (!isdigit((unsigned char)*s))
                return -EINVAL;
        errno = 0;
        v = strtoul(s, &end, 10);
        if (errno || strcmp(end, "%") != 0 || v == 0 || v > 100)
                return -EINVAL;
        *ret_percent = (unsigned)v;
        return 0;
}

char *format_bytes(char *buf, size_t len, uint64_t bytes) {
        static const char units[] = "BKMGTP";
        double v = (double)bytes;
        size_t u = 0;

        while (v >= 1024.0 && u + 1 < sizeof(units) - 1) {
                v /= 1024.0;
                u++;
        }
        if (u == 0)
                snprintf(buf, len, "%llu", (unsigned long long)bytes);
        else
                snprintf(buf, len, "%.1f%c", v, units[u]);
        return buf;
}

uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void realtime_after_ns(struct timespec *ret, uint64_t ns) {
        clock_gettime(CLOCK_REALTIME, ret);
        ret->tv_sec += (time_t)(ns / 1000000000ull);
        ret->tv_nsec += (long)(ns % 1000000000ull);
        if (ret->tv_nsec >= 1000000000L) {
                ret->tv_sec++;
                ret->tv_nsec -= 1000000000L;
        }
}

int kvt_thread_create(pthread_t *ret, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
        static const int faults[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS };
        sigset_t quiet, old;
        int r;

        sigfillset(&quiet);
        for (size_t i = 0; i < ELEMENTSOF(faults); i++)
                sigdelset(&quiet, faults[i]);
        pthread_sigmask(SIG_SETMASK, &quiet, &old);
        r = -pthread_create(ret, attr, fn, arg);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return r;
}

/* Length of the valid UTF-8 character at s (1..4), 0 when it is not one,
 * or a C1 control (U+0080..U+009F: CSI and friends for some terminals). */
static size_t utf8_char_len(const unsigned char *s) {
        unsigned char c = s[0];
        size_t n;
        unsigned char lo = 0x80, hi = 0xbf;

        if (c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf)
                n = 2;
        else if (c >= 0xe0 && c <= 0xef)
                n = 3;
        else if (c >= 0xf0 && c <= 0xf4)
                n = 4;
        else
                return 0;
        /* overlong forms, surrogates and code points past U+10FFFF */
        if (c == 0xe0)
                lo = 0xa0;
        else if (c == 0xed)
                hi = 0x9f;
        else if (c == 0xf0)
                lo = 0x90;
        else if (c == 0xf4)
                hi = 0x8f;
        if (s[1] < lo || s[1] > hi)
                return 0;
        for (size_t i = 2; i < n; i++)
                if (s[i] < 0x80 || s[i] > 0xbf)
                        return 0;
        if (c == 0xc2 && s[1] <= 0x9f)
                return 0;
        return n;
}

/* Writes the escape of the byte or character at s into out (room for 5);
 * returns its length and sets *ret_used to the input bytes it covers. */
static size_t escape_one(const unsigned char *s, bool backslash, char out[5], size_t *ret_used) {
        size_t n = utf8_char_len(s);

        *ret_used = n ? n : 1;
        if (n > 1) {
                memcpy(out, s, n);
                return n;
        }
        switch (s[0]) {
        case '\n':
                memcpy(out, "\\n", 2);
                return 2;
        case '\r':
                memcpy(out, "\\r", 2);
                return 2;
        case '\t':
                memcpy(out, "\\t", 2);
                return 2;
        case '\\':
                if (!backslash)
                        break;
                memcpy(out, "\\\\", 2);
                return 2;
        default:
                if (n == 1 && s[0] >= 0x20 && s[0] != 0x7f)
                        break;
                snprintf(out, 5, "\\x%02x", s[0]);
                return 4;
        }
        out[0] = (char)s[0];
        return 1;
}

static char *escape(const char *s, char *buf, size_t size, bool backslash) {
        const unsigned char *p = (const unsigned char *)s;
        size_t len = 0;

        if (size == 0)
                return buf;
        while (*p) {
                char out[5];
                size_t used, n = escape_one(p, backslash, out, &used);

                if (len + n >= size)
                        break;
                memcpy(buf + len, out, n);
                len += n;
                p += used;
        }
        buf[len] = '\0';
        return buf;
}

char *kvt_escape(const char *s, char *buf, size_t size) {
        return escape(s, buf, size, true);
}

char *kvt_escape_controls(const char *s, char *buf, size_t size) {
        return escape(s, buf, size, false);
}

bool kvt_escape_needed(const char *s) {
        for (const unsigned char *p = (const unsigned char *)s; *p;) {
                char out[5];
                size_t used, n = escape_one(p, true, out, &used);

                if (n != used || (n == 1 && out[0] != (char)*p))
                        return true;
                p += used;
        }
        return false;
}

bool ratelimit_below(struct ratelimit *rl, uint64_t now_ns, unsigned *ret_suppressed) {
        if (ret_suppressed)
                *ret_suppressed = 0;
        if (rl->interval_ns == 0)
                return true;
        if (rl->begin_ns == 0 || now_ns - rl->begin_ns >= rl->interval_ns) {
                if (ret_suppressed)
                        *ret_suppressed = rl->suppressed;
                rl->begin_ns = now_ns ? now_ns : 1;
                rl->n = 0;
                rl->suppressed = 0;
        }
        if (rl->n < rl->burst) {
                rl->n++;
                return true;
        }
        rl->suppressed++;
        return false;
}
