/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <inttypes.h>
#include <pwd.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "conf.h"
#include "log.h"
#include "policy.h"
#include "protocol.h"
#include "util.h"

enum conf_type {
        CONF_PATH,   /* absolute path that fits a sockaddr_un */
        CONF_LEVEL,  /* log level name */
        CONF_UINT,   /* integer in [min, max] */
        CONF_BYTES,  /* byte count in [min, max] */
        CONF_BUDGET, /* byte count in [min, max] or "N%" */
        CONF_POLICY, /* policy name */
        CONF_PREFETCH, /* "none" or "sequential" (covers strided streams) */
        CONF_EVICT,    /* "host-mapped" or "host" */
        CONF_APIS,     /* API families: a list of runtime, driver, async, vmm; or all, none */
        CONF_NODE_BUDGET, /* as CONF_BUDGET, or "none" */
        CONF_UID,      /* a user name or number */
        CONF_GID,      /* a group name or number */
        CONF_UNIT,     /* a systemd unit name: NAME.service or NAME.scope */
        CONF_GROUP_NAME, /* a group name, looked up when used; "" for none */
        CONF_COMPRESS,   /* "none", "zstd" or "lz4" */
};

#define CONF_UNSET_ID ((uint32_t)-1)

/* A [client.NAME] section.  It matches a peer on what the kernel says of it
 * (uid, gid, systemd unit: every key set must match); NAME is a label, never
 * compared with the name a client sends, which it chooses itself. */
struct client_conf {
        char name[KVT_NAME_MAX];
        uint32_t uid, gid; /* CONF_UNSET_ID: any */
        char unit[CONF_UNIT_MAX]; /* "": any */
        unsigned priority;
        uint64_t quota_bytes;
        bool has_quota;
        uint64_t max_registered; /* 0: the [daemon] quotas */
};

#define CONF_MAX_CLIENTS 16

struct conf {
        char socket[sizeof(((struct sockaddr_un *)0)->sun_path)];
        int log_level;
        unsigned tick_ms;
        struct budget_spec vram_budget;
        struct budget_spec gpu_vram_budget[KVT_MAX_GPUS];
        uint64_t gpu_configured; /* bit N: a [gpu.N] section set a key */
        struct budget_spec node_host_budget[KVT_MAX_NODES];
        uint64_t node_limited; /* bit N: [numa.N] host_budget is set, and not to none */
        char policy[16];
        uint64_t max_migration_rate;
        uint64_t host_budget;
        uint64_t capture_min_size, capture_after, max_captured;
        uint32_t capture_apis; /* KVT_API_FAMILY_* */
        unsigned hysteresis_ticks;
        unsigned heat_half_life_ticks;
        uint64_t window_bytes;
        unsigned prefetch; /* 0 none, 1 sequential */
        unsigned prefetch_depth;
        unsigned evict_unmapped; /* [policy] evict_to = host */
        unsigned threads;        /* [policy] threads: 0 = auto */
        struct budget_spec overlap; /* [policy] overlap: bytes, or a percentage of the budget */
        struct budget_spec capture_margin; /* [gpu] capture_margin: bytes, or a percentage of the budget */
        unsigned yield_percent;            /* [gpu] yield_percent */
        unsigned protect_min_ms, protect_max_ms; /* [policy] demand's thrash guard */
        unsigned rearm_rate, probe_rate;         /* [policy] demand's sampler, per second */
        char admin_group[64];
        struct conf_limits limits;
        struct conf_quotas quotas;
        struct conf_ssd ssd;
        struct client_conf clients[CONF_MAX_CLIENTS];
        size_t n_clients;
        bool strict; /* unknown keys and sections are errors (kvtierd --check-config) */
};

struct conf_key {
        const char *section; /* "gpu.N" matches [gpu.0] .. [gpu.63], "numa.N" [numa.0] .. [numa.63] */
        const char *key;
        enum conf_type type;
        uint64_t min, max;
        const char *def;
        const char *help;
        size_t offset; /* of the value in struct conf; for gpu.N and numa.N, of element 0 */
};

#define GIB (1ull << 30)
#define TIB (1ull << 40)

/* [ssd] compress values, by enum conf_compress. */
static const char *const compress_names[] = {"none", "zstd", "lz4"};

const char *conf_compress_name(unsigned compress) {
        return compress < ELEMENTSOF(compress_names) ? compress_names[compress] : "?";
}

