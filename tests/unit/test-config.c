/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf.h"
#include "policy.h"
#include "protocol.h"
#include "log.h"
#include "tap.h"
#include "util.h"

static char path[] = "/tmp/test-config-XXXXXX";

/* Writes text to the temporary file and loads it into a fresh conf. */
static int load(const char *text, struct conf **ret) {
        FILE *f = fopen(path, "we");

        fputs(text, f);
        fclose(f);
        if (conf_new(ret) < 0)
                return -ENOMEM;
        return conf_load(*ret, path, true);
}

static void test_defaults(void) {
        struct conf *c;
        struct budget_spec b;
        bool set;

        TAP_EQ_INT(conf_new(&c), 0, "defaults: conf_new");
        TAP_EQ_INT(conf_tick_ms(c), 10, "defaults: tick_ms 10");
        TAP_EQ_INT(conf_log_level(c), KVT_LOG_INFO, "defaults: log_level info");
        TAP_EQ_STR(conf_policy_name(c), "demand", "defaults: policy demand");
        TAP_EQ_U64(conf_capture_margin(c, 4ull << 30), 1ull << 30, "defaults: capture_margin a quarter of the budget");
        TAP_EQ_U64(conf_capture_margin(c, 5ull << 20), 0, "defaults: capture_margin in whole chunks");
        TAP_EQ_INT(conf_protect_min_ticks(c), 20, "defaults: protect_min 200 ms = 20 ticks");
        TAP_EQ_U64(conf_max_migration_rate(c), 40ull << 30, "defaults: max_migration_rate 40G");
        conf_gpu_budget(c, 3, &b, &set);
        TAP_EQ_INT(b.percent, 80, "defaults: vram_budget 80%%");
        TAP_EQ_INT(set, 0, "defaults: no [gpu.N]");
        TAP_EQ_INT(conf_capture_apis(c), KVT_API_FAMILY_ALL, "defaults: [capture] apis all");
        TAP_EQ_INT(conf_load(c, "/nonexistent/kvtierd.conf", false), 0, "missing optional file is fine");
        TAP_EQ_INT(conf_load(c, "/nonexistent/kvtierd.conf", true), -ENOENT, "missing required file fails");
        conf_free(c);
}

/* demand's parameters come from [policy] in milliseconds and per second,
 * turned into ticks at the configured tick. */
static void test_demand_params(void) {
        struct conf *c = NULL;
        struct policy_params pp;

        TAP_EQ_INT(conf_new(&c), 0, "demand: conf_new");
        conf_policy_params(c, &pp);
        TAP_EQ_INT(pp.kind, POLICY_DEMAND, "demand: the default kind");
        TAP_EQ_INT(pp.protect_min_ticks, 20, "demand: protect_min 200 ms");
        TAP_EQ_INT(pp.protect_max_ticks, 6000, "demand: protect_max 60 s");
        TAP_EQ_INT(pp.sample_chunks, 256, "demand: 25600 re-arms a second, 256 a tick");
        TAP_EQ_INT(pp.probe_cohorts, 8, "demand: 800 probes a second, 8 a tick");
        TAP_EQ_INT(pp.active_ticks, 4, "demand: active 40 ms");
        TAP_EQ_INT(pp.heat_half_life_ticks, POLICY_DEMAND_HALF_LIFE_TICKS, "demand: its own half-life");
        TAP_EQ_INT(pp.prefetch_depth, 0, "demand: no stream prefetch");
        TAP_EQ_INT(pp.evict_tier, KVT_TIER_HOST_MAPPED, "demand: evictions mapped");
        TAP_EQ_INT(conf_heat_half_life_ticks(c), POLICY_DEMAND_HALF_LIFE_TICKS,
                   "demand: the registry decays heat with the policy's half-life");
        conf_free(c);
        TAP_EQ_INT(load("[daemon]\ntick_ms = 50\n[policy]\nprotect_min = 1000\nprotect_max = 10\nrearm_rate = 1\n"
                        "probe_rate = 0\n[gpu]\ncapture_margin = 64M\n",
                        &c),
                   0, "demand: load");
        conf_policy_params(c, &pp);
        TAP_EQ_INT(pp.protect_min_ticks, 20, "demand: 1000 ms at 50 ms ticks");
        TAP_EQ_INT(pp.protect_max_ticks, 20, "demand: the maximum never below the minimum");
        TAP_EQ_INT(pp.sample_chunks, 1, "demand: a rate below one a tick is one a tick");
        TAP_EQ_INT(pp.probe_cohorts, 0, "demand: 0 is none");
        TAP_EQ_U64(conf_capture_margin(c, 4ull << 30), 64ull << 20, "demand: capture_margin in bytes");
        conf_free(c);
        c = NULL;
        TAP_EQ_INT(load("[policy]\nprotect_min = 0\n", &c), -EINVAL, "demand: protect_min 0 is out of range");
        conf_free(c);
        c = NULL;
        TAP_EQ_INT(load("[gpu]\ncapture_margin = lots\n", &c), -EINVAL, "demand: a bad capture_margin is refused");
        conf_free(c);
}

