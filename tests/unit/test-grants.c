/* SPDX-License-Identifier: MIT */
/*
 * One client's grant book (daemon/grants.c): what a GRANT offers stays
 * held until its GRANT_ACK, what the shim took and has not claimed stays
 * held until it claims it, and the timeouts let go of what a silent or
 * lying shim would hold for ever.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>

#include "grants.h"
#include "tap.h"

#define MIB (1ull << 20)

static void test_answers(void) {
        struct grant_book b = {0};
        bool overdue;

        grant_book_set(&b, 64 * MIB);
        TAP_OK(!grant_book_waiting(&b), "answers: the WELCOME's cap needs no answer");
        TAP_EQ_U64(grant_book_reserved(&b, 1, 10, 100, &overdue), 64 * MIB, "answers: its room is held");
        TAP_EQ_INT(grant_book_sent(&b, 16 * MIB, 1), 1, "answers: the first GRANT is seq 1");
        TAP_OK(grant_book_waiting(&b), "answers: unanswered");
        TAP_EQ_U64(grant_book_reserved(&b, 2, 10, 100, &overdue), 64 * MIB, "answers: the higher cap is held until then");
        TAP_EQ_INT(grant_book_acked(&b, 2, 0, 3), -EINVAL, "answers: an answer to a GRANT not sent is refused");
        TAP_EQ_INT(grant_book_acked(&b, 0, 0, 3), -EINVAL, "answers: seq 0 is refused");
        TAP_EQ_INT(grant_book_acked(&b, 1, 8 * MIB, 3), 1, "answers: the answer lowers the hold");
        TAP_EQ_U64(grant_book_reserved(&b, 4, 10, 100, &overdue), 16 * MIB, "answers: to the new cap");
        TAP_EQ_INT(grant_book_acked(&b, 1, 8 * MIB, 4), 0, "answers: said again, nothing changes");
        grant_book_sent(&b, 32 * MIB, 5);
        TAP_EQ_INT(grant_book_acked(&b, 1, 8 * MIB, 6), 0, "answers: a late answer to an older GRANT is no error");
        TAP_OK(grant_book_waiting(&b), "answers: and answers nothing");
        TAP_EQ_INT(grant_book_acked(&b, 3, 8 * MIB, 6), -EINVAL, "answers: one to a GRANT not sent yet is refused");

        b.seq = b.acked = UINT32_MAX;
        TAP_EQ_INT(grant_book_sent(&b, 32 * MIB, 7), 1, "answers: seq wraps past 0 (the WELCOME's)");
        TAP_EQ_INT(grant_book_acked(&b, 1, 0, 8), 0, "answers: and is answered");
}

static void test_taken(void) {
        struct grant_book b = {0};
        bool overdue;

        grant_book_set(&b, 64 * MIB);
        grant_book_sent(&b, 16 * MIB, 1);
        /* the shim took 48 MiB under the old cap before the GRANT came */
        TAP_EQ_INT(grant_book_acked(&b, 1, 48 * MIB, 2), 1, "taken: the answer keeps what was taken");
        TAP_EQ_U64(grant_book_reserved(&b, 3, 10, 100, &overdue), 48 * MIB, "taken: held until claimed");
        TAP_EQ_U64(grant_book_start(&b, 32 * MIB, 32 * MIB), 32 * MIB, "taken: a claim within the hold is booked");
        TAP_EQ_U64(grant_book_reserved(&b, 4, 10, 100, &overdue), 16 * MIB, "taken: the rest still held");
        TAP_EQ_U64(grant_book_start(&b, 8 * MIB, 0), 0, "taken: a refused claim books nothing");
        TAP_EQ_U64(grant_book_reserved(&b, 5, 10, 100, &overdue), 8 * MIB, "taken: but holds no more");
        TAP_EQ_U64(grant_book_start(&b, 32 * MIB, 32 * MIB), 16 * MIB, "taken: past the hold, not booked");
        TAP_EQ_U64(grant_book_reserved(&b, 6, 10, 100, &overdue), 0, "taken: nothing held once all is claimed");

}

/* A shim that says it took more than it ever claims. */
static void test_liar(void) {
        struct grant_book b = {0};
        bool overdue;

        grant_book_set(&b, 128 * MIB);
        grant_book_acked(&b, grant_book_sent(&b, 32 * MIB, 10), 1ull << 50, 11);
        TAP_EQ_U64(grant_book_reserved(&b, 100, 10, 100, &overdue), 128 * MIB,
                   "liar: never more than it was offered is held");
        TAP_EQ_U64(grant_book_reserved(&b, 112, 10, 100, &overdue), 32 * MIB,
                   "liar: and only until the hold timeout");
}

static void test_silent(void) {
        struct grant_book b = {0};
        bool overdue;

        grant_book_set(&b, 64 * MIB);
        grant_book_sent(&b, 0, 1000);
        TAP_EQ_U64(grant_book_reserved(&b, 1010, 10, 100, &overdue), 64 * MIB, "silent: held within the timeout");
        TAP_OK(!overdue, "silent: not overdue yet");
        TAP_EQ_U64(grant_book_reserved(&b, 1011, 10, 100, &overdue), 0, "silent: past it, taken at the cap");
        TAP_OK(overdue && !grant_book_waiting(&b), "silent: overdue once, and answered for");
        TAP_EQ_INT(grant_book_acked(&b, b.seq, 48 * MIB, 1012), 0, "silent: its late answer still counts");
        TAP_EQ_U64(grant_book_reserved(&b, 1013, 10, 100, &overdue), 48 * MIB,
                   "silent: what it reports taken is held again");
        grant_book_sent(&b, 0, UINT32_MAX - 2);
        TAP_EQ_U64(grant_book_reserved(&b, 3, 10, 100, &overdue), 48 * MIB, "silent: ticks wrap, the hold stays");
        TAP_OK(!overdue, "silent: and count across the wrap");
}

int main(void) {
        test_answers();
        test_taken();
        test_liar();
        test_silent();
        return tap_done();
}
