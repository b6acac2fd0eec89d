/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes the daemon's core with what hostile or buggy shims can send: an
 * input is a program of operations (clients come and go, regions are added
 * and deleted, hints, planner ticks, ORDER_DONE replies with any id and
 * status, in any order).  Every message goes through kvt_msg_check() first,
 * as the server does.  After each operation the books are recomputed from
 * the chunks and compared with the registry's own: charged bytes equal the
 * chunks in VRAM or on their way there, never above the budget; each host
 * node's charge equals the chunks whose host copy is there or on its way
 * there, and no eviction ever took a node over its host budget.
 *
 * Built as a libFuzzer target (LLVMFuzzerTestOneInput) and, for make check,
 * with tests/fuzz/driver.c, which replays files and random programs.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "fuzz.h"
#include "log.h"
#include "planner.h"
#include "protocol.h"
#include "registry.h"

#define MAX_CLIENTS 4
#define MAX_ORDERS  256

struct state {
        struct registry *reg;
        struct planner *planner;
        struct client *clients[MAX_CLIENTS];
        struct kvt_order orders[MAX_ORDERS]; /* sent and not yet answered */
        size_t n_orders;
        const uint8_t *in;
        size_t left;
};

static uint8_t next(struct state *s) {
        if (!s->left)
                return 0;
        s->left--;
        return *s->in++;
}

static uint32_t next32(struct state *s) {
        uint32_t v = next(s);
        return v | (uint32_t)next(s) << 8 | (uint32_t)next(s) << 16 | (uint32_t)next(s) << 24;
}

/* Frames a payload as a message and checks it as the server would. */
static bool valid(uint16_t type, const void *payload, size_t len) {
        static struct kvt_msg m;

        m.hdr = (struct kvt_msg_hdr){ KVT_PROTO_MAGIC, KVT_PROTO_VERSION, type, (uint32_t)len, 1 };
        memcpy(&m.u, payload, len);
        return kvt_msg_check(&m, sizeof(m.hdr) + len) == 0;
}

/* How far the inputs got, for fuzz_report(). */
static unsigned long long n_regions, n_orders, n_done, n_ticks, most_charged, n_over_budget;

void fuzz_report(void) {
        printf("# regions added %llu, planner ticks %llu, orders sent %llu, answered %llu, most charged %llu MiB, "
               "charged over a budget (overlap) after %llu operations\n",
               n_regions, n_ticks, n_orders, n_done, most_charged >> 20, n_over_budget);
}

static bool ops_ready(struct client *c, void *userdata) {
        struct state *s = userdata;
        return s->n_orders < MAX_ORDERS && (next(s) & 7) != 0;
}

static void ops_send(struct client *c, const struct kvt_order *o, void *userdata) {
        struct state *s = userdata;
        if (s->n_orders < MAX_ORDERS)
                s->orders[s->n_orders++] = *o;
        n_orders++;
}

static const struct planner_ops ops = { .client_ready = ops_ready, .send_order = ops_send };

#define FUZZ_OVERLAP (4ull << 20)

/* The per-node books recomputed from the chunks must match the registry's. */
static void check_nodes(const struct state *s) {
        uint64_t charged[KVT_MAX_NODES] = { 0 };

        for (struct region *reg = registry_regions(s->reg); reg; reg = region_next(reg)) {
                const struct policy_chunk *ch = region_chunks(reg);
                for (uint32_t i = 0; i < region_n_chunks(reg); i++) {
                        /* host memory: in a host tier, or on the way to one (never-placed
                         * chunks, tier NONE, hold none kvtier knows of) */
                        bool host = ch[i].tier == KVT_TIER_HOST || ch[i].tier == KVT_TIER_HOST_MAPPED ||
                                    ch[i].pending == KVT_TIER_HOST || ch[i].pending == KVT_TIER_HOST_MAPPED;
                        if (host && ch[i].node < KVT_MAX_NODES)
                                charged[ch[i].node] += KVT_CHUNK_BYTES;
                }
        }
        for (int n = 0; n < KVT_MAX_NODES; n++) {
                const struct node_stats *ns = registry_node(s->reg, n);
                uint64_t have = ns ? ns->charged_bytes : 0;
                if (have != charged[n] || (ns && ns->limited && ns->peak_charged_bytes > ns->budget_bytes))
                        fuzz_fail("node %d: charged %llu, chunks say %llu, peak %llu, budget %llu", n,
                                  (unsigned long long)have, (unsigned long long)charged[n],
                                  (unsigned long long)(ns ? ns->peak_charged_bytes : 0),
                                  (unsigned long long)(ns ? ns->budget_bytes : 0));
        }
}

