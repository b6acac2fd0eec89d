/* SPDX-License-Identifier: MIT */
#pragma once

#include "policy.h"

/* policy_plan() as it was before the tick was made faster (plan-ref.c):
 * the oracle that test-plan-equiv compares the planner with.  Free the
 * plan with policy_plan_clear(). */
int plan_ref(const struct policy_params *pp, const struct policy_input *in, struct policy_plan *ret);
