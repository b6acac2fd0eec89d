/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The tick: per GPU, a snapshot of the registry's chunks goes to the policy,
 * and the plan comes back as orders (marked pending and charged in the
 * registry, then handed to the caller for sending).
 */

#include <stdbool.h>

#include "conf.h"
#include "registry.h"

struct planner;

struct planner_ops {
        /* Whether the client can take orders now (its send queue is empty). */
        bool (*client_ready)(struct client *c, void *userdata);
        /* Sends or queues an order; never blocks.  Errors are the callee's to handle. */
        void (*send_order)(struct client *c, const struct kvt_order *o, void *userdata);
};

/* Returns 0 and a planner in *ret, or -ENOMEM.  conf must outlive it. */
int planner_new(const struct conf *conf, struct planner **ret);

/* Frees p.  Accepts NULL; returns NULL. */
struct planner *planner_free(struct planner *p);

/* Plans every GPU once.  Returns the number of orders issued, or -ENOMEM. */
int planner_tick(struct planner *p, struct registry *r, const struct planner_ops *ops, void *userdata);
