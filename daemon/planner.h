/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The tick: per GPU, a snapshot of the registry's chunks goes to the policy,
 * and the plan comes back as orders (marked pending and charged in the
 * registry, then handed to the caller for sending).  GPUs are planned one
 * after the other, so the host room one GPU's evictions take is gone for
 * the next.  For demand, the planner also keeps each GPU's thrash guard,
 * orders its sampler's re-arms and probes, and grants each client the VRAM
 * its next captures may start in.  Each tick it also paces the clients
 * of lower priority on a GPU where one of higher priority is busy
 * ([gpu] yield_percent).  The planner owns the threads its plans
 * share (daemon/workers.c), sized by [policy] threads: started with it,
 * replaced at the next tick when a live set changes their number, joined
 * when it is freed.
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
        /* Sends or queues a GRANT, likewise. */
        void (*send_grant)(struct client *c, const struct kvt_grant *g, void *userdata);
        /* Sends or queues a PACE, likewise; NULL: clients are never paced. */
        void (*send_pace)(struct client *c, const struct kvt_pace *pc, void *userdata);
};

/* Returns 0 and a planner in *ret, its threads started, or -ENOMEM.  conf
 * must outlive it. */
int planner_new(const struct conf *conf, struct planner **ret);

/* Joins p's threads and frees it.  Accepts NULL; returns NULL. */
struct planner *planner_free(struct planner *p);

struct topology;
/* Gives the planner the host's NUMA distances (t must outlive it): where a
 * GPU's home node is full, evictions spill to the nearest node with room.
 * Without it, or where a distance is unknown, to the lowest node id. */
void planner_set_topology(struct planner *p, const struct topology *t);

/* Plans every GPU once.  Returns the number of orders issued, or -ENOMEM. */
int planner_tick(struct planner *p, struct registry *r, const struct planner_ops *ops, void *userdata);

/* Plans every GPU again within the current tick (a shim's DEMAND: faults
 * arrived), without refilling the rate credit or ticking the guards.
 * Returns as planner_tick(). */
int planner_replan(struct planner *p, struct registry *r, const struct planner_ops *ops, void *userdata);
