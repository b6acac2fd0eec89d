/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "uid-table.h"

struct uid_table {
        struct uid_entry **entries; /* each its own allocation: connections point at them */
        size_t n, cap;
        uint64_t interval_ns;
        unsigned burst;
};

int uid_table_new(uint64_t interval_ns, unsigned burst, struct uid_table **ret) {
        struct uid_table *t = calloc(1, sizeof(*t));

        if (!t)
                return -ENOMEM;
        t->interval_ns = interval_ns;
        t->burst = burst;
        *ret = t;
        return 0;
}

struct uid_table *uid_table_free(struct uid_table *t) {
        if (!t)
                return NULL;
        for (size_t i = 0; i < t->n; i++)
                free(t->entries[i]);
        free(t->entries);
        free(t);
        return NULL;
}

/* No connection, and nothing its rate limit still has to count or report. */
static bool entry_idle(const struct uid_entry *e, uint64_t now_ns) {
        return e->n_conns == 0 && e->log.suppressed == 0 &&
               (e->log.begin_ns == 0 || now_ns - e->log.begin_ns >= e->log.interval_ns);
}

void uid_table_report(struct uid_table *t, uint64_t now_ns,
                      void (*fn)(uint32_t uid, unsigned n, void *userdata), void *userdata) {
        for (size_t i = 0; i < t->n; i++) {
                struct ratelimit *rl = &t->entries[i]->log;

                if (rl->suppressed && now_ns - rl->begin_ns >= rl->interval_ns) {
                        fn(t->entries[i]->uid, rl->suppressed, userdata);
                        rl->suppressed = 0;
                }
        }
}

struct uid_entry *uid_table_get(struct uid_table *t, uint32_t uid, uint64_t now_ns) {
        struct uid_entry *e;

        for (size_t i = 0; i < t->n;) {
                e = t->entries[i];
                if (e->uid == uid)
                        return e;
                if (entry_idle(e, now_ns)) {
                        free(e);
                        t->entries[i] = t->entries[--t->n];
                        continue;
                }
                i++;
        }
        if (t->n == t->cap) {
                size_t cap = t->cap ? t->cap * 2 : 16;
                struct uid_entry **a = realloc(t->entries, cap * sizeof(*a));

                if (!a)
                        return NULL;
                t->entries = a;
                t->cap = cap;
        }
        e = calloc(1, sizeof(*e));
        if (!e)
                return NULL;
        *e = (struct uid_entry){.uid = uid, .log = {.interval_ns = t->interval_ns, .burst = t->burst}};
        t->entries[t->n++] = e;
        return e;
}

size_t uid_table_size(const struct uid_table *t) {
        return t->n;
}
