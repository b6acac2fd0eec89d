/* SPDX-License-Identifier: MIT */
/*
 * The environment table (env.h).  What the daemon decides (the capture
 * rules of its [capture] section, the policy, budgets) comes in its
 * WELCOME, not from here: a user sets at most the nine variables of the
 * first part.  The second part, one variable, is for tests, benchmarks and
 * diagnostics.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "env.h"
#include "log.h"
#include "util.h"

#define MAX_TIMEOUT_MS 60000
#define STR(x)         STR_(x)
#define STR_(x)        #x

struct env_var {
        const char *name;
        const char *values; /* what it takes, as printed and as a bad value's warning says */
        const char *def;    /* its default, as printed */
        const char *help;
        int (*parse)(const char *v, struct shim_config *cfg); /* 0, or -EINVAL: the default stays */
};

/* The one boolean parser: 1, yes, true, on or 0, no, false, off (any case). */
static int parse_bool(const char *v, bool *ret) {
        if (!strcmp(v, "1") || !strcasecmp(v, "yes") || !strcasecmp(v, "true") || !strcasecmp(v, "on"))
                *ret = true;
        else if (!strcmp(v, "0") || !strcasecmp(v, "no") || !strcasecmp(v, "false") || !strcasecmp(v, "off"))
                *ret = false;
        else
                return -EINVAL;
        return 0;
}

static int parse_nonzero_bytes(const char *v, uint64_t *ret) {
        uint64_t bytes;

        if (parse_bytes(v, &bytes) < 0 || bytes == 0)
                return -EINVAL;
        *ret = bytes;
        return 0;
}

static int parse_path(const char *v, char **ret) {
        char *p = strdup(v);

        if (!p)
                return -ENOMEM;
        free(*ret);
        *ret = p;
        return 0;
}

/* Takes effect at once: the later variables' warnings obey it. */
static int parse_log(const char *v, struct shim_config *cfg) {
        int level = kvt_log_level_parse(v);

        (void)cfg;
        if (level < 0)
                return level;
        kvt_log_setup("kvtier", level);
        return 0;
}

static int parse_disable(const char *v, struct shim_config *cfg) {
        return parse_bool(v, &cfg->disabled);
}

static int parse_socket(const char *v, struct shim_config *cfg) {
        if (*v != '/' || strlen(v) >= sizeof(cfg->socket_path))
                return -EINVAL;
        strcpy(cfg->socket_path, v);
        return 0;
}

static int parse_min_size(const char *v, struct shim_config *cfg) {
        return parse_nonzero_bytes(v, &cfg->min_size_bytes);
}

static int parse_capacity(const char *v, struct shim_config *cfg) {
        if (strcmp(v, "auto") == 0) {
                cfg->capacity_auto = true;
                return 0;
        }
        return parse_bytes(v, &cfg->capacity_bytes) < 0 ? -EINVAL : 0;
}

/* A boolean, or the VRAM budget of the kvtierd it starts (which implies
 * one): KVTIER_STANDALONE=8G. */
static int parse_standalone(const char *v, struct shim_config *cfg) {
        uint64_t budget;

        if (parse_bool(v, &cfg->standalone) == 0) {
                cfg->vram_budget_bytes = 0;
                return 0;
        }
        if (parse_nonzero_bytes(v, &budget) < 0)
                return -EINVAL;
        cfg->standalone = true;
        cfg->vram_budget_bytes = budget;
        return 0;
}

static int parse_timeout(const char *v, struct shim_config *cfg) {
        char *end;
        long ms = strtol(v, &end, 10);

        if (*end || ms < 1 || ms > MAX_TIMEOUT_MS)
                return -EINVAL;
        cfg->timeout_ms = (int)ms;
        return 0;
}

static int parse_cudart(const char *v, struct shim_config *cfg) {
        return parse_path(v, &cfg->cudart_path);
}

/* off (0, none), or a comma list of cupti, launch, hint. */
static int parse_heat(const char *v, struct shim_config *cfg) {
        unsigned mask = 0;

        if (strcmp(v, "off") == 0 || strcmp(v, "0") == 0 || strcmp(v, "none") == 0) {
                cfg->heat_sources = 0;
                return 0;
        }
        for (const char *p = v; *p;) {
                size_t n = strcspn(p, ",");

                if (n == 5 && strncmp(p, "cupti", 5) == 0)
                        mask |= HEAT_SRC_CUPTI;
                else if (n == 6 && strncmp(p, "launch", 6) == 0)
                        mask |= HEAT_SRC_LAUNCH;
                else if (n == 4 && strncmp(p, "hint", 4) == 0)
                        mask |= HEAT_SRC_HINT;
                else
                        return -EINVAL;
                p += n + (p[n] == ',');
        }
        if (!mask)
                return -EINVAL;
        cfg->heat_sources = mask;
        return 0;
}

/* A comma list of diagnostics: print-env, trace=PATH, heat-stats=PATH,
 * host-numa=BOOL (so a path holds no comma).  One bad item leaves all of
 * them at their defaults: a half-applied list would measure something else
 * than was asked. */
