/* SPDX-License-Identifier: MIT */
/*
 * Host budgets per NUMA node in the daemon: the topology read from a sysfs
 * fixture, the per-node books of the registry, and the planner's choice of
 * node: the GPU's home node while it has room, then the nearest node by
 * the sysfs distances (not the lowest id), never over a budget.  Also the
 * topology's sources: what topology_read() makes of an ops struct, and
 * libnuma's reader against the sysfs one on this host.
 */
#include "config.h"

#include <errno.h>
#include <numa.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"
#include "order-sink.h"
#include "planner.h"
#include "registry.h"
#include "tap.h"
#include "topology.h"

#define CHUNK KVT_CHUNK_BYTES

static char root[] = "/tmp/test-numa-XXXXXX";

static void write_file(const char *path, const char *text) {
        FILE *f = fopen(path, "w");

        if (f) {
                fputs(text, f);
                fclose(f);
        }
}

/* Three nodes: 0 (1 GiB), 1 (2 GiB), 2 (512 MiB); node 2 is nearer to node 0 than node 1 is. */
static void make_fixture(void) {
        static const char *const dist[] = {"10 30 20\n", "30 10 30\n", "20 30 10\n"};
        static const unsigned long long kib[] = {1048576, 2097152, 524288};
        char path[256], text[128];

        if (!mkdtemp(root))
                abort();
        snprintf(path, sizeof(path), "%s/devices", root);
        mkdir(path, 0755);
        snprintf(path, sizeof(path), "%s/devices/system", root);
        mkdir(path, 0755);
        snprintf(path, sizeof(path), "%s/devices/system/node", root);
        mkdir(path, 0755);
        for (int n = 0; n < 3; n++) {
                snprintf(path, sizeof(path), "%s/devices/system/node/node%d", root, n);
                mkdir(path, 0755);
                snprintf(path, sizeof(path), "%s/devices/system/node/node%d/distance", root, n);
                write_file(path, dist[n]);
                snprintf(path, sizeof(path), "%s/devices/system/node/node%d/meminfo", root, n);
                snprintf(text, sizeof(text), "Node %d MemTotal:       %llu kB\nNode %d MemFree:        1 kB\n", n,
                         kib[n], n);
                write_file(path, text);
        }
}

static void remove_fixture(void) {
        char cmd[300];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        if (system(cmd) != 0)
                fprintf(stderr, "# could not remove %s\n", root);
}

static void test_topology(struct topology *t) {
        TAP_EQ_INT(topology_load(root, t), 0, "topology: loads");
        TAP_EQ_U64(t->present, 7, "topology: nodes 0, 1, 2");
        TAP_EQ_U64(t->mem_total_bytes[1], 2ull << 30, "topology: node 1 MemTotal 2 GiB");
        TAP_EQ_INT(t->distance[0][2], 20, "topology: node 0 to 2 is 20");
        TAP_EQ_INT(t->distance[0][1], 30, "topology: node 0 to 1 is 30");
        TAP_EQ_INT(t->distance[2][2], 10, "topology: local is 10");
}

/* A source of nodes 0 and 3 (or of no NUMA), counting what it is asked. */
static bool fake_numa;
static unsigned fake_asked;

static int fake_nodes(const void *userdata, uint64_t *ret_present) {
        if (!fake_numa)
                return -EOPNOTSUPP;
        *ret_present = 1u | 1u << 3;
        return 0;
}

static uint64_t fake_mem_total(const void *userdata, int node) {
        fake_asked |= 1u << node;
        return node == 0 ? 1ull << 30 : 0;
}

static void fake_distances(const void *userdata, int node, uint64_t present, uint8_t ret[KVT_MAX_NODES]) {
        fake_asked |= 1u << (8 + node);
        ret[node] = 10;
        if (node == 0 && (present & (1u << 3)))
                ret[3] = 21;
}

