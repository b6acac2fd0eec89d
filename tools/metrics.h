/* SPDX-License-Identifier: MIT */
#pragma once

#include <json-c/json.h>
#include <stdio.h>

/*
 * Prometheus text exposition (format 0.0.4) of kvtierd's status document,
 * for node_exporter's textfile collector or any scraper that runs
 * `kvtierctl metrics`.  Metric names are stable; labels: gpu, tier,
 * client, pid, name, direction, result, node, reason, le.  The move
 * histograms' buckets come from the status document (daemon/move-latency.h).
 */
void metrics_print(FILE *f, struct json_object *status);

/* What a scrape gets while kvtierd does not answer: kvtier_up 0, so that a
 * textfile collector does not keep serving the last kvtier_up 1. */
void metrics_print_down(FILE *f);
