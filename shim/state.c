/* SPDX-License-Identifier: MIT */
/* The state object (state.h), as it stands before the constructor runs. */
#include "config.h"

#include "state.h"

struct kvt_shim kvt_shim_state = {
        .cfg = SHIM_CONFIG_DEFAULTS,
        .rules = {.min_size = CLASSIFY_DEFAULT_MIN_SIZE_BYTES, .apis = KVT_API_FAMILY_ALL},
        .announce_lock = PTHREAD_MUTEX_INITIALIZER,
        .client = {.lock = PTHREAD_MUTEX_INITIALIZER,
                   .conn_changed = PTHREAD_COND_INITIALIZER,
                   .conn_fd = -1},
        .regions = {.lock = PTHREAD_MUTEX_INITIALIZER,
                    .idle = PTHREAD_COND_INITIALIZER,
                    .view_lock = PTHREAD_RWLOCK_INITIALIZER,
                    .next_id = 1,
                    .span_lo = UINTPTR_MAX},
        .heat = {.write_lock = PTHREAD_MUTEX_INITIALIZER, .table_fd = -1},
        .vmm = {.warned = ATOMIC_FLAG_INIT},
        .deferred = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER},
        .cupti = {.run_lock = PTHREAD_MUTEX_INITIALIZER, .run_cond = PTHREAD_COND_INITIALIZER},
        .standalone = {.lifeline_fd = -1},
        .ssd = {.io_lock = PTHREAD_MUTEX_INITIALIZER,
                .lock = PTHREAD_MUTEX_INITIALIZER,
                .changed = PTHREAD_COND_INITIALIZER,
                .fd = -1,
                .staging_fd = -1},
};
