/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * For unit tests that drive the daemon's planner: planner_ops whose client
 * is always ready and which keep every order sent in sent[] (the first
 * SINK_MAX_ORDERS), and the answers to them.  State is static: one sink per
 * test program.
 */

#include <stdbool.h>
#include <stddef.h>

#include "planner.h"
#include "registry.h"

#define SINK_MAX_ORDERS 64

static struct kvt_order sent[SINK_MAX_ORDERS];
static size_t n_sent;

static inline bool sink_ready(struct client *c, void *userdata) {
        (void)c, (void)userdata;
        return true;
}

static inline void sink_send(struct client *c, const struct kvt_order *o, void *userdata) {
        (void)c, (void)userdata;
        if (n_sent < SINK_MAX_ORDERS)
                sent[n_sent++] = *o;
}

static const struct planner_ops sink_ops = {.client_ready = sink_ready, .send_order = sink_send};

enum sink_which { SINK_ALL, SINK_PROMOTIONS, SINK_EVICTIONS };

/* Answers the orders sent and not yet answered, or those of one direction,
 * with status; the others stay in sent[]. */
static inline void sink_complete(struct registry *r, struct client *c, enum sink_which w, int status) {
        size_t j = 0;

        for (size_t i = 0; i < n_sent; i++) {
                struct kvt_order_done done = {.order_id = sent[i].order_id, .status = status};
                bool up = sent[i].tier == KVT_TIER_VRAM;

                if (w == SINK_ALL || (w == SINK_PROMOTIONS) == up)
                        (void)registry_order_done(r, c, &done);
                else
                        sent[j++] = sent[i];
        }
        n_sent = j;
}