/* The books recomputed from the chunks must match the registry's. */
static void check_books(const struct state *s) {
        uint64_t charged[KVT_MAX_GPUS] = { 0 }, evicting[KVT_MAX_GPUS] = { 0 };
        /* A budget lowered live (a percentage re-resolved when most users'
         * device totals changed) may leave a GPU over it until the planner's
         * evictions are done, as registry.h says; the last budget seen: */
        static uint64_t last_budget[KVT_MAX_GPUS];
        static bool lowered[KVT_MAX_GPUS];

        check_nodes(s);
        for (struct region *reg = registry_regions(s->reg); reg; reg = region_next(reg)) {
                const struct policy_chunk *ch = region_chunks(reg);
                for (uint32_t i = 0; i < region_n_chunks(reg); i++) {
                        if (ch[i].tier == KVT_TIER_VRAM || ch[i].pending == KVT_TIER_VRAM)
                                charged[region_device(reg)] += KVT_CHUNK_BYTES;
                        if (ch[i].tier == KVT_TIER_VRAM && ch[i].pending != KVT_TIER_NONE &&
                            ch[i].pending != KVT_TIER_VRAM)
                                evicting[region_device(reg)]++;
                }
        }
        for (int d = 0; d < KVT_MAX_GPUS; d++) {
                const struct gpu_stats *g = registry_gpu(s->reg, d);
                if (!g)
                        continue;
                if (g->charged_bytes > most_charged)
                        most_charged = g->charged_bytes;
                n_over_budget += g->charged_bytes > g->budget_bytes;
                /* [policy] overlap lets promotions go FUZZ_OVERLAP over the budget
                 * while evictions are in flight, never more. */
                if (g->budget_bytes < last_budget[d])
                        lowered[d] = true;
                last_budget[d] = g->budget_bytes;
                if (g->charged_bytes <= g->budget_bytes + FUZZ_OVERLAP)
                        lowered[d] = false;
                if (g->charged_bytes != charged[d] ||
                    (!lowered[d] && g->charged_bytes > g->budget_bytes + FUZZ_OVERLAP) ||
                    g->evicting_chunks != evicting[d])
                        fuzz_fail("GPU %d: charged %llu, chunks say %llu, budget %llu; evicting %llu, chunks say %llu",
                                  d, (unsigned long long)g->charged_bytes, (unsigned long long)charged[d],
                                  (unsigned long long)g->budget_bytes, (unsigned long long)g->evicting_chunks,
                                  (unsigned long long)evicting[d]);
        }
}

static void op_hello(struct state *s) {
        struct kvt_hello h = { .proto_version = KVT_PROTO_VERSION, .device = next(s) % 3 - 1,
                               .device_total_bytes = (uint64_t)next(s) << 24, .name = "fuzz" };
        unsigned i = next(s) % MAX_CLIENTS;

        if (s->clients[i] || !valid(KVT_MSG_HELLO, &h, sizeof(h)))
                return;
        if (registry_client_new(s->reg, 1000 + i, 0, &h, NULL, &s->clients[i]) < 0)
                s->clients[i] = NULL;
}

/* A DEVICE message: a GPU's total and home node (-1 .. 2). */
static void op_device(struct state *s) {
        struct kvt_device d = { .device = next(s) % 3, .host_node = next(s) % 4 - 1,
                                .total_bytes = (uint64_t)next(s) << 24 };

        if (valid(KVT_MSG_DEVICE, &d, sizeof(d)))
                registry_device_seen(s->reg, &d);
}

