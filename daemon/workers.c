/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "workers.h"

/* A pass's part touches no deep stack: 256 KiB instead of glibc's 8 MiB
 * default keeps 15 idle threads' reservations small. */
#define WORKER_STACK_BYTES (256u * 1024)

struct workers {
        struct policy_workers policy; /* .pool = this */
        pthread_mutex_t lock;
        pthread_cond_t wake; /* a job's parts to take, or stop */
        pthread_cond_t done; /* the job's last part returned */
        /* The job, under lock: parts [next, n_parts) not yet taken, left not yet returned. */
        void (*fn)(void *arg, unsigned part);
        void *arg;
        unsigned n_parts, next, left;
        bool stop;
        unsigned n_started; /* threads besides the caller's */
        pthread_t tid[];
};

unsigned workers_threads_for(unsigned threads) {
        cpu_set_t set;
        long cpus;

        if (threads > 0)
                return threads < POLICY_THREADS_MAX ? threads : POLICY_THREADS_MAX;
        cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
                                                            : sysconf(_SC_NPROCESSORS_ONLN);
        return cpus < 1 ? 1 : cpus < POLICY_THREADS_AUTO_MAX ? (unsigned)cpus : POLICY_THREADS_AUTO_MAX;
}

/* Takes and runs parts of the job until none is left.  Called and returns
 * with w->lock held. */
static void workers_take(struct workers *w) {
        while (w->next < w->n_parts) {
                void (*fn)(void *, unsigned) = w->fn;
                void *arg = w->arg;
                unsigned part = w->next++;

                pthread_mutex_unlock(&w->lock);
                fn(arg, part);
                pthread_mutex_lock(&w->lock);
                if (--w->left == 0)
                        pthread_cond_signal(&w->done);
        }
}

static void *workers_thread(void *arg) {
        struct workers *w = arg;

        pthread_mutex_lock(&w->lock);
        for (;;) {
                while (!w->stop && w->next >= w->n_parts)
                        pthread_cond_wait(&w->wake, &w->lock);
                if (w->stop)
                        break;
                workers_take(w);
        }
        pthread_mutex_unlock(&w->lock);
        return NULL;
}

void workers_run(struct workers *w, void (*fn)(void *arg, unsigned part), void *arg, unsigned n_parts) {
        unsigned wake;

        if (w->n_started == 0 || n_parts <= 1) {
                for (unsigned part = 0; part < n_parts; part++)
                        fn(arg, part);
                return;
        }
        pthread_mutex_lock(&w->lock);
        w->fn = fn;
        w->arg = arg;
        w->n_parts = n_parts;
        w->next = 0;
        w->left = n_parts;
        wake = n_parts - 1 < w->n_started ? n_parts - 1 : w->n_started;
        if (wake == w->n_started)
                pthread_cond_broadcast(&w->wake);
        else
                for (unsigned i = 0; i < wake; i++)
                        pthread_cond_signal(&w->wake);
        workers_take(w);
        while (w->left > 0)
                pthread_cond_wait(&w->done, &w->lock);
        pthread_mutex_unlock(&w->lock);
}

static void workers_run_policy(void *pool, void (*fn)(void *arg, unsigned part), void *arg,
                               unsigned n_parts) {
        workers_run(pool, fn, arg, n_parts);
}

/* Starts up to n threads into w->tid, with every signal blocked (they are
 * the main thread's to take) and a small stack. */
static void workers_start(struct workers *w, unsigned n) {
        sigset_t all, old;
        pthread_attr_t attr;
        bool attr_ok = pthread_attr_init(&attr) == 0;

        if (attr_ok)
                pthread_attr_setstacksize(&attr, WORKER_STACK_BYTES);
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        while (w->n_started < n) {
                char name[16];

                if (pthread_create(&w->tid[w->n_started], attr_ok ? &attr : NULL, workers_thread, w) != 0)
                        break;
                snprintf(name, sizeof(name), "kvt-plan/%u", w->n_started + 1);
                (void)pthread_setname_np(w->tid[w->n_started], name);
                w->n_started++;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (attr_ok)
                pthread_attr_destroy(&attr);
}

int workers_new(unsigned n, struct workers **ret) {
        struct workers *w;

        n = n < 1 ? 1 : n > POLICY_THREADS_MAX ? POLICY_THREADS_MAX : n;
        w = calloc(1, sizeof(*w) + (n - 1) * sizeof(w->tid[0]));
        if (!w)
                return -ENOMEM;
        if (pthread_mutex_init(&w->lock, NULL) != 0) {
                free(w);
                return -ENOMEM;
        }
        if (pthread_cond_init(&w->wake, NULL) != 0) {
                pthread_mutex_destroy(&w->lock);
                free(w);
                return -ENOMEM;
        }
        if (pthread_cond_init(&w->done, NULL) != 0) {
                pthread_cond_destroy(&w->wake);
                pthread_mutex_destroy(&w->lock);
                free(w);
                return -ENOMEM;
        }
        workers_start(w, n - 1);
        w->policy = (struct policy_workers){.n = w->n_started + 1, .run = workers_run_policy, .pool = w};
        *ret = w;
        return 0;
}

struct workers *workers_free(struct workers *w) {
        if (!w)
                return NULL;
        pthread_mutex_lock(&w->lock);
        w->stop = true;
        pthread_cond_broadcast(&w->wake);
        pthread_mutex_unlock(&w->lock);
        for (unsigned i = 0; i < w->n_started; i++)
                pthread_join(w->tid[i], NULL);
        pthread_cond_destroy(&w->done);
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->lock);
        free(w);
        return NULL;
}

unsigned workers_n(const struct workers *w) {
        return w->policy.n;
}

const struct policy_workers *workers_policy(const struct workers *w) {
        return &w->policy;
}
