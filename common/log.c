/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "util.h"

static const char *log_prefix = "kvtier";
static int log_max_level = KVT_LOG_INFO;
static int log_journal = -1; /* stderr is connected to journald (JOURNAL_STREAM set) */
static kvt_log_sink_t log_sink;

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

void kvt_log_set_journal_sink(kvt_log_sink_t sink) {
        log_sink = sink;
}

/* Writes one line: through the journal sink where stderr is the journal
 * and the sink takes it, else to stderr.  A message never spans lines:
 * control characters in it are escaped, whoever put them there. */
static void log_write(int level, const char *const *fields, const char *fmt, va_list ap) {
        char raw[1024], line[2048];

        vsnprintf(raw, sizeof(raw), fmt, ap);
        kvt_escape_controls(raw, line, sizeof(line));
        if (log_journal < 0)
                log_journal = getenv("JOURNAL_STREAM") != NULL;
        if (log_journal && log_sink && log_sink(level, line, fields) >= 0)
                return;
        if (log_journal)
                fprintf(stderr, "<%d>%s\n", level, line);
        else if (*log_prefix)
                fprintf(stderr, "%s: %s\n", log_prefix, line);
        else
                fprintf(stderr, "%s\n", line);
}

/* Both entry points: logs at level unless filtered, keeps errno, returns -|err|. */
static int log_va(int level, int err, const char *const *fields, const char *fmt, va_list ap) {
        int saved = errno;

        if (err < 0)
                err = -err;
        if (level > log_max_level)
                return -err;
        log_write(level, fields, fmt, ap);
        errno = saved;
        return -err;
}

int kvt_log_full(int level, int err, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = log_va(level, err, NULL, fmt, ap);
        va_end(ap);
        return r;
}

int kvt_log_fields(int level, int err, const char *const *fields, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = log_va(level, err, fields, fmt, ap);
        va_end(ap);
        return r;
}