static int parse_debug(const char *v, struct shim_config *cfg) {
        struct shim_config d = *cfg;
        char *list = strdup(v), *save = NULL;
        int r = 0;

        if (!list)
                return -ENOMEM;
        for (char *item = strtok_r(list, ",", &save); item && r == 0; item = strtok_r(NULL, ",", &save)) {
                char *val = strchr(item, '=');

                if (val)
                        *val++ = '\0';
                if (strcmp(item, "print-env") == 0 && !val)
                        d.print_env = true;
                else if (strcmp(item, "trace") == 0 && val && *val)
                        r = parse_path(val, &d.trace_path);
                else if (strcmp(item, "heat-stats") == 0 && val && *val)
                        r = parse_path(val, &d.heat_stats_path);
                else if (strcmp(item, "host-numa") == 0 && val)
                        r = parse_bool(val, &d.host_numa);
                else
                        r = -EINVAL;
        }
        free(list);
        if (r < 0) {
                if (d.trace_path != cfg->trace_path)
                        free(d.trace_path);
                if (d.heat_stats_path != cfg->heat_stats_path)
                        free(d.heat_stats_path);
                return r;
        }
        *cfg = d;
        return 0;
}

/* KVTIER_LOG first: the warnings of the others are printed at its level. */
static const struct env_var user_vars[] = {
        {"KVTIER_LOG", "err, warning, notice, info, debug", "warning",
         "what the shim logs to stderr (and, with KVTIER_STANDALONE, its kvtierd)", parse_log},
        {"KVTIER_DISABLE", "a boolean", "0", "pass every call straight through", parse_disable},
        {"KVTIER_SOCKET", "an absolute path", KVT_RUNSTATEDIR "/kvtier/kvtierd.sock", "the daemon's socket",
         parse_socket},
        {"KVTIER_MIN_SIZE", "bytes: 64M, 8G ...", "the daemon's [capture] min_size (64M)",
         "smallest allocation captured", parse_min_size},
        {"KVTIER_CAPACITY", "bytes: 64G ..., or auto", "off",
         "what cudaMemGetInfo reports as total; free is that less what the card has in use and what is "
         "captured. auto: the GPU's VRAM budget plus the daemon's [host] host_budget grant",
         parse_capacity},
        {"KVTIER_STANDALONE", "a boolean, or bytes: 8G ...", "0",
         "no service: the first capture starts a kvtierd of this process's own and connects to it; bytes "
         "are that kvtierd's [gpu] vram_budget (else its config's, 80% of the GPU)",
         parse_standalone},
        {"KVTIER_TIMEOUT_MS", "1.." STR(MAX_TIMEOUT_MS), STR(DEFAULT_TIMEOUT_MS),
         "longest wait on the daemon, in milliseconds", parse_timeout},
        {"KVTIER_CUDART", "a path", "libcudart.so.13, .12, then /usr/local/cuda/lib64/libcudart.so.13",
         "the runtime that manages memory a program without one allocates through the driver", parse_cudart},
        {"KVTIER_HEAT", "off, or a list of cupti, launch, hint", "cupti,launch,hint",
         "sources of access heat", parse_heat},
};

/* Not for users: what changes how the shim is measured or what it records. */
static const struct env_var test_vars[] = {
        {"KVTIER_DEBUG", "a list of print-env, trace=PATH, heat-stats=PATH, host-numa=BOOL", "none",
         "print-env: print this table at load (kvtier-run --print-env); trace: record every sampled access "
         "in the kvtier-trace 1 format, for kvtier-sim; heat-stats: one JSON line of sampler statistics at "
         "exit; host-numa=0: the host tier in plain host memory where the daemon names no node, the "
         "mover's threads unbound, the GPU's home node unknown to the daemon",
         parse_debug},
};

void env_defaults(struct shim_config *ret) {
        *ret = (struct shim_config)SHIM_CONFIG_DEFAULTS;
}

static void parse_vars(const struct env_var *vars, size_t n, struct shim_config *cfg) {
        for (size_t i = 0; i < n; i++) {
                const char *v = getenv(vars[i].name);

                if (!v || !*v) /* empty is unset */
                        continue;
                if (vars[i].parse(v, cfg) < 0)
                        log_warning("Invalid %s=%s (%s), ignoring.", vars[i].name, v, vars[i].values);
        }
}

void env_parse(struct shim_config *cfg) {
        parse_vars(user_vars, ELEMENTSOF(user_vars), cfg);
        parse_vars(test_vars, ELEMENTSOF(test_vars), cfg);
}

static void print_vars(FILE *f, const struct env_var *vars, size_t n) {
        for (size_t i = 0; i < n; i++)
                fprintf(f, "%s\t%s\t%s\t%s\n", vars[i].name, vars[i].values, vars[i].def, vars[i].help);
}

void env_print(FILE *f) {
        fprintf(f, "# variable\tvalues\tdefault\tmeaning\n");
        print_vars(f, user_vars, ELEMENTSOF(user_vars));
        fprintf(f, "# for tests and diagnostics:\n");
        print_vars(f, test_vars, ELEMENTSOF(test_vars));
        fflush(f);
}