static const struct conf_key conf_table[] = {
        {"daemon", "socket", CONF_PATH, 0, 0, KVT_RUNSTATEDIR "/kvtier/kvtierd.sock",
         "Control and shim socket (AF_UNIX SOCK_SEQPACKET)", offsetof(struct conf, socket)},
        {"daemon", "log_level", CONF_LEVEL, 0, 0, "info", "err, warning, notice, info or debug",
         offsetof(struct conf, log_level)},
        {"daemon", "tick_ms", CONF_UINT, 1, 10000, "10", "Planning period in milliseconds",
         offsetof(struct conf, tick_ms)},
        {"daemon", "max_connections", CONF_UINT, 16, 1000000, "1088",
         "Connections open at once, shims and kvtierctl together (a shim's heat table takes one more "
         "descriptor: kvtierd raises its soft RLIMIT_NOFILE to the hard limit and warns when that is below "
         "twice this plus 64; accepts pause, not spin, when descriptors run out)",
         offsetof(struct conf, limits.max_connections)},
        {"daemon", "max_connections_per_uid", CONF_UINT, 1, 1000000, "128",
         "Connections one user may hold open (root, kvtierd's own user and admin_group: "
         "max_connections only)",
         offsetof(struct conf, limits.max_per_uid)},
        {"daemon", "reserved_connections", CONF_UINT, 0, 1000, "16",
         "Of max_connections, those only root, kvtierd's own user and admin_group may take: "
         "kvtierctl reaches a daemon that other users filled",
         offsetof(struct conf, limits.reserved)},
        {"daemon", "hello_timeout_ms", CONF_UINT, 50, 600000, "5000",
         "A connection that sent neither HELLO nor a control request within this many milliseconds "
         "is closed",
         offsetof(struct conf, limits.hello_timeout_ms)},
        {"daemon", "send_queue_max", CONF_BYTES, 4096, GIB, "1M",
         "Bytes queued at most for a connection that does not read (a status reply is made as the socket "
         "drains and does not count); past that it is closed",
         offsetof(struct conf, limits.send_queue_max_bytes)},
        {"daemon", "send_timeout_ms", CONF_UINT, 100, 3600000, "30000",
         "A connection with messages waiting for it that takes none of them for this many "
         "milliseconds is closed",
         offsetof(struct conf, limits.send_timeout_ms)},
        {"daemon", "log_rate_limit_interval_ms", CONF_UINT, 0, 3600000, "10000",
         "What one user's connections make kvtierd log: at most log_rate_limit_burst lines per this many "
         "milliseconds, the rest counted and reported (0 = no limit)",
         offsetof(struct conf, limits.log_interval_ms)},
        {"daemon", "log_rate_limit_burst", CONF_UINT, 1, 1000000, "200",
         "Lines per log_rate_limit_interval_ms logged for one user",
         offsetof(struct conf, limits.log_burst)},
        {"daemon", "max_registered_per_uid", CONF_BYTES, 0, 1024 * 1024 * TIB, "0",
         "Bytes one user's processes may register with kvtierd together; a REGION_ADD past it is refused "
         "(the shim's allocation stays as CUDA made it, untiered); 0 = four times the VRAM budgets of the "
         "GPUs known plus [host] host_budget",
         offsetof(struct conf, quotas.per_uid_bytes)},
        {"daemon", "max_registered_per_client", CONF_BYTES, 0, 1024 * 1024 * TIB, "0",
         "Bytes one process (connection) may register; 0 = as max_registered_per_uid",
         offsetof(struct conf, quotas.per_client_bytes)},
        {"daemon", "max_regions_per_client", CONF_UINT, 1, 65536, "4096",
         "Regions one process may register; a REGION_ADD past it is refused",
         offsetof(struct conf, quotas.max_regions)},
        {"daemon", "max_chunks", CONF_UINT, 1, 1u << 31, "16777216",
         "2 MiB chunks registered by all clients together, what the planner may take (16 bytes of state "
         "each); a REGION_ADD past it is refused",
         offsetof(struct conf, quotas.max_chunks)},
        {"daemon", "order_timeout_ms", CONF_UINT, 10, 3600000, "30000",
         "An order a client has not answered within this many milliseconds is taken back: its chunks are "
         "booked as unplaced, charged nowhere, and a late answer is ignored",
         offsetof(struct conf, quotas.order_timeout_ms)},
        {"daemon", "max_order_timeouts", CONF_UINT, 1, 1000000, "3",
         "A client with this many orders timed out is disconnected",
         offsetof(struct conf, quotas.max_order_timeouts)},
        {"daemon", "admin_group", CONF_GROUP_NAME, 0, 0, "kvtier-admin",
         "Members of this group (besides root and kvtierd's own user) may change settings with "
         "kvtierctl set; empty = root only",
         offsetof(struct conf, admin_group)},
        {"gpu", "vram_budget", CONF_BUDGET, 0, 16 * TIB, "80%",
         "VRAM per GPU for kvtier's chunks: bytes (8G, 1.5G) or a percentage of the device total",
         offsetof(struct conf, vram_budget)},
        {"gpu.N", "vram_budget", CONF_BUDGET, 0, 16 * TIB, NULL,
         "Override of [gpu] vram_budget for GPU N (0..63)", offsetof(struct conf, gpu_vram_budget)},
        {"gpu", "capture_margin", CONF_BUDGET, 0, 16 * TIB, "25%",
         "How far over the budget new allocations may start in VRAM, where chunks nothing used lately "
         "can make room (the planner evicts those behind them): bytes or a percentage of the budget; "
         "0 = new allocations start in VRAM only within the budget",
         offsetof(struct conf, capture_margin)},
        {"gpu", "yield_percent", CONF_UINT, 1, 100, "5",
         "While a client of higher [client.NAME] priority is busy on a GPU, each client of lower priority "
         "there has its kernel launches paced so that its kernels take about this percentage of the time "
         "(kernels of two processes share a GPU by time slices, so a busy neighbour slows every kernel); "
         "100 = no pacing",
         offsetof(struct conf, yield_percent)},
        {"policy", "name", CONF_POLICY, 0, 0, "demand",
         "Placement policy: demand (what the GPU is seen to use: faults on evicted chunks, launches, "
         "probes; a thrash guard keeps it at least as fast as reading host memory in place), lru, "
         "heat (decayed access counts), window (newest bytes of each region) or hybrid (heat, window "
         "of active regions, prefetch)",
         offsetof(struct conf, policy)},
        {"host", "host_budget", CONF_BYTES, 0, 1024 * TIB, "0",
         "Host memory a shim may count on for KVTIER_CAPACITY=auto (VRAM budget plus this); 0 = half of RAM",
         offsetof(struct conf, host_budget)},
        {"numa.N", "host_budget", CONF_NODE_BUDGET, 0, 1024 * TIB, NULL,
         "Host memory of NUMA node N (0..63) that evicted chunks may hold: bytes, a percentage of the "
         "node's MemTotal, or none (no limit, the default).  Evictions go to the GPU's home node while it "
         "has room, else to the nearest node with room, else they wait",
         offsetof(struct conf, node_host_budget)},
        {"capture", "min_size", CONF_BYTES, 1, 16 * TIB, "64M",
         "Shims capture allocations of at least this many bytes (KVTIER_MIN_SIZE overrides)",
         offsetof(struct conf, capture_min_size)},
        {"capture", "capture_after", CONF_BYTES, 0, 16 * TIB, "0",
         "The first bytes a process allocates stay plain, so weights loaded first are not tiered",
         offsetof(struct conf, capture_after)},
        {"capture", "max_captured", CONF_BYTES, 0, 16 * TIB, "0",
         "At most this many bytes captured per process at once; 0 = no limit",
         offsetof(struct conf, max_captured)},
        {"capture", "apis", CONF_APIS, 0, 0, "all",
         "Allocation APIs shims capture: a list of runtime (cudaMalloc), driver (cuMemAlloc), async "
         "(cudaMallocAsync, cuMemAllocAsync and their pool forms), vmm (tracking of cuMemMap); or all, none",
         offsetof(struct conf, capture_apis)},
        {"policy", "max_migration_rate", CONF_BYTES, 0, 1024 * GIB, "40G",
         "Bytes per second over all GPUs, both directions together; 0 = unlimited",
         offsetof(struct conf, max_migration_rate)},
        {"policy", "hysteresis_ticks", CONF_UINT, 0, 1000000, "2",
         "heat, hybrid: ticks a chunk stays where it was last moved", offsetof(struct conf, hysteresis_ticks)},
        {"policy", "heat_half_life_ticks", CONF_UINT, 1, 1000000, "10",
         "heat, hybrid: ticks after which a chunk's access count counts half",
         offsetof(struct conf, heat_half_life_ticks)},
        {"policy", "window", CONF_BYTES, 0, 16 * TIB, "512M",
         "window, hybrid: newest bytes of each region kept in VRAM (the KV append point)",
         offsetof(struct conf, window_bytes)},
        {"policy", "prefetch", CONF_PREFETCH, 0, 0, "sequential",
         "Promote ahead of sequential and strided access streams (sequential) or not (none)",
         offsetof(struct conf, prefetch)},
        {"policy", "prefetch_depth", CONF_UINT, 1, 64, "4", "Strides promoted ahead of a stream",
         offsetof(struct conf, prefetch_depth)},
        {"policy", "evict_to", CONF_EVICT, 0, 0, "host-mapped",
         "Where evicted chunks go: host-mapped (the GPU reads them over the link at once, its first "
         "touch of each faulting on one 4 KiB page so that the use is seen; re-arms sample later ones) "
         "or host (unmapped: the GPU's next touch faults and maps them 4 KiB at a "
         "time, ~40x slower than reading mapped memory on the H200)",
         offsetof(struct conf, evict_unmapped)},
        {"policy", "threads", CONF_UINT, 0, POLICY_THREADS_MAX, "0",
         "Threads that share the per-chunk passes of a policy tick (plans do not depend on it); 0 = auto: "
         "the CPUs kvtierd may run on, at most 4, one per 64K chunks; 1 = the tick's own thread only",
         offsetof(struct conf, threads)},
        {"policy", "overlap", CONF_BUDGET, 0, 16 * TIB, "0",
         "VRAM over each GPU's budget that promotions may take while evictions are under way that bring it "
         "back (at most the bytes those evictions free), so that newly wanted chunks do not wait for them: "
         "bytes or a percentage of the budget; 0 = the budget is never exceeded",
         offsetof(struct conf, overlap)},
        {"policy", "protect_min", CONF_UINT, 1, 600000, "200",
         "demand: milliseconds a use keeps a chunk where it is at the least, and the window in which an "
         "evicted chunk that faults again counts as a refault",
         offsetof(struct conf, protect_min_ms)},
        {"policy", "protect_max", CONF_UINT, 1, 3600000, "60000",
         "demand: milliseconds the thrash guard may stretch that protection to while evictions keep "
         "coming back (each client's guard, by its own evictions)",
         offsetof(struct conf, protect_max_ms)},
        {"policy", "rearm_rate", CONF_UINT, 0, 1000000, "25600",
         "demand: host chunks per second, at most, whose GPU mapping of one 4 KiB page is dropped so "
         "that their next use is seen (a re-arm: 7-80 us of an evictor thread's driver time each alone); "
         "fewer where a shim makes them slower: no more than a tick's share of one client's is in flight; an eighth "
         "while demands wait for room, so that probes go first; 0 = none",
         offsetof(struct conf, rearm_rate)},
        {"policy", "probe_rate", CONF_UINT, 0, 100000, "800",
         "demand: cohorts of chunks in VRAM per second probed (one order, one 4 KiB page of each chunk "
         "sent to the host): a chunk used soon is in use, one unused is cold; fewer while most come "
         "back, and no more than a tick's share of one client's in flight; 0 = none",
         offsetof(struct conf, probe_rate)},
        {"host", "hugepages", CONF_UINT, 0, 1u << 20, "0",
         "2 MiB hugepages kvtierd keeps in the pool of each host NUMA node (raised to at least this at start "
         "through nodeN/hugepages in sysfs, where kvtierd may write there) for shims' SSD staging buffers, "
         "256 MiB (128 pages) each; 0 = none reserved: staging takes hugepages already free, else transparent "
         "hugepages, else 4 KiB pages",
         offsetof(struct conf, ssd.hugepages)},
        {"ssd", "dir", CONF_PATH, 0, 0, "/var/lib/kvtier/ssd",
         "Directory of the SSD tier's files (a data file and an index per client, 0600): deleted when the "
         "client ends, kept over a restart of kvtierd for the client to take back; created 0700 if missing.  "
         "Clients never see it; kvtierd.service's StateDirectory=kvtier",
         offsetof(struct conf, ssd.dir)},
        {"ssd", "reattach_grace", CONF_UINT, 1, 86400, "120",
         "Seconds a restarted kvtierd keeps the spills of a client that is still running (those of one that "
         "ended are deleted at start) for it to reconnect and take them back; then they are deleted",
         offsetof(struct conf, ssd.reattach_grace_s)},
        {"ssd", "max_per_uid", CONF_BYTES, 0, 1024 * 1024 * TIB, "256G",
         "Bytes one user's processes may hold spilled together (kvtier_spill past it fails with EDQUOT); "
         "0 = the SSD tier is off",
         offsetof(struct conf, ssd.per_uid_bytes)},
        {"ssd", "max_per_client", CONF_BYTES, 0, 1024 * 1024 * TIB, "0",
         "Bytes one process may hold spilled; 0 = as max_per_uid",
         offsetof(struct conf, ssd.per_client_bytes)},
        {"ssd", "queue_depth", CONF_UINT, 1, 4096, "32",
         "I/Os in flight per client (io_uring queue depth; pread/pwrite one at a time where io_uring is "
         "unavailable)",
         offsetof(struct conf, ssd.queue_depth)},
        {"ssd", "block_size", CONF_BYTES, 64 * 1024, 64 * 1024 * 1024, "1M",
         "Unit of checksums (XXH3-64) and compression, rounded down to a multiple of 4 KiB",
         offsetof(struct conf, ssd.block_bytes)},
        {"ssd", "compress", CONF_COMPRESS, 0, 0, "none",
         "Lossless compression of spilled blocks: none, zstd (smaller) or lz4 (faster) (a block that does "
         "not shrink is stored as it is)",
         offsetof(struct conf, ssd.compress)},
        {"ssd", "compress_level", CONF_UINT, 1, 19, "1", "zstd level of compress = zstd (lz4 has none)",
         offsetof(struct conf, ssd.compress_level)},
        {"client.NAME", "uid", CONF_UID, 0, 0, NULL,
         "Processes of this user (a name or a number) take this section (up to 16 sections, the first "
         "that matches wins; NAME is only a label: the name a client sends is its own choice and matches "
         "nothing; a section without uid, gid or unit matches no process)",
         offsetof(struct client_conf, uid)},
        {"client.NAME", "gid", CONF_GID, 0, 0, NULL,
         "Processes with this group (a name or a number), primary or supplementary, take this section",
         offsetof(struct client_conf, gid)},
        {"client.NAME", "unit", CONF_UNIT, 0, 0, NULL,
         "Processes of this systemd system unit (vllm.service) take this section: the first unit in their "
         "cgroup path, as sd_pid_get_unit() names it",
         offsetof(struct client_conf, unit)},
        {"client.NAME", "priority", CONF_UINT, 0, 7, NULL,
         "Processes of the section: their chunks rank above those of lower priorities",
         offsetof(struct client_conf, priority)},
        {"client.NAME", "quota", CONF_BYTES, 0, 16 * TIB, NULL,
         "Processes of the section: most VRAM their chunks may hold, each GPU",
         offsetof(struct client_conf, quota_bytes)},
        {"client.NAME", "max_registered", CONF_BYTES, 0, 1024 * 1024 * TIB, NULL,
         "Processes of the section: bytes each may register, in place of [daemon] "
         "max_registered_per_client and max_registered_per_uid; 0 = those",
         offsetof(struct client_conf, max_registered)},
};

