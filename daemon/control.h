/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Live settings from `kvtierctl set` (CTL_SET "key=value"): the same keys and
 * validation as kvtierd.conf, applied without a restart.  Keys:
 *   policy=NAME                 [policy] name
 *   policy.KEY=VALUE            any [policy] key (hysteresis_ticks, window, ...)
 *   vram_budget=BYTES|N%        [gpu] vram_budget, applied to every GPU without [gpu.N]
 *   vram_budget.N=BYTES|N%      [gpu.N] vram_budget
 *   host_budget.N=BYTES|N%|none [numa.N] host_budget
 * The planner reads the config every tick, so a change acts on the next tick.
 */

#include "conf.h"
#include "registry.h"

/* Applies one "key=value".  Returns 0 (logged), or -ENOENT (unknown key),
 * -EINVAL or -ERANGE (bad value) with nothing changed and the reason, for
 * the caller to log and send, in reason (len bytes, no final period). */
int control_set(struct conf *conf, struct registry *r, const char *text, char *reason, size_t len);