static void test_values(void) {
        struct conf *c = NULL;
        struct budget_spec b;
        bool set;

        TAP_EQ_INT(load("[daemon]\nsocket = /run/x.sock  # comment\ntick_ms = 25\nlog_level = debug\n"
                        "[gpu]\nvram_budget = 1.5G\n[gpu.2]\nvram_budget = 50%\n"
                        "[policy]\nname = lru\nmax_migration_rate = 0\nnope = 1\n",
                        &c),
                   0, "values: load ok (unknown key only warns)");
        TAP_EQ_STR(conf_socket(c), "/run/x.sock", "values: socket, inline # comment stripped");
        TAP_EQ_INT(conf_tick_ms(c), 25, "values: tick_ms");
        TAP_EQ_INT(conf_log_level(c), KVT_LOG_DEBUG, "values: log_level");
        TAP_EQ_U64(conf_max_migration_rate(c), 0, "values: rate 0 = unlimited");
        conf_gpu_budget(c, 0, &b, &set);
        TAP_EQ_U64(b.bytes, 3ull << 29, "values: [gpu] 1.5G");
        TAP_EQ_INT(b.percent, 0, "values: [gpu] not a percentage");
        conf_gpu_budget(c, 2, &b, &set);
        TAP_EQ_INT(b.percent, 50, "values: [gpu.2] 50%%");
        TAP_EQ_INT(set, 1, "values: [gpu.2] configured");
        conf_free(c);
}

/* [capture] apis: the API list syntax, validated at load, printed back. */
static void test_capture_apis(void) {
        static const char *const bad[] = {
                "[capture]\napis = bogus\n",   "[capture]\napis = runtime,bogus\n",
                "[capture]\napis = runtime,\n", "[capture]\napis =\n",
                "[capture]\napis = Runtime\n", "[capture]\napis = runtime, driver\n",
        };
        struct conf *c = NULL;
        char *buf = NULL;
        size_t len = 0;
        FILE *f;

        TAP_EQ_INT(load("[capture]\napis = runtime,async  # comment\n", &c), 0, "apis: a list loads");
        TAP_EQ_INT(conf_capture_apis(c), KVT_API_FAMILY_RUNTIME | KVT_API_FAMILY_ASYNC,
                   "apis: runtime,async");
        f = open_memstream(&buf, &len);
        conf_print(c, f);
        fclose(f);
        TAP_OK(strstr(buf, "[capture]\n") && strstr(buf, "\napis = runtime,async\n"),
               "apis: printed as a list");
        free(buf);
        c = conf_free(c);
        TAP_EQ_INT(load("[capture]\napis = none\n", &c), 0, "apis: none loads");
        TAP_EQ_INT(conf_capture_apis(c), 0, "apis: none is no family");
        TAP_EQ_INT(conf_set(c, "capture", "apis", "driver,vmm", "test"), 0, "apis: set driver,vmm");
        TAP_EQ_INT(conf_capture_apis(c), KVT_API_FAMILY_DRIVER | KVT_API_FAMILY_VMM, "apis: driver,vmm");
        TAP_EQ_INT(conf_set(c, "capture", "apis", "drivers", "test"), -EINVAL, "apis: set a bad list fails");
        TAP_EQ_INT(conf_capture_apis(c), KVT_API_FAMILY_DRIVER | KVT_API_FAMILY_VMM,
                   "apis: a bad list leaves the old value");
        TAP_EQ_INT(conf_set(c, "capture", "apis", "all", "test"), 0, "apis: set all");
        TAP_EQ_INT(conf_capture_apis(c), KVT_API_FAMILY_ALL, "apis: all is every family");
        c = conf_free(c);
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                TAP_EQ_INT(load(bad[i], &c), -EINVAL, "apis: bad config %zu rejected", i);
                c = conf_free(c);
        }
}