static void format_bytes_exact(char *buf, size_t len, uint64_t b) {
        static const char units[] = "KMGTP";
        int u = -1;

        while (b && b % 1024 == 0 && u + 1 < (int)sizeof(units) - 1) {
                b /= 1024;
                u++;
        }
        if (u < 0)
                snprintf(buf, len, "%" PRIu64, b);
        else
                snprintf(buf, len, "%" PRIu64 "%c", b, units[u]);
}

static void format_budget(char *buf, size_t len, const struct budget_spec *b) {
        if (b->percent)
                snprintf(buf, len, "%u%%", b->percent);
        else
                format_bytes_exact(buf, len, b->bytes);
}

/* Edits (insertions, deletions, substitutions) from a to b, counted up to 3. */
static unsigned edit_distance(const char *a, const char *b) {
        size_t la = strlen(a), lb = strlen(b);
        unsigned row[64];

        if (la >= ELEMENTSOF(row) || lb >= ELEMENTSOF(row))
                return 3;
        for (size_t j = 0; j <= lb; j++)
                row[j] = (unsigned)j;
        for (size_t i = 1; i <= la; i++) {
                unsigned diag = row[0];

                row[0] = (unsigned)i;
                for (size_t j = 1; j <= lb; j++) {
                        unsigned up = row[j];

                        row[j] = MIN(MIN(row[j] + 1, row[j - 1] + 1), diag + (a[i - 1] != b[j - 1]));
                        diag = up;
                }
        }
        return MIN(row[lb], 3u);
}

