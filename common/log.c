/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"

static const char *log_prefix = "kvtier";
static int log_max_level = KVT_LOG_INFO;
static int log_journal = -1; /* stderr is connected to journald (JOURNAL_STREAM set) */

void kvt_log_setup(const char *prefix, int max_level) {
        log_prefix = prefix;
        log_max_level = max_level;
        log_journal = getenv("JOURNAL_STREAM") != NULL;
}

int kvt_log_get_max_level(void) {
        return log_max_level;
}

int kvt_log_level_parse(const char *s) {
        static const char *const names[] = {
                [KVT_LOG_ERR] = "err",   [KVT_LOG_WARNING] = "warning", [KVT_LOG_NOTICE] = "notice",
                [KVT_LOG_INFO] = "info", [KVT_LOG_DEBUG] = "debug",
        };
        for (int i = KVT_LOG_ERR; i <= KVT_LOG_DEBUG; i++)
                if (strcasecmp(s, names[i]) == 0)
                        return i;
        if (strcasecmp(s, "error") == 0)
                return KVT_LOG_ERR;
        if (strcasecmp(s, "warn") == 0)
                return KVT_LOG_WARNING;
        return -EINVAL;
}

int kvt_log_full(int level, int err, const char *fmt, ...) {
        char buf[1024];
        va_list ap;
        int saved = errno;

        if (err < 0)
                err = -err;
        if (level > log_max_level)
                return -err;
        if (log_journal < 0)
                log_journal = getenv("JOURNAL_STREAM") != NULL;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        if (log_journal)
                fprintf(stderr, "<%d>%s\n", level, buf);
        else
                fprintf(stderr, "%s: %s\n", log_prefix, buf);
        errno = saved;
        return -err;
}