static void test_errors(void) {
        static const char *const bad[] = {
                "[daemon]\ntick_ms = 0\n",
                "[daemon]\ntick_ms = 10001\n",
                "[daemon]\ntick_ms = 5x\n",
                "[daemon]\nsocket = relative.sock\n",
                "[daemon]\nlog_level = loud\n",
                "[gpu]\nvram_budget = 101%\n",
                "[gpu]\nvram_budget = 17T\n",
                "[gpu.64]\nvram_budget = 1G\n",
                "[policy]\nname = magic\n",
                "[policy]\nhysteresis_ticks = -1\n",
                "[policy]\nheat_half_life_ticks = 0\n",
                "[policy]\nprefetch = sometimes\n",
                "[policy]\nprefetch_depth = 65\n",
                "[policy]\nwindow = 17T\n",
                "[client.vllm]\npriority = 8\n",
                "[client.]\npriority = 1\n",
                "[client.a]\nquota = lots\n",
                "[client.a]\nuid = no-such-user-kvtier\n",
                "[client.a]\nunit = vllm\n",
                "[client.a]\nunit = a/b.service\n",
                "[policy]\nmax_migration_rate = 2T\n",
                "[daemon]\nthis line has no equals\n",
        };
        struct conf *c = NULL;

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                TAP_EQ_INT(load(bad[i], &c), -EINVAL, "bad config %zu rejected", i);
                c = conf_free(c);
        }
}

/* The [policy] keys reach the policy's parameters; keys a policy does not use stay out. */
static void test_policy_params(void) {
        struct conf *c = NULL;
        struct policy_params pp;

        TAP_EQ_INT(load("[policy]\nname = heat\nhysteresis_ticks = 7\nheat_half_life_ticks = 9\n"
                        "window = 64M\nprefetch = none\n",
                        &c),
                   0, "policy: load ok");
        conf_policy_params(c, &pp);
        TAP_EQ_INT(pp.kind, POLICY_HEAT, "policy: kind heat");
        TAP_EQ_INT(pp.hysteresis_ticks, 7, "policy: hysteresis_ticks");
        TAP_EQ_INT(pp.heat_half_life_ticks, 9, "policy: heat_half_life_ticks");
        TAP_EQ_INT(pp.window_chunks, 0, "policy: heat has no window");
        TAP_EQ_INT(pp.prefetch_depth, 0, "policy: prefetch none");
        TAP_EQ_INT(pp.threads, 0, "policy: threads auto by default");
        TAP_EQ_INT(conf_set(c, "policy", "threads", "3", "test"), 0, "policy: set threads");
        conf_policy_params(c, &pp);
        TAP_EQ_INT(pp.threads, 3, "policy: threads 3");
        TAP_EQ_INT(conf_set(c, "policy", "threads", "17", "test"), -ERANGE, "policy: threads above 16 fails");
        TAP_EQ_INT(conf_set(c, "policy", "name", "window", "test"), 0, "policy: set name window");
        conf_policy_params(c, &pp);
        TAP_EQ_INT(pp.kind, POLICY_WINDOW, "policy: kind window after set");
        TAP_EQ_INT(pp.window_chunks, 32, "policy: window 64M = 32 chunks");
        TAP_EQ_INT(pp.hysteresis_ticks, 0, "policy: window has no hysteresis");
        TAP_EQ_INT(conf_set(c, "policy", "name", "magic", "test"), -EINVAL, "policy: set bad name fails");
        TAP_EQ_STR(conf_policy_name(c), "window", "policy: a bad name leaves the old one");
        conf_free(c);
}