/* The table's name for a section as written: "gpu.N" for [gpu.3],
 * "client.NAME" for [client.vllm], else itself. */
static const char *section_template(const char *section) {
        if (strncmp(section, "gpu.", 4) == 0)
                return "gpu.N";
        if (strncmp(section, "numa.", 5) == 0)
                return "numa.N";
        if (strncmp(section, "client.", 7) == 0)
                return "client.NAME";
        return section;
}

bool conf_section_known(const char *section) {
        const char *t = section_template(section);

        for (size_t i = 0; i < ELEMENTSOF(conf_table); i++)
                if (strcmp(conf_table[i].section, t) == 0)
                        return true;
        return false;
}

/* " (did you mean X?)" for the name nearest to name (at most 2 edits
 * away) among the table's sections (key NULL) or the keys of section;
 * "" when none is near. */
static void name_suggest(const char *section, const char *key, char *buf, size_t len) {
        const char *best = NULL, *t = section_template(section);
        unsigned best_d = 3;

        for (size_t i = 0; i < ELEMENTSOF(conf_table); i++) {
                const char *cand = key ? conf_table[i].key : conf_table[i].section;
                unsigned d;

                if (key && strcmp(conf_table[i].section, t) != 0)
                        continue;
                d = edit_distance(key ? key : section, cand);
                if (d < best_d) {
                        best_d = d;
                        best = cand;
                }
        }
        if (!best)
                buf[0] = '\0';
        else if (key)
                snprintf(buf, len, " (did you mean %s?)", best);
        else
                snprintf(buf, len, " (did you mean [%s]?)", best);
}

/* Parses "PREFIX.N" (prefix "gpu." or "numa."): N, or -ENOENT if section
 * is not of that form, or -ERANGE when N is not below max. */
static int section_index(const char *section, const char *prefix, unsigned max) {
        size_t len = strlen(prefix);
        char *end;
        unsigned long n;

        if (strncmp(section, prefix, len) != 0)
                return -ENOENT;
        if (!isdigit((unsigned char)section[len]))
                return -ERANGE;
        errno = 0;
        n = strtoul(section + len, &end, 10);
        if (errno || *end || n >= max)
                return -ERANGE;
        return (int)n;
}

static const struct conf_key *key_find(const char *section, const char *key, int index) {
        if (index >= 0)
                section = strncmp(section, "gpu.", 4) == 0 ? "gpu.N" : "numa.N";
        else if (strncmp(section, "client.", 7) == 0)
                section = "client.NAME";
        for (size_t i = 0; i < ELEMENTSOF(conf_table); i++)
                if (strcmp(conf_table[i].section, section) == 0 && strcmp(conf_table[i].key, key) == 0)
                        return &conf_table[i];
        return NULL;
}

static int parse_uint_range(const char *v, uint64_t min, uint64_t max, uint64_t *ret) {
        char *end;
        unsigned long long n;

        if (!isdigit((unsigned char)*v))
                return -EINVAL;
        errno = 0;
        n = strtoull(v, &end, 10);
        if (errno || *end)
                return -EINVAL;
        if (n < min || n > max)
                return -ERANGE;
        *ret = n;
        return 0;
}

/* Parses a byte count (64M, 8G) within [min, max]. */
static int parse_bytes_range(const char *v, uint64_t min, uint64_t max, uint64_t *ret) {
        uint64_t b;
        int r = parse_bytes(v, &b);

        if (r < 0)
                return r;
        if (b < min || b > max)
                return -ERANGE;
        *ret = b;
        return 0;
}

static int parse_budget(const struct conf_key *k, const char *v, struct budget_spec *ret) {
        unsigned pct;
        uint64_t b;
        int r;

        r = parse_percent(v, &pct);
        if (r == 0) {
                *ret = (struct budget_spec){.percent = pct};
                return 0;
        }
        if (r != -ENOENT)
                return r;
        r = parse_bytes_range(v, k->min, k->max, &b);
        if (r < 0)
                return r;
        *ret = (struct budget_spec){.bytes = b};
        return 0;
}

/* A user or group: a number, or a name looked up now.  Returns 0 or -EINVAL. */
static int parse_id(const char *v, bool user, uint32_t *ret) {
        uint64_t n;

        if (parse_uint_range(v, 0, UINT32_MAX - 1, &n) == 0) {
                *ret = (uint32_t)n;
                return 0;
        }
        if (user) {
                struct passwd *pw = getpwnam(v);

                if (!pw)
                        return -EINVAL;
                *ret = pw->pw_uid;
        } else {
                struct group *gr = getgrnam(v);

                if (!gr)
                        return -EINVAL;
                *ret = gr->gr_gid;
        }
        return 0;
}

/* NAME.service or NAME.scope, of the characters systemd allows in unit names. */
static bool unit_name_valid(const char *v) {
        size_t n = strlen(v);

        if (n == 0 || n >= CONF_UNIT_MAX)
                return false;
        for (const char *p = v; *p; p++)
                if (!isalnum((unsigned char)*p) && !strchr(":-_.\\@", *p))
                        return false;
        return (n > 8 && strcmp(v + n - 8, ".service") == 0) || (n > 6 && strcmp(v + n - 6, ".scope") == 0);
}

/* Parses v for key k and stores it at base + offset (element index of a
 * gpu.N or numa.N key); returns 0 or -EINVAL / -ERANGE. */
static int key_store(struct conf *c, void *base, const struct conf_key *k, int index, const char *v) {
        void *p = (char *)base + k->offset;
        uint64_t u;
        int r;

        switch (k->type) {
        case CONF_PATH:
                if (v[0] != '/')
                        return -EINVAL;
                if (strlen(v) >= sizeof(c->socket))
                        return -ERANGE;
                strcpy(p, v);
                return 0;
        case CONF_LEVEL:
                r = kvt_log_level_parse(v);
                if (r < 0)
                        return r;
                *(int *)p = r;
                return 0;
        case CONF_UINT:
                r = parse_uint_range(v, k->min, k->max, &u);
                if (r < 0)
                        return r;
                *(unsigned *)p = (unsigned)u;
                return 0;
        case CONF_BYTES:
                r = parse_bytes_range(v, k->min, k->max, &u);
                if (r < 0)
                        return r;
                *(uint64_t *)p = u;
                return 0;
        case CONF_BUDGET:
                if (index >= 0)
                        p = &((struct budget_spec *)p)[index];
                return parse_budget(k, v, p);
        case CONF_NODE_BUDGET:
                p = &((struct budget_spec *)p)[index];
                if (strcmp(v, "none") == 0) {
                        *(struct budget_spec *)p = (struct budget_spec){0};
                        return 0;
                }
                return parse_budget(k, v, p);
        case CONF_POLICY:
                if (policy_kind_from_name(v) < 0)
                        return -EINVAL;
                strcpy(p, v);
                return 0;
        case CONF_PREFETCH:
                if (strcmp(v, "none") != 0 && strcmp(v, "sequential") != 0)
                        return -EINVAL;
                *(unsigned *)p = strcmp(v, "sequential") == 0;
                return 0;
        case CONF_EVICT:
                if (strcmp(v, "host-mapped") != 0 && strcmp(v, "host") != 0)
                        return -EINVAL;
                *(unsigned *)p = strcmp(v, "host") == 0;
                return 0;
        case CONF_APIS:
                return kvt_api_families_parse(v, p);
        case CONF_UID:
        case CONF_GID:
                return parse_id(v, k->type == CONF_UID, p);
        case CONF_UNIT:
                if (!unit_name_valid(v))
                        return -EINVAL;
                strcpy(p, v);
                return 0;
        case CONF_GROUP_NAME:
                if (strlen(v) >= sizeof(c->admin_group))
                        return -ERANGE;
                strcpy(p, v);
                return 0;
        case CONF_COMPRESS:
                for (unsigned n = 0; n < ELEMENTSOF(compress_names); n++)
                        if (strcmp(v, compress_names[n]) == 0) {
                                *(unsigned *)p = n;
                                return 0;
                        }
                return -EINVAL;
        }
        return -EINVAL;
}

