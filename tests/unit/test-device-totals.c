/* SPDX-License-Identifier: MIT */
/*
 * Percentage budgets and the device totals clients report (issue 18, row
 * 5): a figure no GPU has is unknown, each user has one say, and the
 * figure most users agree on stands, so that one liar moves no budget.
 */
#include "config.h"

#include <stdlib.h>

#include "conf.h"
#include "registry.h"
#include "tap.h"

#define GIB (1ull << 30)

static struct conf *conf;
static struct registry *r;

static void up(void) {
        if (conf_new(&conf) < 0 || conf_set(conf, "gpu", "vram_budget", "50%", "test") < 0 ||
            registry_new(conf, &r) < 0)
                abort();
}

static void down(void) {
        r = registry_free(r);
        conf = conf_free(conf);
}

/* A client of uid saying HELLO with total bytes for GPU 0. */
static struct client *hello(uid_t uid, uint64_t total) {
        struct kvt_hello h = {.proto_version = KVT_PROTO_VERSION, .device = 0, .device_total_bytes = total,
                              .name = "t"};
        struct client *c;

        if (registry_client_new(r, 100 + (pid_t)uid, uid, &h, NULL, &c) < 0)
                abort();
        return c;
}

static uint64_t budget(void) {
        const struct gpu_stats *g = registry_gpu(r, 0);

        return g && g->budget_resolved ? g->budget_bytes : 0;
}

static void test_impossible(void) {
        struct kvt_device d = {.device = 0, .host_node = -1, .total_bytes = UINT64_MAX};

        up();
        (void)hello(1001, UINT64_MAX);
        TAP_EQ_U64(budget(), 0, "a HELLO's total of 2^64-1 resolves no budget");
        (void)hello(1001, 1);
        TAP_EQ_U64(budget(), 0, "nor does a total of one byte");
        (void)hello(1000, 80 * GIB);
        TAP_EQ_U64(budget(), 40 * GIB, "a real total resolves it");
        registry_client_device_seen(r, hello(1002, 0), &d);
        (void)hello(1003, UINT64_MAX);
        TAP_EQ_U64(budget(), 40 * GIB, "later figures of 2^64-1, by HELLO or DEVICE, change nothing");
        registry_budget_reload(r, 0);
        TAP_EQ_U64(budget(), 40 * GIB, "nor does a live reload of the budget");
        down();
}

static void test_majority(void) {
        up();
        (void)hello(1001, 16 * 1024 * GIB);
        TAP_EQ_U64(budget(), 8 * 1024 * GIB, "alone, a plausible liar's total stands until others report");
        (void)hello(1000, 80 * GIB);
        TAP_EQ_U64(budget(), 40 * GIB, "one user against one: the smaller figure, the safe side");
        (void)hello(1001, 16 * 1024 * GIB);
        (void)hello(1001, 16 * 1024 * GIB);
        TAP_EQ_U64(budget(), 40 * GIB, "more processes of the liar's user have no more say");
        (void)hello(1004, 79 * GIB + 512 * (1ull << 20));
        TAP_EQ_U64(budget(), 40 * GIB, "a figure within 2%% agrees, and the agreed figure stands");
        (void)hello(1005, 1 * GIB);
        TAP_EQ_U64(budget(), 40 * GIB, "a low-balling liar against two agreeing users moves nothing");
        down();
}

int main(void) {
        test_impossible();
        test_majority();
        return tap_done();
}
