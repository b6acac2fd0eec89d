/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>

#include "grants.h"
#include "util.h"

void grant_book_set(struct grant_book *b, uint64_t cap) {
        b->cap = b->hold = b->offered = cap;
        b->acked = b->reported = b->seq;
}

bool grant_book_waiting(const struct grant_book *b) {
        return b->acked != b->seq;
}

uint32_t grant_book_sent(struct grant_book *b, uint64_t cap, uint32_t now) {
        b->cap = cap;
        b->hold = MAX(b->hold, cap);
        b->offered = MAX(b->offered, cap);
        b->sent_tick = now;
        if (++b->seq == 0) /* 0 is the WELCOME's */
                b->seq = 1;
        return b->seq;
}

int grant_book_acked(struct grant_book *b, uint32_t seq, uint64_t taken_bytes, uint32_t now) {
        uint64_t hold;

        if (seq == 0 || b->seq - seq >= UINT32_C(1) << 31)
                return -EINVAL; /* never sent (seqs wrap) */
        if (seq != b->seq || b->reported == seq)
                return 0; /* a later GRANT is out, or said before */
        /* The answer to the last GRANT, late or not (its timeout may have
         * answered for it): what the shim took before the cap fell stays its
         * own until claimed; never more than it was offered since it last
         * said. */
        b->acked = b->reported = seq;
        b->report_tick = now;
        hold = MAX(b->cap, MIN(taken_bytes, b->offered));
        b->offered = b->cap;
        if (hold >= b->hold) {
                b->hold = hold;
                return 0;
        }
        b->hold = hold;
        return 1;
}

uint64_t grant_book_start(struct grant_book *b, uint64_t claimed_bytes, uint64_t bytes) {
        uint64_t room = b->hold > b->started ? b->hold - b->started : 0;

        b->claimed += claimed_bytes;
        bytes = MIN(bytes, room);
        b->started += bytes;
        return bytes;
}

uint64_t grant_book_held(const struct grant_book *b) {
        return b->hold > b->claimed ? b->hold - b->claimed : 0;
}

uint64_t grant_book_reserved(struct grant_book *b, uint32_t now, uint32_t ack_ticks, uint32_t hold_ticks,
                             bool *ret_overdue) {
        *ret_overdue = grant_book_waiting(b) && now - b->sent_tick > ack_ticks;
        if (*ret_overdue) { /* taken at its word: nothing past the cap */
                b->acked = b->seq;
                b->report_tick = now;
                b->hold = b->cap;
        }
        if (!grant_book_waiting(b) && b->hold > b->cap && now - b->report_tick > hold_ticks)
                b->hold = b->cap; /* the captures it reported never came */
        return grant_book_held(b);
}