static const char *type_hint(const struct conf_key *k) {
        switch (k->type) {
        case CONF_PATH:
                return "an absolute path shorter than 108 bytes";
        case CONF_LEVEL:
                return "one of err, warning, notice, info, debug";
        case CONF_UINT:
                return "an integer in range";
        case CONF_BYTES:
                return "a byte count (64M, 8G, 1.5G) in range";
        case CONF_BUDGET:
                return "a byte count (64M, 8G, 1.5G) in range or a percentage (1%..100%)";
        case CONF_NODE_BUDGET:
                return "a byte count (64M, 8G, 1.5G) in range, a percentage (1%..100%) or none";
        case CONF_POLICY:
                return "one of demand, lru, heat, window, hybrid";
        case CONF_PREFETCH:
                return "none or sequential";
        case CONF_EVICT:
                return "host-mapped or host";
        case CONF_APIS:
                return "a comma list of runtime, driver, async, vmm; or all, or none";
        case CONF_UID:
                return "a user name or number";
        case CONF_GID:
                return "a group name or number";
        case CONF_UNIT:
                return "a unit name ending in .service or .scope";
        case CONF_GROUP_NAME:
                return "a group name shorter than 64 bytes";
        case CONF_COMPRESS:
                return "none, zstd or lz4";
        }
        return "?";
}

/* Stores a [client.NAME] key: into the section's entry, added on first use. */
static int client_store(struct conf *c, const char *name, const struct conf_key *k, const char *value) {
        struct client_conf tmp = {0};
        size_t i;
        int r;

        if (!*name || strlen(name) >= KVT_NAME_MAX)
                return -EINVAL;
        for (i = 0; i < c->n_clients; i++)
                if (strcmp(c->clients[i].name, name) == 0)
                        break;
        if (i == CONF_MAX_CLIENTS)
                return -E2BIG;
        if (i < c->n_clients)
                tmp = c->clients[i];
        else {
                strcpy(tmp.name, name);
                tmp.uid = tmp.gid = CONF_UNSET_ID;
        }
        r = key_store(c, &tmp, k, -1, value);
        if (r < 0)
                return r;
        if (strcmp(k->key, "quota") == 0)
                tmp.has_quota = true;
        c->clients[i] = tmp;
        if (i == c->n_clients)
                c->n_clients++;
        return 0;
}

/* The range of a key, as the file writes its values ("1..10000", "0..16T"); "" for keys without one. */
static void key_range(const struct conf_key *k, char *buf, size_t len) {
        char lo[32], hi[32];

        buf[0] = '\0';
        if (k->type == CONF_UINT)
                snprintf(buf, len, "%" PRIu64 "..%" PRIu64, k->min, k->max);
        else if (k->type == CONF_BYTES || k->type == CONF_BUDGET || k->type == CONF_NODE_BUDGET) {
                format_bytes_exact(lo, sizeof(lo), k->min);
                format_bytes_exact(hi, sizeof(hi), k->max);
                snprintf(buf, len, "%s..%s", lo, hi);
        }
}

int conf_set_reason(struct conf *c, const char *section, const char *key, const char *value, char *reason,
                    size_t len) {
        const struct conf_key *k;
        char hint[96];
        int gpu, node, r;

        gpu = section_index(section, "gpu.", KVT_MAX_GPUS);
        if (gpu == -ERANGE) {
                snprintf(reason, len, "invalid section [%s]: GPU index must be 0..%d", section,
                         KVT_MAX_GPUS - 1);
                return -ERANGE;
        }
        node = section_index(section, "numa.", KVT_MAX_NODES);
        if (node == -ERANGE) {
                snprintf(reason, len, "invalid section [%s]: NUMA node must be 0..%d", section,
                         KVT_MAX_NODES - 1);
                return -ERANGE;
        }
        if (!conf_section_known(section)) {
                name_suggest(section, NULL, hint, sizeof(hint));
                snprintf(reason, len, "unknown section [%s]%s", section, hint);
                return -ENOENT;
        }
        k = key_find(section, key, gpu >= 0 ? gpu : node);
        if (!k) {
                name_suggest(section, key, hint, sizeof(hint));
                snprintf(reason, len, "unknown key [%s] %s%s", section, key, hint);
                return -ENOENT;
        }
        if (strcmp(k->section, "client.NAME") == 0)
                r = client_store(c, section + 7, k, value);
        else
                r = key_store(c, c, k, gpu >= 0 ? gpu : node, value);
        if (r < 0) {
                char range[80];

                key_range(k, range, sizeof(range));
                if (r == -ERANGE && range[0])
                        snprintf(reason, len, "[%s] %s = %s is out of range %s", section, key, value, range);
                else if (r == -E2BIG)
                        snprintf(reason, len, "[%s]: at most %d [client.NAME] sections", section,
                                 CONF_MAX_CLIENTS);
                else
                        snprintf(reason, len, "invalid [%s] %s = %s: expected %s", section, key, value,
                                 type_hint(k));
                return r;
        }
        if (gpu >= 0)
                c->gpu_configured |= 1ull << gpu;
        if (node >= 0 && strcmp(value, "none") == 0)
                c->node_limited &= ~(1ull << node);
        else if (node >= 0)
                c->node_limited |= 1ull << node;
        return 0;
}

int conf_set(struct conf *c, const char *section, const char *key, const char *value, const char *why) {
        char reason[512];
        int r = conf_set_reason(c, section, key, value, reason, sizeof(reason));

        if (r < 0 && r != -ENOENT)
                log_error("%s: %s.", why, reason);
        return r;
}

int conf_set_option(struct conf *c, const char *option) {
        char buf[512], reason[512];
        char *eq, *dot;
        int r;

        if (strlen(option) >= sizeof(buf))
                return log_error_errno(EINVAL, "-o %s: too long.", option);
        strcpy(buf, option);
        eq = strchr(buf, '=');
        if (eq)
                *eq = '\0';
        dot = strrchr(buf, '.');
        if (!eq || !dot || dot == buf || !dot[1])
                return log_error_errno(EINVAL, "-o %s: expected SECTION.KEY=VALUE.", option);
        *dot = '\0';
        r = conf_set_reason(c, buf, dot + 1, eq + 1, reason, sizeof(reason));
        if (r < 0)
                log_error("-o %s: %s.", option, reason);
        return r;
}

int conf_new(struct conf **ret) {
        struct conf *c = calloc(1, sizeof(*c));

        if (!c)
                return -ENOMEM;
        for (size_t i = 0; i < ELEMENTSOF(conf_table); i++) {
                const struct conf_key *k = &conf_table[i];
                int r;

                if (!k->def)
                        continue;
                r = key_store(c, c, k, -1, k->def);
                if (r < 0) {
                        free(c);
                        return r; /* a bad built-in default is a bug */
                }
        }
        *ret = c;
        return 0;
}

