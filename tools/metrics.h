/* SPDX-License-Identifier: MIT */
#pragma once

#include <json-c/json.h>
#include <stdio.h>

/*
 * Prometheus text exposition (format 0.0.4) of kvtierd's status document,
 * for node_exporter's textfile collector or any scraper that runs
 * `kvtierctl metrics`.  Metric names are stable; labels: gpu, tier,
 * client, pid, name, direction, result.
 */
void metrics_print(FILE *f, struct json_object *status);
