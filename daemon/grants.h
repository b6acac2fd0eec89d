/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * One client's VRAM grant on one GPU, as the daemon books it
 * (common/protocol.h, struct kvt_grant): the cap it was given, what its
 * shim may have started under its caps, and what it registered.  Pure
 * bookkeeping; the registry keeps one per client and GPU, and decides the
 * caps.
 *
 * Room a cap offers is the shim's until a GRANT_ACK says a lower cap is in
 * force, with the bytes the shim had taken from its grants by then: a
 * capture takes its room before its REGION_ADD (which waits for the
 * capture's prefetch).  So the book holds, until the shim answers, the
 * highest cap it may act on, and what it took and has not claimed yet
 * stays held until it does.  One GRANT is unanswered at a time
 * (grant_book_waiting()): every GRANT_ACK answers the latest.  Neither
 * side can hold room for ever: a GRANT unanswered for
 * GRANT_ACK_TIMEOUT_MS is taken as in force, and what a shim reported
 * taken past its cap, for captures that never came, is let go
 * GRANT_HOLD_TIMEOUT_MS after its report.
 */

#include <stdbool.h>
#include <stdint.h>

#define GRANT_ACK_TIMEOUT_MS  5000u
#define GRANT_HOLD_TIMEOUT_MS 10000u

struct grant_book {
        uint64_t cap;     /* of the last GRANT sent (or the WELCOME's): starts allowed in all, bytes */
        uint64_t hold;    /* the most the shim may have started under its caps */
        uint64_t started; /* starts booked in VRAM (within hold); REGION_ADDs and restores */
        uint64_t claimed; /* starts the shim claimed (REGION_ADDs booked, restores): what it took and told */
        uint64_t offered; /* the highest cap since the shim last reported: the most it may have taken */
        uint32_t seq;     /* of the last GRANT sent; 0: the WELCOME's alone */
        uint32_t acked;   /* answered: by its GRANT_ACK or its timeout (== seq: nothing unanswered) */
        uint32_t reported; /* of the last GRANT_ACK received */
        uint32_t sent_tick, report_tick; /* the last GRANT's, the last GRANT_ACK's */
};

/* A cap in force at once (the WELCOME's, which needs no answer). */
void grant_book_set(struct grant_book *b, uint64_t cap);

/* Whether a GRANT is unanswered: no other may be sent before its answer. */
bool grant_book_waiting(const struct grant_book *b);

/* A GRANT of cap about to be sent at tick now; returns its seq (never 0). */
uint32_t grant_book_sent(struct grant_book *b, uint64_t cap, uint32_t now);

/* A GRANT_ACK of seq at tick now, the shim having taken taken_bytes from
 * its grants in all.  One that comes after its timeout answered for it
 * still counts while no later GRANT is out: what the shim reports taken
 * is held again.  Returns 1 when that lowered the hold, 0 when it did not
 * (or repeats an answer, or a later GRANT is out), -EINVAL for a seq never
 * sent. */
int grant_book_acked(struct grant_book *b, uint32_t seq, uint64_t taken_bytes, uint32_t now);

/* A start the shim claims in VRAM (a REGION_ADD, a restore) of
 * claimed_bytes, of which bytes can be booked (a restore of chunks not
 * restorable books fewer): counted as claimed, and booked in VRAM as far
 * as the hold covers it.  Returns the bytes booked. */
uint64_t grant_book_start(struct grant_book *b, uint64_t claimed_bytes, uint64_t bytes);

/* VRAM the shim may start in without the daemon knowing yet, as the book
 * stands (no timeout applied): the hold past what it claimed. */
uint64_t grant_book_held(const struct grant_book *b);

/* grant_book_held() at tick now, after the timeouts (in ticks) have let
 * go what they let go.  *ret_overdue: the GRANT went unanswered past
 * its timeout this time (for the caller's log). */
uint64_t grant_book_reserved(struct grant_book *b, uint32_t now, uint32_t ack_ticks, uint32_t hold_ticks,
                             bool *ret_overdue);