struct conf *conf_free(struct conf *c) {
        free(c);
        return NULL;
}

struct load_ctx {
        struct conf *conf;
        const char *path;
        FILE *f;
        unsigned line;  /* line of the text inih handed out last */
        bool line_done; /* the last piece read ended a line */
        int read_errno; /* a read that failed, or 0 */
        unsigned n_errors;
        char header[256];       /* the last "[section]" line read: its name, */
        unsigned header_line;   /* and line */
        unsigned reported_line; /* header line of the unknown section reported last */
};

/* A line that opens a section, as inih reads it ("[name]" after blanks):
 * its name into ctx->header. */
static void load_note_header(struct load_ctx *ctx, const char *s) {
        const char *end;

        while (isspace((unsigned char)*s))
                s++;
        if (*s != '[' || !(end = strchr(s, ']')))
                return;
        snprintf(ctx->header, sizeof(ctx->header), "%.*s", (int)(end - s - 1), s + 1);
        ctx->header_line = ctx->line;
}

/* fgets that counts lines, so that the handler can name file:line. */
static char *load_reader(char *str, int num, void *stream) {
        struct load_ctx *ctx = stream;
        char *s = fgets(str, num, ctx->f);

        if (!s) {
                if (ferror(ctx->f))
                        ctx->read_errno = errno ? errno : EIO;
                return NULL;
        }
        if (ctx->line_done) {
                ctx->line++;
                load_note_header(ctx, s);
        }
        ctx->line_done = strchr(s, '\n') != NULL;
        return s;
}

/* inih keeps " # comment" in values (only ';' starts an inline comment there). */
static void value_strip(char *v) {
        size_t n;

        for (char *p = v; *p; p++)
                if (*p == '#' && p > v && isspace((unsigned char)p[-1])) {
                        *p = '\0';
                        break;
                }
        n = strlen(v);
        while (n > 0 && isspace((unsigned char)v[n - 1]))
                v[--n] = '\0';
}

/* A problem that a strict load counts as an error and a daemon's load warns
 * of and skips ("..., ignoring."), as systemd does with unknown settings. */
static void load_unknown(struct load_ctx *ctx, unsigned line, const char *what, const char *ignored) {
        if (ctx->conf->strict) {
                log_error("%s:%u: %s.", ctx->path, line, what);
                ctx->n_errors++;
        } else
                log_warning("%s:%u: %s, ignoring%s.", ctx->path, line, what, ignored);
}

static int load_handler(void *user, const char *section, const char *name, const char *value) {
        struct load_ctx *ctx = user;
        char where[512], v[256], reason[512];
        int r;

        if (!conf_section_known(section)) {
                /* once per section: its keys are not reported one by one */
                char hint[64];
                unsigned line = strcmp(ctx->header, section) == 0 ? ctx->header_line : ctx->line;
                if (ctx->reported_line == line)
                        return 1;
                ctx->reported_line = line;
                name_suggest(section, NULL, hint, sizeof(hint));
                snprintf(reason, sizeof(reason), "unknown section [%s]%s", section, hint);
                load_unknown(ctx, line, reason, " its keys");
                return 1;
        }
        snprintf(where, sizeof(where), "%s:%u", ctx->path, ctx->line);
        if (strlen(value) >= sizeof(v)) {
                log_error("%s: value of [%s] %s is too long.", where, section, name);
                ctx->n_errors++;
                return 1;
        }
        strcpy(v, value);
        value_strip(v);
        r = conf_set_reason(ctx->conf, section, name, v, reason, sizeof(reason));
        if (r == -ENOENT)
                load_unknown(ctx, ctx->line, reason, "");
        else if (r < 0) {
                log_error("%s: %s.", where, reason);
                ctx->n_errors++;
        }
        /* Every problem is counted here: what inih returns is then its own
         * first syntax error. */
        return 1;
}

int conf_load(struct conf *c, const char *path, bool required) {
        struct load_ctx ctx = {.conf = c, .path = path, .line_done = true};
        struct stat st;
        int r;

        ctx.f = fopen(path, "re");
        if (!ctx.f) {
                if (errno == ENOENT && !required) {
                        log_debug("No config file %s, using defaults.", path);
                        return 0;
                }
                return log_error_errno(errno, "Failed to open config file %s: %s", path, strerror(errno));
        }
        /* fopen() opens a directory, and reading it then fails: not a file of no keys */
        if (fstat(fileno(ctx.f), &st) < 0 || S_ISDIR(st.st_mode)) {
                r = S_ISDIR(st.st_mode) ? EISDIR : errno;
                fclose(ctx.f);
                return log_error_errno(r, "Failed to read config file %s: %s", path, strerror(r));
        }
        r = ini_parse_stream(load_reader, &ctx, load_handler, &ctx);
        fclose(ctx.f);
        if (ctx.read_errno)
                return log_error_errno(ctx.read_errno, "Failed to read config file %s: %s", path,
                                       strerror(ctx.read_errno));
        if (r < 0)
                return log_error_errno(ENOMEM, "Failed to parse %s: %s", path, strerror(ENOMEM));
        if (r > 0) {
                /* inih reports syntax errors by line without calling the handler */
                log_error("%s:%d: syntax error (expected [section] or key = value).", path, r);
                ctx.n_errors++;
        }
        return ctx.n_errors ? -EINVAL : 0;
}

static void key_format(const void *base, const struct conf_key *k, int index, char *buf, size_t len) {
        const void *p = (const char *)base + k->offset;
        static const char *const levels[] = {"err", "warning", "notice", "info", "debug"};

        switch (k->type) {
        case CONF_PATH:
        case CONF_POLICY:
                snprintf(buf, len, "%s", (const char *)p);
                break;
        case CONF_LEVEL:
                snprintf(buf, len, "%s", levels[*(const int *)p - KVT_LOG_ERR]);
                break;
        case CONF_UINT:
                snprintf(buf, len, "%u", *(const unsigned *)p);
                break;
        case CONF_BYTES:
                format_bytes_exact(buf, len, *(const uint64_t *)p);
                break;
        case CONF_BUDGET:
        case CONF_NODE_BUDGET:
                format_budget(buf, len, index >= 0 ? &((const struct budget_spec *)p)[index] : p);
                break;
        case CONF_PREFETCH:
                snprintf(buf, len, "%s", *(const unsigned *)p ? "sequential" : "none");
                break;
        case CONF_EVICT:
                snprintf(buf, len, "%s", *(const unsigned *)p ? "host" : "host-mapped");
                break;
        case CONF_APIS:
                kvt_api_families_format(*(const uint32_t *)p, buf, len);
                break;
        case CONF_UID:
        case CONF_GID:
                snprintf(buf, len, "%" PRIu32, *(const uint32_t *)p);
                break;
        case CONF_UNIT:
        case CONF_GROUP_NAME:
                snprintf(buf, len, "%s", (const char *)p);
                break;
        case CONF_COMPRESS:
                snprintf(buf, len, "%s", conf_compress_name(*(const unsigned *)p));
                break;
        }
}

/* Hands k (element index of a gpu.N or numa.N key, else -1) of the
 * section written as section to fn, its value read at base (NULL: a
 * template's key, no value). */
