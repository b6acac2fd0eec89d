/* SPDX-License-Identifier: MIT */
/*
 * seccomp-exec: plays systemd's SystemCallFilter= for kvtierd's tests.
 * Runs COMMAND under a seccomp filter that allows the system calls named in
 * ALLOW_FILE (whitespace separated, as the test expands the unit's filter
 * with systemd-analyze syscall-filter), fails those in the comma list EPERM
 * with EPERM (as SystemCallErrorNumber=EPERM would), and kills the process
 * on any other (SIGSYS), so that a call the unit would refuse is seen.
 *
 *   seccomp-exec ALLOW_FILE EPERM_LIST COMMAND [ARGS...]
 *
 * libseccomp is loaded at run time (libseccomp.so.2, which systemd itself
 * needs), so the build needs no libseccomp-dev.  Exit status: COMMAND's, 77
 * where libseccomp or no_new_privs is not available, 99 for a setup failure.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

/* Actions from libseccomp's seccomp.h (stable ABI of libseccomp.so.2). */
#define ACT_KILL_PROCESS 0x80000000U
#define ACT_ALLOW        0x7fff0000U
#define ACT_ERRNO(e)     (0x00050000U | ((uint32_t)(e)&0x0000ffffU))

struct seccomp_api {
        void *(*init)(uint32_t def_action);
        int (*rule_add)(void *ctx, uint32_t action, int syscall, unsigned int arg_cnt, ...);
        int (*resolve_name)(const char *name);
        int (*load)(void *ctx);
};

static int api_open(struct seccomp_api *api) {
        void *h = dlopen("libseccomp.so.2", RTLD_NOW);

        if (!h)
                return -1;
        api->init = (void *(*)(uint32_t))dlsym(h, "seccomp_init");
        api->rule_add = (int (*)(void *, uint32_t, int, unsigned int, ...))dlsym(h, "seccomp_rule_add");
        api->resolve_name = (int (*)(const char *))dlsym(h, "seccomp_syscall_resolve_name");
        api->load = (int (*)(void *))dlsym(h, "seccomp_load");
        return api->init && api->rule_add && api->resolve_name && api->load ? 0 : -1;
}

/* Adds one rule for name; names this architecture lacks are skipped, as
 * systemd does.  Returns 0 or -1. */
static int add(const struct seccomp_api *api, void *ctx, uint32_t action, const char *name) {
        int nr = api->resolve_name(name);

        if (nr < 0)
                return 0;
        if (api->rule_add(ctx, action, nr, 0) < 0) {
                fprintf(stderr, "seccomp-exec: cannot add a rule for %s\n", name);
                return -1;
        }
        return 0;
}

int main(int argc, char **argv) {
        struct seccomp_api api;
        char name[128], *list, *save = NULL;
        FILE *f;
        void *ctx;

        if (argc < 4) {
                fprintf(stderr, "usage: seccomp-exec ALLOW_FILE EPERM_LIST COMMAND [ARGS...]\n");
                return 99;
        }
        if (api_open(&api) < 0) {
                fprintf(stderr, "seccomp-exec: libseccomp.so.2 not usable: %s\n", dlerror());
                return 77;
        }
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
                fprintf(stderr, "seccomp-exec: no_new_privs: %s\n", strerror(errno));
                return 77;
        }
        ctx = api.init(ACT_KILL_PROCESS);
        f = fopen(argv[1], "re");
        if (!ctx || !f) {
                fprintf(stderr, "seccomp-exec: cannot set up the filter from %s\n", argv[1]);
                return 99;
        }
        while (fscanf(f, "%127s", name) == 1)
                if (add(&api, ctx, ACT_ALLOW, name) < 0)
                        return 99;
        fclose(f);
        list = strdup(argv[2]);
        for (char *n = strtok_r(list, ",", &save); n; n = strtok_r(NULL, ",", &save))
                if (add(&api, ctx, ACT_ERRNO(EPERM), n) < 0)
                        return 99;
        if (api.load(ctx) < 0) {
                fprintf(stderr, "seccomp-exec: cannot load the filter\n");
                return 99;
        }
        execvp(argv[3], argv + 3);
        fprintf(stderr, "seccomp-exec: cannot run %s: %s\n", argv[3], strerror(errno));
        return 99;
}
