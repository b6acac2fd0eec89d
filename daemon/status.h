/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The status document sent for CTL_STATUS.  kvtierctl and the integration
 * tests parse it: change the schema only together with them.
 */

#include <stdint.h>

#include "heat-reader.h"
#include "registry.h"

/* What the server's connection limits did (server.c keeps it). */
struct connection_stats {
        uint64_t open;            /* connections now */
        uint64_t refused;         /* at accept: over max_connections, the reserve or the per-uid limit */
        uint64_t hello_timeouts;  /* closed for saying nothing in time */
        uint64_t dropped_queue;   /* closed with their send queue over send_queue_max */
        uint64_t dropped_stalled; /* closed for reading nothing for send_timeout_ms */
        uint64_t accept_pauses;   /* accepts paused for want of descriptors */
        uint64_t regions_refused; /* REGION_ADDs past a quota of [daemon] */
        uint64_t order_timeouts;  /* orders taken back for want of an answer in order_timeout_ms */
        uint64_t dropped_orders;  /* clients closed at max_order_timeouts */
};

struct status_info {
        const char *socket;
        const struct conf *conf; /* live: the policy and its parameters come from here */
        unsigned tick_ms;
        uint64_t start_ns; /* CLOCK_MONOTONIC at start-up */
        /* A client's heat table counters, NULL when it passed none. */
        const struct heat_table_stats *(*client_heat)(const struct client *c);
        const struct connection_stats *connections; /* NULL: not reported */
        /* The SSD tier's "ssd" object (a json_object *, the caller's), or NULL. */
        void *(*ssd_json)(const void *store);
        const void *ssd;
};

/* Returns 0 and a NUL-terminated JSON document in *ret (free()), or -ENOMEM. */
int status_json(const struct registry *r, const struct status_info *info, char **ret);

/* The configuration in effect as {"config": [{"section", "key", "value",
 * "default", "range", "help"}, ...]} (conf_foreach(), templates left out):
 * returns 0 and a NUL-terminated document in *ret (free()), or -ENOMEM. */
int config_json(const struct conf *c, char **ret);

/* {"error": reason}: the reply to a refused control request.  Returns 0
 * and the document in *ret (free()), or -ENOMEM. */
int error_json(const char *reason, char **ret);
