/* SPDX-License-Identifier: MIT */
#pragma once

/* What the policy tests ask of a plan. */

#include "policy.h"

/* Whether chunk i of region r is moved to tier by the plan. */
static inline int moved(const struct policy_plan *p, uint32_t r, uint32_t i, uint32_t tier) {
        for (size_t k = 0; k < p->n_moves; k++)
                if (p->moves[k].region == r && p->moves[k].tier == tier && i >= p->moves[k].first_chunk &&
                    i < p->moves[k].first_chunk + p->moves[k].n_chunks)
                        return 1;
        return 0;
}