static void entry_emit(const void *base, const struct conf_key *k, int index, const char *section,
                       conf_entry_fn fn, void *userdata) {
        char value[256], range[80];
        struct conf_entry e = {
                .section = section, .key = k->key, .def = k->def, .help = k->help, .range = range};

        key_range(k, range, sizeof(range));
        if (base) {
                key_format(base, k, index, value, sizeof(value));
                e.value = value;
        }
        fn(&e, userdata);
}

/* Whether a [client.NAME] key is set in cc (the rest are not printed). */
static bool client_key_set(const struct client_conf *cc, const struct conf_key *k) {
        if (k->type == CONF_UID)
                return cc->uid != CONF_UNSET_ID;
        if (k->type == CONF_GID)
                return cc->gid != CONF_UNSET_ID;
        if (k->type == CONF_UNIT)
                return cc->unit[0] != '\0';
        if (strcmp(k->key, "quota") == 0)
                return cc->has_quota;
        if (strcmp(k->key, "max_registered") == 0)
                return cc->max_registered != 0;
        return true;
}

/* Every key of the table section t (a template: gpu.N, numa.N, client.NAME;
 * or a plain section) as in effect in c. */
static void section_emit(const struct conf *c, const char *t, conf_entry_fn fn, void *userdata) {
        char name[KVT_NAME_MAX + 16];
        bool gpu = strcmp(t, "gpu.N") == 0, numa = strcmp(t, "numa.N") == 0;
        bool client = strcmp(t, "client.NAME") == 0;

        for (size_t i = 0; i < ELEMENTSOF(conf_table); i++)
                if (strcmp(conf_table[i].section, t) == 0 && (gpu || numa || client))
                        entry_emit(NULL, &conf_table[i], -1, t, fn, userdata);
        if (gpu || numa)
                for (int n = 0; n < 64; n++) {
                        if (!((gpu ? c->gpu_configured : c->node_limited) & (1ull << n)))
                                continue;
                        snprintf(name, sizeof(name), "%s.%d", gpu ? "gpu" : "numa", n);
                        for (size_t i = 0; i < ELEMENTSOF(conf_table); i++)
                                if (strcmp(conf_table[i].section, t) == 0)
                                        entry_emit(c, &conf_table[i], n, name, fn, userdata);
                }
        else if (client)
                for (size_t j = 0; j < c->n_clients; j++) {
                        snprintf(name, sizeof(name), "client.%s", c->clients[j].name);
                        for (size_t i = 0; i < ELEMENTSOF(conf_table); i++)
                                if (strcmp(conf_table[i].section, t) == 0 &&
                                    client_key_set(&c->clients[j], &conf_table[i]))
                                        entry_emit(&c->clients[j], &conf_table[i], -1, name, fn, userdata);
                }
        else
                for (size_t i = 0; i < ELEMENTSOF(conf_table); i++)
                        if (strcmp(conf_table[i].section, t) == 0)
                                entry_emit(c, &conf_table[i], -1, t, fn, userdata);
}

void conf_foreach(const struct conf *c, conf_entry_fn fn, void *userdata) {
        for (size_t i = 0; i < ELEMENTSOF(conf_table); i++) {
                bool first = true;

                /* each section once, where the table names it first */
                for (size_t j = 0; j < i && first; j++)
                        first = strcmp(conf_table[j].section, conf_table[i].section) != 0;
                if (first)
                        section_emit(c, conf_table[i].section, fn, userdata);
        }
}

struct print_ctx {
        FILE *f;
        char section[KVT_NAME_MAX + 16]; /* of the last key printed; "" after a template's */
        bool any;
};

/* Width of the comment lines conf_print() writes: inih reads a line in
 * pieces of INI_MAX_LINE (200) bytes, and a piece past that of a comment
 * would be read as a key. */
#define PRINT_WIDTH 100

/* Writes text as "# " comment lines of at most PRINT_WIDTH bytes, broken
 * at spaces (a word longer than a line gets one of its own). */
static void print_comment(FILE *f, const char *text) {
        while (*text) {
                size_t n = strlen(text), cut = n;

                if (n > PRINT_WIDTH - 2) {
                        cut = PRINT_WIDTH - 2;
                        while (cut > 0 && text[cut] != ' ')
                                cut--;
                        if (cut == 0)
                                cut = strcspn(text, " ");
                }
                fprintf(f, "# %.*s\n", (int)cut, text);
                text += cut;
                while (*text == ' ')
                        text++;
        }
}

static void print_entry(const struct conf_entry *e, void *userdata) {
        struct print_ctx *p = userdata;
        char text[1536];
        int n;

        if (!e->value) {
                /* a template's key: documented once, for sections that may be added */
                n = snprintf(text, sizeof(text), "[%s] %s: %s.", e->section, e->key, e->help);
                if (e->range[0] && n > 0 && (size_t)n < sizeof(text))
                        snprintf(text + n, sizeof(text) - (size_t)n, " Range %s.", e->range);
                fputc('\n', p->f);
                print_comment(p->f, text);
                p->section[0] = '\0';
                p->any = true;
                return;
        }
        if (strcmp(p->section, e->section) != 0)
                fprintf(p->f, "%s[%s]\n", p->any ? "\n" : "", e->section);
        snprintf(p->section, sizeof(p->section), "%s", e->section);
        p->any = true;
        n = snprintf(text, sizeof(text), "%s.", e->help);
        if (e->range[0] && n > 0 && (size_t)n < sizeof(text))
                n += snprintf(text + n, sizeof(text) - (size_t)n, " Range %s.", e->range);
        if (e->def && n > 0 && (size_t)n < sizeof(text))
                snprintf(text + n, sizeof(text) - (size_t)n, " Default: %s.", e->def);
        print_comment(p->f, text);
        fprintf(p->f, "%s = %s\n", e->key, e->value);
}

void conf_print(const struct conf *c, FILE *f) {
        struct print_ctx p = {.f = f};

        conf_foreach(c, print_entry, &p);
}

const char *conf_socket(const struct conf *c) {
        return c->socket;
}

int conf_log_level(const struct conf *c) {
        return c->log_level;
}

unsigned conf_tick_ms(const struct conf *c) {
        return c->tick_ms;
}

const char *conf_policy_name(const struct conf *c) {
        return c->policy;
}

uint64_t conf_host_budget(const struct conf *c) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);

        if (c->host_budget)
                return c->host_budget;
        return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : 0;
}

void conf_capture(const struct conf *c, uint64_t *ret_min_size, uint64_t *ret_after, uint64_t *ret_max) {
        *ret_min_size = c->capture_min_size;
        *ret_after = c->capture_after;
        *ret_max = c->max_captured;
}

uint32_t conf_capture_apis(const struct conf *c) {
        return c->capture_apis;
}

uint64_t conf_max_migration_rate(const struct conf *c) {
        return c->max_migration_rate;
}

bool conf_node_budget(const struct conf *c, int node, struct budget_spec *ret) {
        bool set = node >= 0 && node < KVT_MAX_NODES && (c->node_limited & (1ull << node));

        *ret = set ? c->node_host_budget[node] : (struct budget_spec){0};
        return set;
}

uint64_t conf_nodes_limited(const struct conf *c) {
        return c->node_limited;
}

void conf_gpu_budget(const struct conf *c, int device, struct budget_spec *ret, bool *ret_configured) {
        bool set = device >= 0 && device < KVT_MAX_GPUS && (c->gpu_configured & (1ull << device));

        *ret = set ? c->gpu_vram_budget[device] : c->vram_budget;
        if (ret_configured)
                *ret_configured = set;
}

