/* SPDX-License-Identifier: MIT */
/*
 * dlsym-next: prints what dlsym answers, for tests/integration/dlsym.sh to
 * compare with and without the shim preloaded:
 *   next      what dlsym(RTLD_NEXT, "probe_name") from libnext-a found ("b")
 *   hooked    the object behind dlsym(libcudart handle, "cudaMalloc")
 *   plain     the object behind dlsym(libcudart handle, "cudaGetErrorString")
 *   proc      the object behind dlsym(libcuda handle, "cuGetProcAddress_v2")
 *   missing   "null+error" for a symbol nobody defines
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

const char *next_probe_name(void);

static const char *object_of(void *p) {
        Dl_info info;
        const char *slash;

        if (!p)
                return "null";
        if (!dladdr(p, &info) || !info.dli_fname)
                return "?";
        slash = strrchr(info.dli_fname, '/');
        return slash ? slash + 1 : info.dli_fname;
}

int main(void) {
        void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
        void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        void *missing;

        if (!rt || !drv) {
                fprintf(stderr, "dlsym-next: %s\n", dlerror());
                return 3;
        }
        printf("next %s\n", next_probe_name());
        printf("hooked %s\n", object_of(dlsym(rt, "cudaMalloc")));
        printf("plain %s\n", object_of(dlsym(rt, "cudaGetErrorString")));
        printf("proc %s\n", object_of(dlsym(drv, "cuGetProcAddress_v2")));
        dlerror();
        missing = dlsym(rt, "kvtier_no_such_symbol");
        printf("missing %s\n", !missing && dlerror() ? "null+error" : "found");
        return 0;
}