static void test_sources(void) {
        static const struct topology_ops fake = {fake_nodes, fake_mem_total, fake_distances};
        struct topology t, sys;
        int r;

        memset(&t, 0xff, sizeof(t));
        TAP_EQ_INT(topology_read(&fake, NULL, &t), -EOPNOTSUPP, "sources: no NUMA is the source's to say");
        TAP_OK(t.present == 0 && t.mem_total_bytes[0] == 0 && t.distance[0][0] == 0,
               "sources: and leaves nothing");
        fake_numa = true;
        TAP_EQ_INT(topology_read(&fake, NULL, &t), 0, "sources: nodes 0 and 3");
        TAP_EQ_U64(t.present, 9, "sources: present as the source says");
        TAP_EQ_U64(fake_asked, 0x909, "sources: only present nodes are asked for memory and distances");
        TAP_EQ_U64(t.mem_total_bytes[0], 1ull << 30, "sources: node 0's MemTotal");
        TAP_OK(t.distance[0][3] == 21 && t.distance[3][3] == 10 && t.distance[3][0] == 0,
               "sources: distances as given, unknown ones 0");

        /* libnuma and sysfs read the same files: they must agree here. */
        r = topology_read(&topology_numa_ops, NULL, &t);
        if (numa_available() < 0) {
                TAP_EQ_INT(r, -EOPNOTSUPP, "sources: libnuma finds no NUMA here, and says so");
                return;
        }
        TAP_EQ_INT(r, 0, "sources: libnuma reads this host");
        TAP_EQ_INT(topology_load("/sys", &sys), 0, "sources: sysfs reads it too");
        TAP_OK(sys.present != 0, "sources: with nodes (%#llx)", (unsigned long long)sys.present);
        TAP_EQ_U64(t.present, sys.present, "sources: the same nodes");
        TAP_OK(memcmp(t.mem_total_bytes, sys.mem_total_bytes, sizeof(t.mem_total_bytes)) == 0,
               "sources: the same MemTotal (node 0: %llu bytes)", (unsigned long long)t.mem_total_bytes[0]);
        TAP_OK(memcmp(t.distance, sys.distance, sizeof(t.distance)) == 0, "sources: the same distances");
}

static struct conf *config(const char *const *kv) {
        struct conf *c = NULL;

        if (conf_new(&c) < 0)
                abort();
        for (; kv[0]; kv += 3)
                if (conf_set(c, kv[0], kv[1], kv[2], "test") < 0)
                        abort();
        return c;
}

/* A client on GPU 0 (home node 0) with one region of n chunks in host memory. */
static struct region *add_region(struct registry *r, struct client **ret_client, uint32_t n) {
        struct kvt_hello h = {.proto_version = KVT_PROTO_VERSION, .device = 0, .device_total_bytes = 1ull << 30,
                              .name = "test"};
        struct kvt_device d = {.device = 0, .host_node = 0, .total_bytes = 1ull << 30};
        struct kvt_region_add a = {.region_id = 1, .device = 0, .base = 1ull << 30, .size_bytes = (uint64_t)n * CHUNK,
                                   .api = KVT_API_CUDA_MALLOC, .tier = KVT_TIER_HOST_MAPPED};

        if (registry_client_new(r, 100, 0, &h, NULL, ret_client) < 0)
                abort();
        registry_device_seen(r, &d);
        if (registry_region_add(r, *ret_client, &a) < 0)
                abort();
        return registry_regions(r);
}

/* Chunks [first, first + n) used now, the others not. */
static void use(struct registry *r, struct region *reg, uint32_t first, uint32_t n) {
        registry_advance_tick(r);
        for (uint32_t i = first; i < first + n; i++)
                registry_chunk_touch(r, reg, i, 4);
}

/* The node an order of the last tick sent chunk i to, -2 for none. */
static int sent_to(uint32_t i) {
        for (size_t k = 0; k < n_sent; k++)
                if (sent[k].tier != KVT_TIER_VRAM && i >= sent[k].first_chunk &&
                    i < sent[k].first_chunk + sent[k].n_chunks)
                        return sent[k].host_node;
        return -2;
}

