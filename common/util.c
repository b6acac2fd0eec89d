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
