/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes the config parser with arbitrary files: it must never crash, and a
 * file it accepts must leave every value inside its key's range.
 */
#define _GNU_SOURCE
#include "config.h"

#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conf.h"
#include "fuzz.h"
#include "log.h"
#include "protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct conf *c = NULL;
        char path[64];
        int fd, r;

        kvt_log_setup("fuzz-config", KVT_LOG_ERR - 1); /* errors are expected: keep quiet */
        fd = memfd_create("kvtierd.conf", MFD_CLOEXEC);
        if (fd < 0 || write(fd, data, size) != (ssize_t)size)
                fuzz_fail("memfd setup failed");
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        if (conf_new(&c) < 0)
                fuzz_fail("out of memory");
        r = conf_load(c, path, true);
        if (r == 0) {
                unsigned tick = conf_tick_ms(c);
                if (tick < 1 || tick > 10000)
                        fuzz_fail("accepted tick_ms %u", tick);
                for (int d = 0; d < KVT_MAX_GPUS; d++) {
                        struct budget_spec b;
                        conf_gpu_budget(c, d, &b, NULL);
                        if (b.percent > 100 || (b.percent && b.bytes))
                                fuzz_fail("accepted budget %u%% / %llu bytes", b.percent,
                                          (unsigned long long)b.bytes);
                }
                if (conf_capture_apis(c) & ~(uint32_t)KVT_API_FAMILY_ALL)
                        fuzz_fail("accepted [capture] apis 0x%x", conf_capture_apis(c));
                if (!conf_socket(c) || conf_socket(c)[0] != '/')
                        fuzz_fail("accepted a relative socket path");
        }
        conf_free(c);
        close(fd);
        return 0;
}