/* [client.NAME]: matched on kernel identity (uid, gid, unit), never on the name; unset quota means none. */
static void test_clients(void) {
        static const uint32_t groups[] = {44, 45};
        struct conf *c = NULL;
        unsigned prio = 99;
        uint64_t quota = 0;
        char *buf = NULL;
        size_t len = 0;
        FILE *f;

        TAP_EQ_INT(load("[client.vllm]\nuid = 1001\npriority = 3\nquota = 8G\n"
                        "[client.batch]\ngid = 45\nunit = batch.service\npriority = 1\n"
                        "[client.render]\ngid = 44\npriority = 0\n"
                        "[client.named]\npriority = 7\n",
                        &c),
                   0, "clients: load ok");
        TAP_EQ_INT(conf_client_match(c, &(struct conf_peer){.uid = 1001, .gid = 1001}), 0,
                   "clients: uid 1001 is vllm");
        TAP_OK(conf_client(c, 0, &prio, &quota) && prio == 3 && quota == 8ull << 30,
               "clients: vllm priority 3, quota 8G");
        TAP_EQ_INT(conf_client_match(c, &(struct conf_peer){.uid = 7,
                                                            .gid = 7,
                                                            .groups = groups,
                                                            .n_groups = 2,
                                                            .unit = "batch.service"}),
                   1, "clients: group 45 in batch.service is batch");
        TAP_EQ_INT(conf_client_match(c, &(struct conf_peer){.uid = 7,
                                                            .gid = 7,
                                                            .groups = groups,
                                                            .n_groups = 2,
                                                            .unit = "other.service"}),
                   2, "clients: group 45 elsewhere is not batch (every key must match); group 44 is render");
        TAP_OK(conf_client(c, 1, &prio, &quota) && prio == 1 && quota == UINT64_MAX,
               "clients: batch has no quota");
        TAP_EQ_INT(conf_client_match(c, &(struct conf_peer){.uid = 7, .gid = 7}), -1,
                   "clients: a section with a name only matches no one");
        TAP_OK(!conf_client(c, -1, &prio, &quota), "clients: no section, no priority");
        TAP_EQ_STR(conf_client_label(c, 0), "vllm", "clients: the label is the section name");
        TAP_OK(conf_clients_need_unit(c), "clients: a unit key means cgroups are read");
        TAP_EQ_INT(conf_n_clients(c), 4, "clients: four sections");
        f = open_memstream(&buf, &len);
        conf_print(c, f);
        fclose(f);
        TAP_OK(strstr(buf, "[client.vllm]\n") && strstr(buf, "uid = 1001\n") &&
                       strstr(buf, "quota = 8G\n") && strstr(buf, "unit = batch.service\n"),
               "clients: printed");
        free(buf);
        conf_free(c);
        TAP_EQ_INT(load("[client.root]\nuid = root\n", &c), 0, "clients: a user name is looked up");
        TAP_EQ_INT(conf_client_match(c, &(struct conf_peer){.uid = 0, .gid = 0}), 0,
                   "clients: uid root is 0");
        conf_free(c);
}

/* [numa.N] host_budget: bytes, a percentage or none; unset means no limit. */
static void test_numa(void) {
        static const char *const bad[] = {
                "[numa.64]\nhost_budget = 1G\n",
                "[numa.x]\nhost_budget = 1G\n",
                "[numa.0]\nhost_budget = 0%\n",
                "[numa.0]\nhost_budget = 101%\n",
                "[numa.0]\nhost_budget = 12Q\n",
                "[numa.0]\nhost_budget = 2000T\n",
                "[numa.0]\nhost_budget = unlimited\n",
        };
        struct budget_spec b;
        struct conf *c = NULL;
        char *buf = NULL;
        size_t len = 0;
        FILE *f;

        TAP_EQ_INT(conf_new(&c), 0, "numa: defaults");
        TAP_OK(!conf_node_budget(c, 0, &b) && conf_nodes_limited(c) == 0, "numa: no node has a budget by default");
        c = conf_free(c);
        TAP_EQ_INT(load("[numa.0]\nhost_budget = 64G\n[numa.3]\nhost_budget = 50%  # of MemTotal\n"
                        "[numa.63]\nhost_budget = 0\n",
                        &c),
                   0, "numa: loads");
        TAP_OK(conf_node_budget(c, 0, &b) && b.bytes == 64ull << 30 && b.percent == 0, "numa: node 0 64G");
        TAP_OK(conf_node_budget(c, 3, &b) && b.percent == 50, "numa: node 3 50%%");
        TAP_OK(conf_node_budget(c, 63, &b) && b.bytes == 0, "numa: node 63 0 bytes is a budget (nothing goes there)");
        TAP_OK(!conf_node_budget(c, 1, &b), "numa: node 1 unset, no limit");
        TAP_EQ_U64(conf_nodes_limited(c), 1ull << 0 | 1ull << 3 | 1ull << 63, "numa: the limited nodes as a mask");
        f = open_memstream(&buf, &len);
        conf_print(c, f);
        fclose(f);
        TAP_OK(strstr(buf, "[numa.0]\n") && strstr(buf, "host_budget = 64G\n"), "numa: [numa.0] printed");
        TAP_OK(strstr(buf, "[numa.3]\n") && strstr(buf, "host_budget = 50%\n"), "numa: [numa.3] printed");
        TAP_OK(strstr(buf, "# [numa.N] host_budget: ") != NULL, "numa: the key is documented in the print");
        free(buf);
        TAP_EQ_INT(conf_set(c, "numa.3", "host_budget", "none", "test"), 0, "numa: set none");
        TAP_OK(!conf_node_budget(c, 3, &b), "numa: none lifts the limit");
        TAP_EQ_INT(conf_set(c, "numa.3", "host_budget", "lots", "test"), -EINVAL, "numa: set a bad value fails");
        TAP_OK(!conf_node_budget(c, 3, &b), "numa: and changes nothing");
        TAP_EQ_INT(conf_set(c, "numa.70", "host_budget", "1G", "test"), -ERANGE, "numa: node 70 out of range");
        c = conf_free(c);
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                TAP_EQ_INT(load(bad[i], &c), -EINVAL, "numa: bad config %zu rejected", i);
                c = conf_free(c);
        }
}