static void test_books_and_spill(const struct topology *t) {
        static const char *const kv[] = {"gpu", "vram_budget", "8M", "policy", "name", "lru",
                                         "policy", "max_migration_rate", "0", "numa.0", "host_budget", "12M",
                                         "numa.2", "host_budget", "1%", NULL};
        struct conf *c = config(kv);
        struct registry *r = NULL;
        struct planner *p = NULL;
        struct client *cl;
        struct region *reg;
        const struct node_stats *n0, *n1, *n2;

        TAP_OK(registry_new(c, &r) == 0 && planner_new(c, &p) == 0, "books: registry and planner");
        planner_set_topology(p, t);
        TAP_EQ_INT(registry_set_topology(r, t), 0, "books: budgets resolve");
        n0 = registry_node(r, 0), n1 = registry_node(r, 1), n2 = registry_node(r, 2);
        TAP_OK(n0 && n1 && n2, "books: every node of the topology appears");
        TAP_EQ_U64(n2->budget_bytes, (512ull << 20) / 100, "books: node 2's 1%% of 512 MiB");
        TAP_OK(!n1->limited, "books: node 1 has no budget");

        reg = add_region(r, &cl, 16);
        TAP_EQ_INT(registry_gpu(r, 0)->host_node, 0, "books: GPU 0's home node from DEVICE");
        TAP_EQ_U64(n0->charged_bytes, 16 * CHUNK, "books: a region never moved counts on the home node");
        TAP_EQ_U64(n0->host_chunks, 16, "books: 16 chunks there");

        /* The first 4 chunks come into VRAM: node 0 keeps 12 chunks (24M, over its 12M). */
        use(r, reg, 0, 4);
        TAP_EQ_INT(planner_tick(p, r, &sink_ops, NULL), 1, "books: one order promotes chunks 0..3");
        sink_complete(r, cl, SINK_ALL, 0);
        TAP_EQ_U64(n0->charged_bytes, 12 * CHUNK, "books: promoted chunks leave node 0");
        TAP_EQ_U64(registry_gpu(r, 0)->charged_bytes, 4 * CHUNK, "books: and charge the GPU");

        /* Now chunks 4..7 are wanted: node 0 is over its budget, node 2 (distance
         * 20) takes 2, node 1 (distance 30, no budget) the rest. */
        use(r, reg, 4, 4);
        planner_tick(p, r, &sink_ops, NULL);
        TAP_EQ_INT(sent_to(0) == -2 && sent_to(1) == -2 ? 1 : 0, 0, "books: the cold VRAM chunks are evicted");
        TAP_EQ_INT(sent_to(3), 2, "books: the warmest evicted to the nearest node with room (2, not 1)");
        TAP_EQ_INT(sent_to(2), 2, "books: node 2 takes two");
        TAP_EQ_INT(sent_to(1), 1, "books: then node 1");
        TAP_EQ_INT(sent_to(0), 1, "books: the coldest to node 1 too");
        TAP_EQ_U64(n2->charged_bytes, 2 * CHUNK, "books: node 2 charged as ordered");
        TAP_OK(n2->charged_bytes <= n2->budget_bytes, "books: node 2 within its budget");
        TAP_EQ_U64(n2->host_chunks, 0, "books: not on node 2 until done");
        TAP_EQ_U64(n0->charged_bytes, 12 * CHUNK, "books: nothing went to the full home node");
        TAP_EQ_U64(n0->peak_charged_bytes, 0, "books: no eviction ever went to node 0");

        sink_complete(r, cl, SINK_ALL, 0);
        TAP_EQ_U64(n2->host_chunks, 2, "books: done: two chunks on node 2");
        TAP_EQ_U64(n1->host_chunks, 2, "books: done: two on node 1");
        TAP_EQ_U64(n2->peak_charged_bytes, 2 * CHUNK, "books: node 2's peak is its budget's worth");

        registry_client_free(r, cl);
        TAP_EQ_U64(n0->charged_bytes + n1->charged_bytes + n2->charged_bytes, 0, "books: a client gone uncharges");
        planner_free(p);
        registry_free(r);
        conf_free(c);
}

