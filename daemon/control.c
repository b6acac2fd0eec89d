/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "log.h"

#define WHY "kvtierctl set"

/* vram_budget[.N]: the config first (validated there), then the books. */
static int control_set_budget(struct conf *conf, struct registry *r, const char *suffix, const char *value,
                              char *reason, size_t len) {
        char section[KVT_CTL_SET_MAX + 4];
        int device = -1, ret;

        if (*suffix == '.') {
                snprintf(section, sizeof(section), "gpu%s", suffix);
                ret = conf_set_reason(conf, section, "vram_budget", value, reason, len);
                if (ret < 0)
                        return ret;
                device = (int)strtol(suffix + 1, NULL, 10);
                registry_budget_reload(r, device);
        } else {
                ret = conf_set_reason(conf, "gpu", "vram_budget", value, reason, len);
                if (ret < 0)
                        return ret;
                for (int d = 0; d < KVT_MAX_GPUS; d++) {
                        struct budget_spec b;
                        bool own;

                        conf_gpu_budget(conf, d, &b, &own);
                        if (registry_gpu(r, d) && !own)
                                registry_budget_reload(r, d);
                }
        }
        log_info("%s: vram_budget%s = %s.", WHY, suffix, value);
        return 0;
}

/* host_budget.N: the config first (validated there), then the books.  A
 * percentage needs the node's MemTotal: checked before the config changes. */
static int control_set_host_budget(struct conf *conf, struct registry *r, const char *suffix,
                                   const char *value, char *reason, size_t len) {
        char section[KVT_CTL_SET_MAX + 8];
        struct budget_spec old;
        bool had;
        int node, ret;

        if (*suffix != '.') {
                snprintf(reason, len, "a host budget is per NUMA node: host_budget NODE BYTES");
                return -ENOENT;
        }
        snprintf(section, sizeof(section), "numa%s", suffix);
        node = (int)strtol(suffix + 1, NULL, 10);
        had = conf_node_budget(conf, node, &old);
        ret = conf_set_reason(conf, section, "host_budget", value, reason, len);
        if (ret < 0)
                return ret;
        ret = registry_node_budget_reload(r, node);
        if (ret < 0) {
                char buf[32];

                snprintf(reason, len,
                         "[%s] host_budget = %s: the MemTotal of node %d is unknown (no such node?)",
                         section, value, node);
                /* put the old value back, so that config and books agree */
                if (!had)
                        snprintf(buf, sizeof(buf), "none");
                else if (old.percent)
                        snprintf(buf, sizeof(buf), "%u%%", old.percent);
                else
                        snprintf(buf, sizeof(buf), "%llu", (unsigned long long)old.bytes);
                (void)conf_set(conf, section, "host_budget", buf, WHY);
                return ret;
        }
        log_info("%s: host_budget%s = %s.", WHY, suffix, value);
        return 0;
}

int control_set(struct conf *conf, struct registry *r, const char *text, char *reason, size_t len) {
        char key[KVT_CTL_SET_MAX];
        const char *eq = strchr(text, '='), *value;
        size_t n;
        int ret;

        if (!eq || eq == text || strlen(text) >= sizeof(key)) {
                snprintf(reason, len, "expected KEY=VALUE");
                return -EINVAL;
        }
        n = (size_t)(eq - text);
        memcpy(key, text, n);
        key[n] = '\0';
        value = eq + 1;

        if (strcmp(key, "vram_budget") == 0 || strncmp(key, "vram_budget.", 12) == 0)
                return control_set_budget(conf, r, key + 11, value, reason, len);
        if (strcmp(key, "host_budget") == 0 || strncmp(key, "host_budget.", 12) == 0)
                return control_set_host_budget(conf, r, key + 11, value, reason, len);
        if (strcmp(key, "policy") == 0)
                ret = conf_set_reason(conf, "policy", "name", value, reason, len);
        else if (strncmp(key, "policy.", 7) == 0 && strcmp(key + 7, "name") != 0)
                ret = conf_set_reason(conf, "policy", key + 7, value, reason, len);
        else {
                snprintf(reason, len,
                         "unknown key %s (keys: policy, policy.KEY, vram_budget[.GPU], host_budget.NODE)",
                         key);
                return -ENOENT;
        }
        if (ret == 0)
                log_info("%s: %s = %s.", WHY, key, value);
        return ret;
}