static void test_print(void) {
        struct conf *c = NULL;
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);

        load("[gpu.1]\nvram_budget = 12G\n", &c);
        conf_print(c, f);
        fclose(f);
        TAP_OK(strstr(buf, "[daemon]\n") && strstr(buf, "tick_ms = 10\n"), "print: daemon section, tick_ms");
        TAP_OK(strstr(buf, "[gpu.1]\n") && strstr(buf, "vram_budget = 12G\n"), "print: [gpu.1] 12G");
        TAP_OK(strstr(buf, "vram_budget = 80%\n") != NULL, "print: [gpu] 80%%");
        TAP_OK(strstr(buf, "max_migration_rate = 40G\n") != NULL, "print: rate 40G");
        free(buf);
        conf_free(c);
}

/* conf_print() into a string (free()). */
static char *print_str(const struct conf *c) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);

        conf_print(c, f);
        fclose(f);
        return buf;
}

/* Lines of text that are exactly line. */
static int count_lines(const char *text, const char *line) {
        size_t n = strlen(line);
        int k = 0;

        for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
                if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == '\0'))
                        k++;
        return k;
}

/* Every section once, the configured [gpu.N], [numa.N] and [client.NAME]
 * among them, and what is printed reads back strictly as the same table. */
static void test_print_sections(void) {
        static const char *const sections[] = {"[daemon]",      "[gpu]",         "[gpu.1]",  "[gpu.3]",
                                               "[policy]",      "[host]",        "[numa.0]", "[capture]",
                                               "[client.vllm]", "[client.batch]"};
        struct conf *c = NULL, *again = NULL;
        char *text, *text2;
        FILE *f;

        TAP_EQ_INT(load("[gpu.3]\nvram_budget = 4G\n[gpu.1]\nvram_budget = 12G\n[client.vllm]\nuid = 0\n"
                        "priority = 3\n[numa.0]\nhost_budget = 1G\n[client.batch]\ngid = 0\nquota = 1G\n"
                        "[policy]\nname = lru\n",
                        &c),
                   0, "print once: load");
        text = print_str(c);
        for (size_t i = 0; i < ELEMENTSOF(sections); i++)
                TAP_EQ_INT(count_lines(text, sections[i]), 1, "print once: %s printed once", sections[i]);
        TAP_OK(strstr(text, "[gpu.1]\n# Override") && strstr(text, "vram_budget = 12G\n"),
               "print once: [gpu.1] 12G");
        TAP_OK(strstr(text, "[client.batch]\n") && strstr(text, "quota = 1G\n"),
               "print once: [client.batch] quota");
        for (const char *p = text; *p; p += strcspn(p, "\n") + (p[strcspn(p, "\n")] != '\0'))
                if (strcspn(p, "\n") > 200) {
                        TAP_OK(false, "print once: a line longer than inih's 200 bytes: %.40s...", p);
                        break;
                }
        /* what is printed is a config file: strictly valid, the same table */
        f = fopen(path, "we");
        fputs(text, f);
        fclose(f);
        TAP_EQ_INT(conf_new(&again), 0, "print once: conf_new");
        conf_set_strict(again, true);
        TAP_EQ_INT(conf_load(again, path, true), 0, "print once: the print reads back strictly");
        text2 = print_str(again);
        TAP_EQ_STR(text2, text, "print once: and prints the same");
        free(text);
        free(text2);
        conf_free(c);
        conf_free(again);
}