/* Orders to a full node are refused; a failed eviction gives its room back. */
static void test_orders(const struct topology *t) {
        static const char *const kv[] = {"gpu", "vram_budget", "8M", "numa.1", "host_budget", "2M", NULL};
        struct conf *c = config(kv);
        struct registry *r = NULL;
        struct client *cl;
        struct region *reg;
        struct kvt_order o;
        struct kvt_order_done done = {.status = -EIO};
        const struct node_stats *n1;

        TAP_EQ_INT(registry_new(c, &r), 0, "orders: registry");
        TAP_EQ_INT(registry_set_topology(r, t), 0, "orders: topology");
        reg = add_region(r, &cl, 4);
        n1 = registry_node(r, 1);
        TAP_EQ_INT(registry_order_new(r, reg, 0, 3, KVT_TIER_VRAM, -1, &o), 0, "orders: promote 3");
        TAP_EQ_INT(o.host_node, -1, "orders: a promotion names no node");
        done = (struct kvt_order_done){.order_id = o.order_id};
        registry_order_done(r, cl, &done);
        TAP_EQ_INT(registry_order_new(r, reg, 0, 2, KVT_TIER_HOST_MAPPED, 1, &o), -ENOSPC,
                   "orders: 2 chunks to node 1's 1-chunk budget refused");
        TAP_EQ_INT(registry_order_new(r, reg, 0, 1, KVT_TIER_HOST_MAPPED, 1, &o), 0, "orders: 1 chunk fits");
        TAP_EQ_INT(o.host_node, 1, "orders: the order names node 1");
        TAP_EQ_U64(n1->charged_bytes, CHUNK, "orders: node 1 charged at once");
        done = (struct kvt_order_done){.order_id = o.order_id, .status = -EIO};
        TAP_EQ_INT(registry_order_new(r, reg, 1, 1, KVT_TIER_HOST_MAPPED, 1, &o), -ENOSPC,
                   "orders: node 1 full now");
        TAP_EQ_INT(registry_order_done(r, cl, &done), 1, "orders: the eviction failed");
        TAP_EQ_U64(n1->charged_bytes, 0, "orders: a failed eviction gives the room back");
        TAP_EQ_INT(registry_order_new(r, reg, 1, 1, KVT_TIER_HOST_MAPPED, 7, &o), 0,
                   "orders: a node with no budget takes any");
        TAP_OK(registry_node(r, 7) && registry_node(r, 7)->charged_bytes == CHUNK, "orders: and appears in the books");
        TAP_EQ_INT(registry_order_new(r, reg, 2, 1, KVT_TIER_HOST_MAPPED, KVT_MAX_NODES, &o), -ERANGE,
                   "orders: a node out of range");

        /* Live changes: a percentage of a node with a MemTotal resolves, of one without is refused. */
        TAP_EQ_INT(conf_set(c, "numa.1", "host_budget", "50%", "test"), 0, "live: [numa.1] 50%%");
        TAP_EQ_INT(registry_node_budget_reload(r, 1), 0, "live: resolves");
        TAP_EQ_U64(n1->budget_bytes, 1ull << 30, "live: 50%% of 2 GiB");
        TAP_EQ_INT(conf_set(c, "numa.5", "host_budget", "10%", "test"), 0, "live: [numa.5] 10%%");
        TAP_EQ_INT(registry_node_budget_reload(r, 5), -EINVAL, "live: node 5 has no MemTotal: refused");
        TAP_EQ_INT(conf_set(c, "numa.1", "host_budget", "none", "test"), 0, "live: [numa.1] none");
        TAP_EQ_INT(registry_node_budget_reload(r, 1), 0, "live: resolves");
        TAP_OK(!n1->limited, "live: node 1 has no budget any more");
        registry_free(r);
        conf_free(c);
}

/* Without host budgets, evictions name the home node and nothing is refused. */
static void test_no_budgets(const struct topology *t) {
        static const char *const kv[] = {"gpu", "vram_budget", "4M", "policy", "name", "lru", NULL};
        struct conf *c = config(kv);
        struct registry *r = NULL;
        struct planner *p = NULL;
        struct client *cl;
        struct region *reg;

        TAP_OK(registry_new(c, &r) == 0 && planner_new(c, &p) == 0, "no budgets: registry and planner");
        planner_set_topology(p, t);
        TAP_EQ_INT(registry_set_topology(r, t), 0, "no budgets: topology");
        reg = add_region(r, &cl, 4);
        use(r, reg, 0, 2);
        planner_tick(p, r, &sink_ops, NULL);
        sink_complete(r, cl, SINK_ALL, 0);
        use(r, reg, 2, 2);
        planner_tick(p, r, &sink_ops, NULL);
        TAP_EQ_INT(sent_to(0), 0, "no budgets: evicted to the home node");
        TAP_EQ_INT(sent_to(1), 0, "no budgets: both");
        sink_complete(r, cl, SINK_ALL, 0);
        TAP_EQ_U64(registry_node(r, 0)->host_chunks, 4, "no budgets: all four on node 0 again");
        planner_free(p);
        registry_free(r);
        conf_free(c);
}

