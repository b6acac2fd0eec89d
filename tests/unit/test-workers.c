/* SPDX-License-Identifier: MIT */
/*
 * The planner's pool (daemon/workers.c): every part of a job runs exactly
 * once, its writes are the caller's to read when the job returns, parts run
 * side by side on the pool's threads, jobs follow each other on the same
 * threads, and a pool of one runs everything on the caller.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "tap.h"
#include "workers.h"

#define PARTS_MAX 64u

struct job {
        unsigned runs[PARTS_MAX]; /* plain writes, one slot per part */
        pthread_t on[PARTS_MAX];  /* the thread each part ran on */
        uint64_t sum[PARTS_MAX];
        atomic_uint arrived; /* side by side: parts that have started */
        unsigned together;   /* ... and must all have, before any returns */
        bool met[PARTS_MAX];
};

static void part_count(void *arg, unsigned part) {
        struct job *j = arg;

        j->runs[part]++;
        j->on[part] = pthread_self();
        for (unsigned i = 0; i <= part * 1000; i++)
                j->sum[part] += i;
}

/* Waits (up to 5 s) until j->together parts have started. */
static void part_meet(void *arg, unsigned part) {
        struct job *j = arg;
        struct timespec t0, t;

        atomic_fetch_add(&j->arrived, 1);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do {
                if (atomic_load(&j->arrived) >= j->together) {
                        j->met[part] = true;
                        return;
                }
                clock_gettime(CLOCK_MONOTONIC, &t);
        } while (t.tv_sec - t0.tv_sec < 5);
}

/* Runs n_parts of part_count on w; whether each ran once with its result. */
static bool job_ok(struct workers *w, unsigned n_parts, struct job *j) {
        memset(j, 0, sizeof(*j));
        workers_run(w, part_count, j, n_parts);
        for (unsigned p = 0; p < PARTS_MAX; p++)
                if (j->runs[p] != (p < n_parts) ||
                    (p < n_parts && j->sum[p] != (uint64_t)p * 1000 * (p * 1000 + 1) / 2))
                        return false;
        return true;
}

static void test_sizes(void) {
        unsigned aut = workers_threads_for(0);

        TAP_EQ_INT(workers_threads_for(1), 1, "sizes: 1 is 1");
        TAP_EQ_INT(workers_threads_for(5), 5, "sizes: 5 is 5, CPUs or not");
        TAP_EQ_INT(workers_threads_for(99), POLICY_THREADS_MAX, "sizes: at most POLICY_THREADS_MAX");
        TAP_OK(aut >= 1 && aut <= POLICY_THREADS_AUTO_MAX, "sizes: auto is %u, 1 .. POLICY_THREADS_AUTO_MAX",
               aut);
        TAP_OK(workers_free(NULL) == NULL, "sizes: workers_free(NULL)");
}

static void test_one(void) {
        struct workers *w = NULL;
        static struct job j;
        bool on_caller = true;

        TAP_EQ_INT(workers_new(0, &w), 0, "one: a pool for 0 threads");
        TAP_EQ_INT(workers_n(w), 1, "one: is the caller alone");
        TAP_EQ_INT(workers_policy(w)->n, 1, "one: as the policy sees it");
        TAP_OK(job_ok(w, 7, &j), "one: 7 parts, each once");
        for (unsigned p = 0; p < 7; p++)
                on_caller &= pthread_equal(j.on[p], pthread_self()) != 0;
        TAP_OK(on_caller, "one: all on the calling thread");
        workers_free(w);
}

static void test_four(void) {
        static const unsigned parts[] = {0, 1, 2, 3, 4, 5, 16, PARTS_MAX};
        struct workers *w = NULL;
        static struct job j;
        unsigned bad = 0;
        bool ok = true;

        TAP_EQ_INT(workers_new(4, &w), 0, "four: a pool of 4");
        TAP_EQ_INT(workers_n(w), 4, "four: 3 threads started beside the caller");
        for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
                ok &= job_ok(w, parts[i], &j);
        TAP_OK(ok, "four: 0 to %u parts, each once, results visible", PARTS_MAX);
        for (unsigned i = 0; i < 2000; i++)
                bad += !job_ok(w, 1 + i % 8, &j);
        TAP_EQ_INT(bad, 0, "four: 2000 jobs in a row on the same threads");

        memset(&j, 0, sizeof(j));
        j.together = 4;
        workers_run(w, part_meet, &j, 4);
        TAP_OK(j.met[0] && j.met[1] && j.met[2] && j.met[3], "four: 4 parts ran side by side");
        workers_free(w);
}

int main(void) {
        test_sizes();
        test_one();
        test_four();
        return tap_done();
}