/* Unknown sections and keys: warned of and skipped by the daemon, errors
 * when strict; a directory or an unreadable file is an error either way;
 * conf_set_reason() says why a value is refused. */
static void test_strict(void) {
        static const char *const unknown[] = {
                "[deamon]\nsocket = /tmp/x.sock\n", "[daemon]\nfrobnicate = 1\n",
                "[policy]\nnmae = lru\n",           "[gpu.1]\nbudget = 1G\n",
                "[client.a]\nuid = 0\nprio = 1\n",  "[numa]\nhost_budget = 1G\n",
        };
        char dir[] = "/tmp/test-config-dir-XXXXXX", reason[256] = "";
        struct conf *c = NULL;

        for (size_t i = 0; i < ELEMENTSOF(unknown); i++) {
                TAP_EQ_INT(load(unknown[i], &c), 0, "strict: unknown name %zu only warns by default", i);
                c = conf_free(c);
        }
        for (size_t i = 0; i < ELEMENTSOF(unknown); i++) {
                FILE *f = fopen(path, "we");

                fputs(unknown[i], f);
                fclose(f);
                TAP_EQ_INT(conf_new(&c), 0, "strict: conf_new");
                conf_set_strict(c, true);
                TAP_EQ_INT(conf_load(c, path, true), -EINVAL, "strict: unknown name %zu is an error", i);
                c = conf_free(c);
        }
        TAP_EQ_INT(load("[deamon]\nsocket = /tmp/x.sock\n", &c), 0, "strict: [deamon] loads by default");
        TAP_EQ_STR(conf_socket(c), KVT_RUNSTATEDIR "/kvtier/kvtierd.sock",
                   "strict: and its keys are not taken");
        c = conf_free(c);
        TAP_OK(!conf_section_known("deamon") && conf_section_known("daemon") &&
                       conf_section_known("gpu.7") && conf_section_known("client.x") &&
                       !conf_section_known("numa"),
               "strict: known sections");

        TAP_OK(mkdtemp(dir) != NULL, "strict: a directory");
        TAP_EQ_INT(conf_new(&c), 0, "strict: conf_new");
        TAP_EQ_INT(conf_load(c, dir, true), -EISDIR, "strict: a directory given is an error");
        TAP_EQ_INT(conf_load(c, dir, false), -EISDIR, "strict: a directory as the default file too");
        rmdir(dir);
        if (geteuid() != 0) {
                chmod(path, 0);
                TAP_EQ_INT(conf_load(c, path, true), -EACCES, "strict: an unreadable file is an error");
                chmod(path, 0600);
        } else
                TAP_OK(true, "# SKIP strict: an unreadable file (root reads any file)");

        TAP_EQ_INT(conf_set_reason(c, "gpu", "vram_budget", "17T", reason, sizeof(reason)), -ERANGE,
                   "reason: out of range");
        TAP_EQ_STR(reason, "[gpu] vram_budget = 17T is out of range 0..16T",
                   "reason: names the range in bytes");
        TAP_EQ_INT(conf_set_reason(c, "policy", "name", "magic", reason, sizeof(reason)), -EINVAL,
                   "reason: bad name");
        TAP_EQ_STR(reason,
                   "invalid [policy] name = magic: expected one of demand, lru, heat, window, hybrid",
                   "reason: lists the policies");
        TAP_EQ_INT(conf_set_reason(c, "policy", "windwo", "1G", reason, sizeof(reason)), -ENOENT,
                   "reason: unknown key");
        TAP_EQ_STR(reason, "unknown key [policy] windwo (did you mean window?)", "reason: suggests the key");
        TAP_EQ_INT(conf_set_reason(c, "deamon", "tick_ms", "5", reason, sizeof(reason)), -ENOENT,
                   "reason: unknown section");
        TAP_EQ_STR(reason, "unknown section [deamon] (did you mean [daemon]?)",
                   "reason: suggests the section");
        TAP_EQ_INT(conf_tick_ms(c), 10, "reason: nothing set by the refusals");
        conf_free(c);
}

int main(void) {
        int fd = mkstemp(path);

        if (fd < 0)
                return 99;
        close(fd);
        kvt_log_setup("test-config", KVT_LOG_ERR - 1); /* quiet: errors are expected */
        test_defaults();
        test_values();
        test_errors();
        test_capture_apis();
        test_policy_params();
        test_clients();
        test_print();
        test_demand_params();
        test_numa();
        test_print_sections();
        test_strict();
        unlink(path);
        return tap_done();
}
