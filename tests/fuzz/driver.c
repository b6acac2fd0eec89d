/* SPDX-License-Identifier: MIT */
/*
 * Stand-alone driver for the fuzz targets, for make check and for replaying
 * a crash found by libFuzzer:
 *
 *   fuzz-X FILE...                       runs each file once
 *   fuzz-X [-n ITERATIONS] [-s SEED] [-l MAX_LEN]
 *                                        runs random inputs, each a mutation of
 *                                        the last one or fresh bytes
 *
 * Deterministic for a given seed.  A broken invariant aborts in the target;
 * the driver first saves the input to fuzz-crash-SEED-ITERATION.bin.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

static uint8_t *cur;
static size_t cur_len;
static unsigned long long seed_used, iteration;

static uint64_t rng_state;

static uint64_t rnd(void) {
        uint64_t x = rng_state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return rng_state = x;
}

/* Saves the input in flight when a target aborts. */
static void on_abort(int sig) {
        char name[96];
        FILE *f;

        snprintf(name, sizeof(name), "fuzz-crash-%llu-%llu.bin", seed_used, iteration);
        f = fopen(name, "wb");
        if (f) {
                fwrite(cur, 1, cur_len, f);
                fclose(f);
                fprintf(stderr, "fuzz: input saved to %s\n", name);
        }
        signal(sig, SIG_DFL);
        raise(sig);
}

static void mutate(size_t max_len) {
        switch (rnd() % 5) {
        case 0: /* fresh */
                cur_len = rnd() % (max_len + 1);
                for (size_t i = 0; i < cur_len; i++)
                        cur[i] = (uint8_t)rnd();
                break;
        case 1: /* flip bits */
                for (unsigned k = 0; cur_len && k < 1 + rnd() % 8; k++)
                        cur[rnd() % cur_len] ^= (uint8_t)(1u << (rnd() % 8));
                break;
        case 2: /* interesting bytes */
                for (unsigned k = 0; cur_len && k < 1 + rnd() % 4; k++) {
                        static const uint8_t v[] = { 0, 1, 0x7f, 0x80, 0xff, '\n', '=', '[', ']', '%' };
                        cur[rnd() % cur_len] = v[rnd() % sizeof(v)];
                }
                break;
        case 3: /* grow */
                while (cur_len < max_len && rnd() % 4)
                        cur[cur_len++] = (uint8_t)rnd();
                break;
        default: /* truncate */
                cur_len = cur_len ? rnd() % cur_len : 0;
                break;
        }
}

static int run_file(const char *path) {
        FILE *f = fopen(path, "rb");
        long n;

        if (!f || fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0) {
                fprintf(stderr, "fuzz: cannot read %s: %s\n", path, strerror(errno));
                return 1;
        }
        free(cur);
        cur = malloc((size_t)n + 1);
        cur_len = cur ? fread(cur, 1, (size_t)n, f) : 0;
        fclose(f);
        LLVMFuzzerTestOneInput(cur, cur_len);
        return 0;
}

int main(int argc, char **argv) {
        unsigned long long n = 10000, seed = 1;
        size_t max_len = 512;
        int c;

        while ((c = getopt(argc, argv, "n:s:l:")) >= 0)
                switch (c) {
                case 'n': n = strtoull(optarg, NULL, 0); break;
                case 's': seed = strtoull(optarg, NULL, 0); break;
                case 'l': max_len = strtoull(optarg, NULL, 0); break;
                default: return 2;
                }
        signal(SIGABRT, on_abort);
        if (optind < argc) {
                for (int i = optind; i < argc; i++)
                        if (run_file(argv[i]))
                                return 1;
                printf("1..1\nok 1 - %d file(s) replayed\n", argc - optind);
                return 0;
        }
        if (max_len == 0 || !(cur = malloc(max_len))) {
                fprintf(stderr, "fuzz: bad -l\n");
                return 2;
        }
        seed_used = seed;
        rng_state = seed * 0x9e3779b97f4a7c15ull | 1;
        for (iteration = 0; iteration < n; iteration++) {
                mutate(max_len);
                LLVMFuzzerTestOneInput(cur, cur_len);
        }
        if (fuzz_report)
                fuzz_report();
        printf("1..1\nok 1 - %llu random inputs (seed %llu, up to %zu bytes), no invariant broken\n", n, seed,
               max_len);
        free(cur);
        return 0;
}
