/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The shim's one state object: the configuration, the capture rules, the
 * connection, the region table (captured regions and VMM mappings), the
 * heat table, the deferred frees, the samplers, the SSD tier's client
 * side.  Each part is one module's and only that
 * module touches its fields (the part's comment names it); the module
 * reaches it through kvt_shim().  The shim.c constructor fills the
 * configuration and the owner's calls, and registers the one fork
 * handler.  Outside this object only the hook tables live (real.c's, the
 * CUPTI entry points in cupti.c, hooks.c, sym.c): filled once, then read on
 * every hooked call.
 *
 * Every part starts as the static initializer in state.c sets it, so that
 * a hook called before the constructor (dlsym, from a sanitizer runtime)
 * finds a valid object.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

#include "classify.h"
#include "cuda-abi.h"
#include "cupti-abi.h"
#include "env.h"
#include "protocol.h"

/* What the modules below the owner ask of it (shim.c fills them): the
 * client starts the mover and drops the registrations of a lost daemon
 * without knowing the mover. */
struct shim_owner_ops {
        int (*start_mover)(void);          /* 0 or -errno */
        bool (*has_work)(void);            /* captured regions or VMM mappings to register */
        void (*forget_registration)(void); /* the daemon is gone: nothing is registered */
};

/* client.c: the daemon connection, under lock. */
struct shim_client {
        pthread_mutex_t lock;
        pthread_cond_t conn_changed;
        int conn_fd;
        uint64_t conn_gen; /* one more at each connection: which one a grant came from */
        uint32_t conn_seq;
        uint64_t next_attempt_ns;
        bool outage_logged;
        bool mover_running;
        /* What the first handshake learnt, so that the mover can reconnect
         * without touching CUDA (a cudaMemGetInfo on its thread could create
         * a context on the wrong device). */
        struct kvt_hello hello;
        bool hello_known;
        /* Totals of the devices regions were captured on, and which of them
         * the current connection has heard of (bit d: device d). */
        uint64_t device_total[KVT_MAX_GPUS];
        int device_node[KVT_MAX_GPUS];
        uint64_t devices_known, devices_announced;
        /* The current connection's grants, per device: the cap of its last
         * GRANT and the bytes captures started in VRAM under them since it
         * connected. */
        uint64_t grant_cap[KVT_MAX_GPUS], grant_used[KVT_MAX_GPUS];
        _Atomic uint64_t granted_bytes; /* VRAM budget plus host grant from the last WELCOME */
        _Atomic uint64_t refused_allocs; /* captures refused past that ceiling (client_ceiling_refuses) */
        atomic_bool welcomed;           /* set by this process's first WELCOME */
};

/* regions.c: the captured regions and VMM mappings, sorted by base, under
 * lock; the array itself (its layout, and what the hot path reads of each
 * entry: bounds, id, heat counters) changes under view_lock too, which
 * heat_touch() takes for reading alone. */
struct region_slot;
struct shim_regions {
        pthread_mutex_t lock;
        pthread_cond_t idle;
        pthread_rwlock_t view_lock;
        struct region_slot *slots;
        size_t n_slots, cap_slots;
        uint32_t next_id;
        uintptr_t span_lo, span_hi; /* bounds of every captured region, for regions_maybe_captured() */
};

/* heat.c: the heat table.  Directory slots: one per live captured region
 * (each 64 MiB and up by default, so 1024 cover 64 GiB at the least).
 * Which region's counters are where is the region table's (heat_offset). */
#define HEAT_SLOTS 1024u
struct heat_extent;
struct shim_heat {
        pthread_mutex_t write_lock; /* the file, its mapping, the directory */
        int table_fd;
        void *table_map; /* KVT_HEAT_MAX_BYTES reserved; valid below file_bytes */
        uint64_t file_bytes, bump_offset;
        bool slot_used[HEAT_SLOTS];
        struct heat_extent *extents;
        size_t n_extents, cap_extents;
        bool full_logged;
        uint64_t touches; /* chunk accesses counted, for statistics */
};

/* vmm.c: what it knows of the VMM mappings it tracks (the mappings
 * themselves are untiered entries of the region table). */
struct shim_vmm {
        atomic_flag warned;
        _Atomic unsigned tracked; /* mappings in the table: unmaps must look for them */
};

/* deferred.c: stream-ordered frees waiting for their stream, under lock. */
struct deferred_entry;
struct shim_deferred {
        pthread_mutex_t lock;
        pthread_cond_t wake;
        struct deferred_entry *head, *tail;
        bool reaper_running;
        _Atomic uint64_t pending_bytes; /* captured bytes of frees queued, not yet released */
};

/* cupti.c: the CUPTI sampler and its statistics. */
struct cupti_stats {
        uint64_t records[KVT_CUPTI_UM_KINDS];    /* UM records received, by counter kind */
        uint64_t attributed[KVT_CUPTI_UM_KINDS]; /* of those, inside a captured region */
        uint64_t other_records;                  /* other activity kinds, unknown counter kinds */
        uint64_t buffers;                        /* buffers CUPTI completed */
        uint64_t dropped;                        /* records CUPTI dropped: no buffer room */
        uint64_t enabled_ns;                     /* time the counters were on */
        bool loaded;                             /* libcupti found and counters configured */
};
struct shim_cupti {
        struct cupti_stats stats;
        pthread_t sampler;
        bool started;             /* cupti_start() ran, or runs (under the announce lock) */
        bool setup_done;          /* and returned: read without the lock (acquire) */
        bool loaded;              /* CUPTI found, configured and enabled */
        uint64_t faults_seen;     /* attributed faults at the last DEMAND */
        pthread_mutex_t run_lock; /* the sampler's life */
        pthread_cond_t run_cond;
        bool stopping, sampler_running, stats_dumped;
};

/* launch.c: the parameter layouts of launched functions, filled lock-free
 * (a full table means no heat from launches of further functions, never a
 * slower launch), and the launch hooks' counters. */
#define LAYOUT_SLOTS      4096u
#define LAYOUT_MAX_PARAMS 32u
struct launch_layout {
        const void *func;
        uint32_t state; /* LAYOUT_*, published with release */
        uint16_t n_params;
        uint16_t size[LAYOUT_MAX_PARAMS]; /* bytes scanned of each; 0: too small for a pointer */
};
struct launch_stats {
        uint64_t launches;          /* launches seen with launch heat on */
        uint64_t scanned;           /* of those, with a known parameter layout */
        uint64_t no_layout;         /* of those, launched without looking (unknown or table full) */
        uint64_t functions;         /* functions whose layout was queried */
        uint64_t functions_unknown; /* of those, with no parameter info */
        uint64_t pointers;          /* argument words that counted a chunk access */
        uint64_t paced;             /* launches paced (kvt_pace) */
        uint64_t paced_wait_ns;     /* time they waited for their kernels */
        uint64_t paced_sleep_ns;    /* time they slept after them */
};
struct shim_launch {
        struct launch_layout layouts[LAYOUT_SLOTS];
        struct launch_stats stats;
        uint32_t pace_percent; /* the daemon's last PACE, 1 .. 99; 0: not paced */
};

/* standalone.c: the daemon this process started, under the client's lock. */
struct shim_standalone {
        pid_t pid;       /* the daemon this process started; -1 the parent's (after fork) */
        int lifeline_fd; /* write end, held until this process ends */
        int err;         /* the daemon could not start or is gone: no second one */
        char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
        char dir[sizeof(((struct sockaddr_un *)0)->sun_path) - sizeof("/kvtierd.sock") + 1];
        char binary[4096]; /* the kvtierd run, or the last one looked for */
};

struct trace;

/* ssd.c: the SSD tier's connection, staging buffer and spills. */
struct ssd_handle;
struct shim_ssd {
        /* The connection and the staging buffer: one spill or restore at a
         * time.  Lock order: io_lock, then lock. */
        pthread_mutex_t io_lock;
        int fd;
        unsigned gen;                       /* sessions so far (a re-attached one is the same session) */
        uint8_t token[KVT_SSD_TOKEN_BYTES]; /* the session's, from SSD_WELCOME */
        uint64_t max_handle;                /* the highest handle given to this process */
        uint64_t *pending_drops;            /* of the session, not told yet: the daemon was away */
        size_t n_pending, cap_pending;
        uint32_t seq;
        int staging_fd;
        char *staging;
        uint64_t block_bytes, piece_bytes;
        unsigned halves;
        bool pinned, huge_warned;
        cudaStream_t streams[KVT_MAX_GPUS];
        /* The spills and the restore queue. */
        pthread_mutex_t lock;
        pthread_cond_t changed;
        struct ssd_handle *handles;
        struct ssd_handle *queue_head, *queue_tail;
        bool worker_running;
};

struct kvt_shim {
        struct shim_config cfg;      /* env.c, filled by the constructor */
        struct classify_rules rules; /* classify.c: KVTIER_MIN_SIZE, then the daemon's [capture] */
        unsigned rules_from_env;     /* CLASSIFY_ENV_*: rules the environment set */
        struct shim_owner_ops owner; /* shim.c */
        /* shim.c: held around "make memory + REGION_ADD" and "release
         * memory + REGION_DEL", so that the daemon never hears of an address
         * reused before it heard it was freed. */
        pthread_mutex_t announce_lock;
        struct shim_client client;
        struct shim_regions regions;
        struct shim_heat heat;
        struct shim_vmm vmm;
        struct shim_deferred deferred;
        struct shim_cupti cupti;
        struct shim_launch launch;
        struct shim_standalone standalone;
        /* exit.c: the process has begun to exit (an atexit handler
         * registered by the mover's pipeline or the reaper, once the CUDA
         * runtime is up, runs before the runtime's own teardown); the shim
         * threads' CUDA calls under way, which it waits for; exit_hook_pid:
         * the process that registered it (a forked child registers its own) */
        _Atomic bool exiting;
        _Atomic unsigned cuda_calls;
        _Atomic pid_t exit_hook_pid;
        /* evictors.c: per GPU, the host NUMA nodes (bit n: node n) the
         * driver refused as a location; plain host memory for them */
        _Atomic uint64_t numa_refused[KVT_MAX_GPUS];
        struct trace *trace; /* trace.c: the recorder, or NULL */
        struct shim_ssd ssd;  /* ssd.c */
};

extern struct kvt_shim kvt_shim_state __attribute__((visibility("hidden")));

/* The state object. */
static inline struct kvt_shim *kvt_shim(void) {
        return &kvt_shim_state;
}

/* Make "allocate + REGION_ADD" and "free + REGION_DEL" atomic towards each
 * other: otherwise a thread could be handed an address another thread just
 * freed and announce it before the other announced the free, and the
 * daemon would see two regions overlap. */
static inline void shim_announce_lock(void) {
        pthread_mutex_lock(&kvt_shim()->announce_lock);
}

static inline void shim_announce_unlock(void) {
        pthread_mutex_unlock(&kvt_shim()->announce_lock);
}
