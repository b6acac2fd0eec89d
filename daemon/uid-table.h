/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What each uid holds of the daemon: its open connections (against
 * [daemon] max_connections_per_uid) and its log rate limit, so that one
 * user's flood, over however many connections, writes a bounded number of
 * lines.  An entry lives while a connection of its uid is open, and after
 * that until its rate limit interval is over.
 */

#include <stdint.h>

#include "util.h"

struct uid_entry {
        uint32_t uid;
        unsigned n_conns;     /* connections open */
        struct ratelimit log; /* lines logged on behalf of the uid */
};

struct uid_table;

/* An empty table whose entries rate-limit to burst lines per interval_ns
 * (interval_ns 0: no limit).  Returns 0 or -ENOMEM. */
int uid_table_new(uint64_t interval_ns, unsigned burst, struct uid_table **ret);

/* Frees t and its entries (no connection may refer to them any more).  Accepts NULL; returns NULL. */
struct uid_table *uid_table_free(struct uid_table *t);

/* The entry of uid, added on first use (idle entries are dropped on the
 * way; an entry with n_conns > 0 stays where it is).  Returns NULL on ENOMEM. */
struct uid_entry *uid_table_get(struct uid_table *t, uint32_t uid, uint64_t now_ns);

/* Calls fn for each uid whose rate limit interval is over with lines
 * suppressed in it (n of them), and forgets them: the "suppressed" line
 * comes even when the uid logs nothing more. */
void uid_table_report(struct uid_table *t, uint64_t now_ns,
                      void (*fn)(uint32_t uid, unsigned n, void *userdata), void *userdata);

/* Number of entries, for tests. */
size_t uid_table_size(const struct uid_table *t);
