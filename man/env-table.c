/* SPDX-License-Identifier: MIT */
/*
 * Prints the shim's environment table as kvtier-run --print-env does
 * (env_print(), shim/env.c), without preloading the shim into a process at
 * build time.  The build renders it into libkvtier(7); tests/integration/
 * docs.sh checks that both print the same.
 */
#include "config.h"

#include <stdio.h>

#include "env.h"

int main(void) {
        env_print(stdout);
        return ferror(stdout) ? 1 : 0;
}