/* Memory kvtier never placed holds no host memory it knows of: an untiered
 * (VMM) region and VRAM beyond the budget are not charged to the home node. */
static void test_unplaced_not_charged(const struct topology *t) {
        static const char *const kv[] = {"gpu", "vram_budget", "4M", "numa.0", "host_budget", "64M", NULL};
        struct conf *c = config(kv);
        struct registry *r = NULL;
        struct client *cl;
        struct kvt_hello h = {.proto_version = KVT_PROTO_VERSION, .device = 0, .device_total_bytes = 1ull << 30,
                              .name = "test"};
        struct kvt_device d = {.device = 0, .host_node = 0, .total_bytes = 1ull << 30};
        struct kvt_region_add vmm = {.region_id = 1, .device = 0, .base = 1ull << 30, .size_bytes = 32 * CHUNK,
                                     .api = KVT_API_CU_MEM_MAP, .tier = KVT_TIER_NONE, .rule = KVT_RULE_VMM,
                                     .flags = KVT_REGION_UNTIERED};
        struct kvt_region_add vram = {.region_id = 2, .device = 0, .base = 2ull << 30, .size_bytes = 8 * CHUNK,
                                      .api = KVT_API_CUDA_MALLOC, .tier = KVT_TIER_VRAM};

        TAP_OK(registry_new(c, &r) == 0, "unplaced: registry");
        TAP_EQ_INT(registry_set_topology(r, t), 0, "unplaced: topology");
        TAP_OK(registry_client_new(r, 100, 0, &h, NULL, &cl) == 0, "unplaced: client");
        registry_device_seen(r, &d);
        TAP_OK(registry_region_add(r, cl, &vmm) == 0, "unplaced: an untiered VMM region of 32 chunks");
        TAP_EQ_U64(registry_node(r, 0)->charged_bytes, 0, "unplaced: the VMM region charges nothing to node 0");
        TAP_OK(registry_region_add(r, cl, &vram) == 0, "unplaced: 8 chunks in VRAM, a budget of 2");
        TAP_EQ_U64(registry_node(r, 0)->charged_bytes, 0, "unplaced: VRAM beyond the budget charges nothing either");
        TAP_EQ_U64(registry_node(r, 0)->host_chunks, 0, "unplaced: no host chunks on node 0");
        registry_client_free(r, cl);
        registry_free(r);
        conf_free(c);
}

/* A shim names its GPU's home node, untrusted: a node the host does not
 * have is ignored, and the first node named stands. */
static void test_home_node_untrusted(const struct topology *t) {
        static const char *const kv[] = {"gpu", "vram_budget", "4M", NULL};
        struct conf *c = config(kv);
        struct registry *r = NULL;
        struct kvt_device bogus = {.device = 0, .host_node = 40, .total_bytes = 1ull << 30};
        struct kvt_device one = {.device = 0, .host_node = 1, .total_bytes = 1ull << 30};
        struct kvt_device two = {.device = 0, .host_node = 2, .total_bytes = 1ull << 30};

        TAP_OK(registry_new(c, &r) == 0, "home: registry");
        TAP_EQ_INT(registry_set_topology(r, t), 0, "home: topology");
        registry_device_seen(r, &bogus);
        TAP_OK(registry_node(r, 40) == NULL, "home: node 40, which the host lacks, is not taken on");
        TAP_EQ_INT(registry_gpu(r, 0)->host_node, -1, "home: and is not GPU 0's home");
        registry_device_seen(r, &one);
        TAP_EQ_INT(registry_gpu(r, 0)->host_node, 1, "home: node 1 is");
        registry_device_seen(r, &two);
        TAP_EQ_INT(registry_gpu(r, 0)->host_node, 1, "home: a second client's node 2 does not move it");
        registry_free(r);
        conf_free(c);
}

int main(void) {
        struct topology t;

        kvt_log_setup("test-numa-books", KVT_LOG_ERR);
        make_fixture();
        test_topology(&t);
        test_books_and_spill(&t);
        test_orders(&t);
        test_no_budgets(&t);
        test_unplaced_not_charged(&t);
        test_home_node_untrusted(&t);
        test_sources();
        remove_fixture();
        return tap_done();
}