static void op_bye(struct state *s) {
        unsigned i = next(s) % MAX_CLIENTS;

        registry_client_free(s->reg, s->clients[i]);
        s->clients[i] = NULL;
}

static void op_region_add(struct state *s, struct client *c) {
        struct kvt_region_add a = {
                .region_id = next(s) % 8,
                .device = next(s) % 3,
                .base = ((uint64_t)(next(s) % 16) << 28) + (uint64_t)(next(s) % 4) * KVT_CHUNK_BYTES,
                .size_bytes = (uint64_t)(next(s) % 48) * KVT_CHUNK_BYTES,
                .api = KVT_API_CUDA_MALLOC,
                .tier = next(s) % _KVT_TIER_MAX,
        };

        if (valid(KVT_MSG_REGION_ADD, &a, sizeof(a)) && registry_region_add(s->reg, c, &a) == 0)
                n_regions++;
}

static void op_hint(struct state *s, struct client *c) {
        struct kvt_hint h = { .region_id = next(s) % 8, .first_chunk = next(s) % 64,
                              .n_chunks = next(s) % 64, .kind = next(s) % 4 };

        if (valid(KVT_MSG_HINT, &h, sizeof(h)))
                (void)registry_hint(s->reg, c, &h);
}

/* Answers a sent order (or makes one up) with a status the input picks. */
static void op_done(struct state *s) {
        static const int32_t statuses[] = { 0, 0, 0, -EIO, -ENOENT, -ENOMEM, 1 };
        struct kvt_order_done d = { .status = statuses[next(s) % 7] };
        size_t k = next(s);
        unsigned i = next(s) % MAX_CLIENTS;
        struct client *c = s->clients[i];

        if (!c)
                return;
        if (s->n_orders && (k & 0x80) == 0) {
                k %= s->n_orders;
                d.order_id = s->orders[k].order_id;
                s->orders[k] = s->orders[--s->n_orders];
        } else
                d.order_id = next32(s);
        if (valid(KVT_MSG_ORDER_DONE, &d, sizeof(d)) && registry_order_done(s->reg, c, &d) >= 0)
                n_done++;
}

static void run(struct state *s) {
        while (s->left) {
                uint8_t op = next(s);
                struct client *c = s->clients[(op >> 4) % MAX_CLIENTS];

                switch (op % 8) {
                case 0: op_hello(s); break;
                case 1: op_bye(s); break;
                case 2: if (c) op_region_add(s, c); break;
                case 3:
                        if (c)
                                (void)registry_region_del(s->reg, c, next(s) % 8);
                        break;
                case 4: if (c) op_hint(s, c); break;
                case 6: op_device(s); break;
                case 5:
                        registry_advance_tick(s->reg);
                        n_ticks++;
                        if (planner_tick(s->planner, s->reg, &ops, s) < 0)
                                fuzz_fail("planner_tick failed");
                        break;
                default: op_done(s); break;
                }
                check_books(s);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static struct conf *conf;
        struct state s = { .in = data, .left = size };

        if (!conf) {
                kvt_log_setup("fuzz-daemon", KVT_LOG_ERR);
                if (conf_new(&conf) < 0 ||
                    conf_set(conf, "gpu", "vram_budget", "16M", "fuzz") < 0 ||
                    conf_set(conf, "gpu.1", "vram_budget", "50%", "fuzz") < 0 ||
                    conf_set(conf, "numa.0", "host_budget", "8M", "fuzz") < 0 ||
                    conf_set(conf, "numa.1", "host_budget", "0", "fuzz") < 0 ||
                    conf_set(conf, "policy", "overlap", "4M", "fuzz") < 0)
                        fuzz_fail("config setup failed");
        }
        if (registry_new(conf, &s.reg) < 0 || planner_new(conf, &s.planner) < 0)
                fuzz_fail("out of memory");
        run(&s);
        planner_free(s.planner);
        registry_free(s.reg);
        return 0;
}
