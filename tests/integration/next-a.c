/* SPDX-License-Identifier: MIT */
/* Linked before libnext-b: its probe_name() hides b's, and next_probe_name()
 * reaches b's through dlsym(RTLD_NEXT), as interposing libraries do. */
#define _GNU_SOURCE
#include <dlfcn.h>

const char *probe_name(void);
const char *next_probe_name(void);

const char *probe_name(void) {
        return "a";
}

const char *next_probe_name(void) {
        const char *(*next)(void);

        *(void **)&next = dlsym(RTLD_NEXT, "probe_name");
        return next ? next() : "none";
}