/* A period in milliseconds as ticks, at least one. */
static uint32_t ms_to_ticks(const struct conf *c, unsigned ms) {
        unsigned t = ms / c->tick_ms;

        return t ? t : 1;
}

/* A rate per second as a whole number per tick: at least one where the rate is not 0. */
static uint32_t per_tick(const struct conf *c, unsigned per_s) {
        uint64_t n = (uint64_t)per_s * c->tick_ms / 1000;

        return per_s == 0 ? 0 : n ? (uint32_t)n : 1;
}

/* How long a region counts as in use after a use was seen in it: shorter
 * than a transformer layer takes to come round again in a long prefill, so
 * the KV of finished layers ranks below the activations in use. */
#define POLICY_ACTIVE_MS 40

void conf_policy_params(const struct conf *c, struct policy_params *ret) {
        int kind = policy_kind_from_name(c->policy);

        policy_params_default(kind < 0 ? POLICY_DEMAND : (enum policy_kind)kind, ret);
        ret->hysteresis_ticks = c->hysteresis_ticks;
        if (kind != POLICY_DEMAND) /* demand counts faults over its own, longer half-life */
                ret->heat_half_life_ticks = c->heat_half_life_ticks;
        ret->window_chunks = (uint32_t)MIN(c->window_bytes / KVT_CHUNK_BYTES, (uint64_t)UINT32_MAX);
        ret->prefetch_depth = c->prefetch ? c->prefetch_depth : 0;
        ret->evict_tier = c->evict_unmapped ? KVT_TIER_HOST : KVT_TIER_HOST_MAPPED;
        ret->threads = c->threads;
        ret->overlap_chunks = 0; /* a GPU's own: conf_overlap_bytes() of its budget */
        /* Keys that a policy does not use stay out of its decisions. */
        if (kind == POLICY_LRU || kind == POLICY_WINDOW)
                ret->hysteresis_ticks = 0;
        if (kind == POLICY_LRU || kind == POLICY_HEAT || kind == POLICY_DEMAND)
                ret->window_chunks = 0;
        if (kind == POLICY_DEMAND) {
                ret->prefetch_depth = 0;
                ret->active_ticks = ms_to_ticks(c, POLICY_ACTIVE_MS);
                ret->protect_min_ticks = ms_to_ticks(c, c->protect_min_ms);
                ret->protect_max_ticks = MAX(ms_to_ticks(c, c->protect_max_ms), ret->protect_min_ticks);
                ret->sample_chunks = per_tick(c, c->rearm_rate);
                ret->probe_cohorts = per_tick(c, c->probe_rate);
        }
}

/* b for a GPU of budget_bytes, in whole chunks. */
static uint64_t budget_share(const struct budget_spec *b, uint64_t budget_bytes) {
        uint64_t n = b->percent ? (uint64_t)((unsigned __int128)budget_bytes * b->percent / 100) : b->bytes;

        return n / KVT_CHUNK_BYTES * KVT_CHUNK_BYTES;
}

uint64_t conf_capture_margin(const struct conf *c, uint64_t budget_bytes) {
        return budget_share(&c->capture_margin, budget_bytes);
}

unsigned conf_yield_percent(const struct conf *c) {
        return c->yield_percent;
}

unsigned conf_protect_min_ticks(const struct conf *c) {
        return ms_to_ticks(c, c->protect_min_ms);
}

uint64_t conf_overlap_bytes(const struct conf *c, uint64_t budget_bytes) {
        return budget_share(&c->overlap, budget_bytes);
}

bool conf_policy_demand(const struct conf *c) {
        int kind = policy_kind_from_name(c->policy);

        return kind < 0 || kind == POLICY_DEMAND;
}

unsigned conf_heat_half_life_ticks(const struct conf *c) {
        struct policy_params pp;

        conf_policy_params(c, &pp);
        return pp.heat_half_life_ticks;
}

/* Whether section cc matches peer p: it names at least one identity, and
 * every one it names is p's. */
static bool client_matches(const struct client_conf *cc, const struct conf_peer *p) {
        bool in_group = false;

        if (cc->uid == CONF_UNSET_ID && cc->gid == CONF_UNSET_ID && !cc->unit[0])
                return false;
        if (cc->uid != CONF_UNSET_ID && cc->uid != p->uid)
                return false;
        if (cc->gid != CONF_UNSET_ID) {
                in_group = cc->gid == p->gid;
                for (size_t i = 0; !in_group && i < p->n_groups; i++)
                        in_group = cc->gid == p->groups[i];
                if (!in_group)
                        return false;
        }
        return !cc->unit[0] || (p->unit && strcmp(cc->unit, p->unit) == 0);
}

int conf_client_match(const struct conf *c, const struct conf_peer *p) {
        for (size_t i = 0; i < c->n_clients; i++)
                if (client_matches(&c->clients[i], p))
                        return (int)i;
        return -1;
}

bool conf_client(const struct conf *c, int section, unsigned *ret_priority, uint64_t *ret_quota_bytes) {
        const struct client_conf *cc;

        if (section < 0 || (size_t)section >= c->n_clients)
                return false;
        cc = &c->clients[section];
        *ret_priority = cc->priority;
        *ret_quota_bytes = cc->has_quota ? cc->quota_bytes : UINT64_MAX;
        return true;
}

const char *conf_client_label(const struct conf *c, int section) {
        return section >= 0 && (size_t)section < c->n_clients ? c->clients[section].name : NULL;
}

bool conf_clients_need_unit(const struct conf *c) {
        for (size_t i = 0; i < c->n_clients; i++)
                if (c->clients[i].unit[0])
                        return true;
        return false;
}

int conf_check(const struct conf *c) {
        int n = 0;

        if (c->limits.reserved >= c->limits.max_connections) {
                log_warning("[daemon] reserved_connections = %u leaves none of max_connections = %u "
                            "to other users, ignoring.",
                            c->limits.reserved, c->limits.max_connections);
                n++;
        }
        for (size_t i = 0; i < c->n_clients; i++) {
                const struct client_conf *cc = &c->clients[i];

                if (cc->uid == CONF_UNSET_ID && cc->gid == CONF_UNSET_ID && !cc->unit[0]) {
                        log_warning("[client.%s] has no uid, gid or unit: it matches no process (the name a "
                                    "client sends is a label it chooses, not an identity), ignoring.",
                                    cc->name);
                        n++;
                }
        }
        return n;
}

void conf_set_strict(struct conf *c, bool strict) {
        c->strict = strict;
}

void conf_quotas(const struct conf *c, struct conf_quotas *ret) {
        *ret = c->quotas;
}

void conf_ssd(const struct conf *c, struct conf_ssd *ret) {
        *ret = c->ssd;
        ret->block_bytes -= ret->block_bytes % KVT_SSD_ALIGN;
}

uint64_t conf_client_max_registered(const struct conf *c, int section) {
        return section >= 0 && (size_t)section < c->n_clients ? c->clients[section].max_registered : 0;
}

void conf_limits(const struct conf *c, struct conf_limits *ret) {
        *ret = c->limits;
        if (ret->reserved >= ret->max_connections)
                ret->reserved = 0;
}

const char *conf_admin_group(const struct conf *c) {
        return c->admin_group;
}

size_t conf_n_clients(const struct conf *c) {
        return c->n_clients;
}
