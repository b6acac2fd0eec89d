/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * kvtierd.conf: every key lives in one table {section, key, type, min, max,
 * default, help} (conf.c) that both validates and prints.  (Named conf, not
 * config, so that "config.h" keeps meaning autoconf's header.)
 */

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

struct conf;
struct policy_params;

/* A VRAM or host budget: a percentage of the device's (node's) total
 * (percent != 0) or bytes. */
struct budget_spec {
        unsigned percent;
        uint64_t bytes;
};

/* Returns 0 and a config holding every default in *ret, or -ENOMEM. */
int conf_new(struct conf **ret);

/* Frees c.  Accepts NULL; returns NULL. */
struct conf *conf_free(struct conf *c);

/* Parses an INI file into c.  A missing file is fine unless required; a
 * directory or a file that cannot be read is an error either way.  Errors
 * and warnings are logged with file:line; unknown sections and keys are
 * warnings, skipped, unless c is strict (conf_set_strict()), where they are
 * errors.  Returns 0, -ENOENT (a required file is missing), -EINVAL (bad
 * values or syntax, or unknown names when strict), or -errno (-EISDIR, ...). */
int conf_load(struct conf *c, const char *path, bool required);

/* Makes conf_load() count unknown sections and keys as errors (kvtierd
 * --check-config), or not (the default: warned of, as systemd does). */
void conf_set_strict(struct conf *c, bool strict);

/* Whether [section] is one the table has ("gpu.7" and "client.NAME" forms
 * included; their index and name are checked when a key is set). */
bool conf_section_known(const char *section);

/* Sets one key as if read from a file (command line overrides; section may
 * be "gpu.N").  why names the source in errors.  Returns 0, -ENOENT for an
 * unknown key, or -EINVAL / -ERANGE (logged). */
int conf_set(struct conf *c, const char *section, const char *key, const char *value, const char *why);

/* As conf_set(), but nothing is logged: the reason for a refusal ("[gpu]
 * vram_budget = 17T is out of range 0..16T", "unknown key [policy] nmae
 * (did you mean name?)") is written to reason, len bytes, without a final
 * period.  Returns as conf_set(); on 0, reason is untouched. */
int conf_set_reason(struct conf *c, const char *section, const char *key, const char *value, char *reason,
                    size_t len);

/* Sets one key from "SECTION.KEY=VALUE" (kvtierd -o): the key is what
 * follows the last dot before '=', so that gpu.1.vram_budget and
 * client.NAME.priority keep their sections.  Errors, an unknown key
 * included, are logged naming the option.  Returns 0, -ENOENT, -EINVAL or
 * -ERANGE. */
int conf_set_option(struct conf *c, const char *option);

/* One key in effect, as conf_foreach() hands it out; valid during the call. */
struct conf_entry {
        const char *section; /* as written ("daemon", "gpu.1", "client.vllm"), or a template ("gpu.N") */
        const char *key;
        const char *value; /* effective, as the file writes it; NULL: a template's key (documentation) */
        const char *def;   /* built-in default, NULL for none */
        const char *help;
        const char *range; /* "1..10000", "0..16T"; "" for keys without one */
};
typedef void (*conf_entry_fn)(const struct conf_entry *e, void *userdata);

/* Calls fn for every key in effect, section by section, each section once
 * in table order: [gpu.N], [numa.N] and [client.NAME] first as templates
 * (value NULL), then each one configured. */
void conf_foreach(const struct conf *c, conf_entry_fn fn, void *userdata);

/* Prints the table as a commented INI file with effective values, each
 * section once (conf_foreach()). */
void conf_print(const struct conf *c, FILE *f);

const char *conf_socket(const struct conf *c);
int conf_log_level(const struct conf *c);
unsigned conf_tick_ms(const struct conf *c);
const char *conf_policy_name(const struct conf *c);
/* Whether the policy in force is demand (the default). */
bool conf_policy_demand(const struct conf *c);

/* Host memory granted to each shim for KVTIER_CAPACITY=auto, resolved:
 * [host] host_budget, or half of physical memory when it is 0. */
uint64_t conf_host_budget(const struct conf *c);
/* The [policy] section as parameters for policy_plan(). */
void conf_policy_params(const struct conf *c, struct policy_params *ret);
unsigned conf_heat_half_life_ticks(const struct conf *c);
/* [policy] overlap for a GPU of budget_bytes, in whole chunks: how far
 * promotions may take its charge over the budget while evictions are in
 * flight (policy_params.overlap_chunks is 0 until the planner sets it). */
uint64_t conf_overlap_bytes(const struct conf *c, uint64_t budget_bytes);
/* [gpu] capture_margin for a GPU of budget_bytes, in whole chunks: how far
 * over the budget new captures may start in VRAM. */
uint64_t conf_capture_margin(const struct conf *c, uint64_t budget_bytes);
/* [gpu] yield_percent: the share of a GPU's time, 1-100, left to clients
 * of lower priority while one of higher priority is busy there. */
unsigned conf_yield_percent(const struct conf *c);
/* [policy] protect_min in ticks: demand's shortest protection and its refault window. */
unsigned conf_protect_min_ticks(const struct conf *c);

/* A unit name's room, NUL included. */
#define CONF_UNIT_MAX 256

/* Who a peer is, as the kernel says: what [client.NAME] sections match. */
struct conf_peer {
        uint32_t uid, gid;
        const uint32_t *groups; /* supplementary */
        size_t n_groups;
        const char *unit; /* the systemd unit of its cgroup, or NULL */
};

/* The first [client.NAME] section (file order) that matches p: its index,
 * or -1.  A section matches when it sets uid, gid or unit and each it sets
 * is p's (gid: primary or supplementary). */
int conf_client_match(const struct conf *c, const struct conf_peer *p);

/* Section number section (from conf_client_match(); -1 is none): true and
 * its priority and quota (UINT64_MAX if none set), or false. */
bool conf_client(const struct conf *c, int section, unsigned *ret_priority, uint64_t *ret_quota_bytes);
/* Its NAME, a label; NULL for -1. */
const char *conf_client_label(const struct conf *c, int section);
size_t conf_n_clients(const struct conf *c);
/* Whether a section matches on unit (so peers' cgroups must be read). */
bool conf_clients_need_unit(const struct conf *c);
/* What one connection or user may hold of kvtierd ([daemon] keys). */
struct conf_limits {
        unsigned max_connections;
        unsigned max_per_uid; /* for users other than root, kvtierd's and admin_group */
        unsigned reserved;    /* of max_connections, for those only (0 when it would be all) */
        unsigned hello_timeout_ms;
        uint64_t send_queue_max_bytes;
        unsigned send_timeout_ms;
        unsigned log_interval_ms; /* 0: no rate limit */
        unsigned log_burst;
};
void conf_limits(const struct conf *c, struct conf_limits *ret);

/* What one client or user may register, and how long an order may stay
 * unanswered ([daemon] keys). */
struct conf_quotas {
        uint64_t per_uid_bytes;    /* 0: four times the VRAM budgets plus the host budget */
        uint64_t per_client_bytes; /* 0: as per uid */
        unsigned max_regions;      /* per client */
        unsigned max_chunks;       /* all clients together */
        unsigned order_timeout_ms;
        unsigned max_order_timeouts; /* then the client is disconnected */
};
void conf_quotas(const struct conf *c, struct conf_quotas *ret);
/* [client.NAME] max_registered of section (-1: none): bytes each of its
 * processes may register, in place of the [daemon] quotas; 0 when unset. */
uint64_t conf_client_max_registered(const struct conf *c, int section);

/* The SSD tier ([ssd] keys, and [host] hugepages for its staging). */
enum conf_compress { CONF_COMPRESS_NONE = 0, CONF_COMPRESS_ZSTD = 1, CONF_COMPRESS_LZ4 = 2 };

/* "none", "zstd", "lz4". */
const char *conf_compress_name(unsigned compress);
struct conf_ssd {
        char dir[108];              /* where the files live; created 0700 if missing */
        uint64_t per_uid_bytes;     /* 0: the SSD tier is off */
        uint64_t per_client_bytes;  /* 0: as per uid */
        unsigned queue_depth;       /* I/Os in flight per client */
        uint64_t block_bytes;       /* checksum and compression unit, a multiple of 4 KiB */
        unsigned compress;          /* enum conf_compress */
        unsigned compress_level;
        unsigned hugepages;         /* [host] hugepages: 2 MiB pages to reserve on the GPU's node */
        unsigned reattach_grace_s;  /* how long a restarted daemon keeps a live client's spills for it */
};
void conf_ssd(const struct conf *c, struct conf_ssd *ret);

/* [daemon] admin_group: "" for none. */
const char *conf_admin_group(const struct conf *c);

/* Cross-key checks, once the file and options are in: warns of sections
 * that cannot match.  Returns the number of warnings. */
int conf_check(const struct conf *c);

/* The [capture] rules shims apply (KVTIER_MIN_SIZE may set a process's min_size). */
void conf_capture(const struct conf *c, uint64_t *ret_min_size, uint64_t *ret_after, uint64_t *ret_max);
/* [capture] apis: the KVT_API_FAMILY_* mask shims capture. */
uint32_t conf_capture_apis(const struct conf *c);

/* Bytes per second, both directions together; 0 = unlimited. */
uint64_t conf_max_migration_rate(const struct conf *c);

/* [numa.N] host_budget of a host NUMA node: true and the budget (bytes, or
 * a percentage of the node's MemTotal), or false when the node has no limit
 * (unset or "none").  node is 0..KVT_MAX_NODES-1. */
bool conf_node_budget(const struct conf *c, int node, struct budget_spec *ret);
/* Bit N: node N has a host budget. */
uint64_t conf_nodes_limited(const struct conf *c);

/* The budget of GPU device ([gpu.N] if set, else [gpu]); *ret_configured
 * says whether a [gpu.N] section names it.  device is 0..KVT_MAX_GPUS-1. */
void conf_gpu_budget(const struct conf *c, int device, struct budget_spec *ret, bool *ret_configured);
