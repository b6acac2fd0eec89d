/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdarg.h>

/* Levels follow syslog's numbering so the daemon can hand them to journald. */
enum kvt_log_level {
        KVT_LOG_ERR = 3,
        KVT_LOG_WARNING = 4,
        KVT_LOG_NOTICE = 5,
        KVT_LOG_INFO = 6,
        KVT_LOG_DEBUG = 7,
};

/* Sets the most verbose level that is printed, and the prefix ("kvtierd";
 * "" for none), and reads JOURNAL_STREAM; before any other thread logs. */
void kvt_log_setup(const char *prefix, int max_level);

/* Parses "err", "warning", "notice", "info", "debug".  Returns the level or -EINVAL. */
int kvt_log_level_parse(const char *s);

int kvt_log_get_max_level(void);

/* Logs to stderr as "<prefix>: message" (with a syslog "<N>" prefix when
 * stderr is the journal), control characters in the message escaped.  Returns -abs(err) so callers can
 * `return kvt_log_error_errno(r, ...)`; err may be 0. */
int kvt_log_full(int level, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* As kvt_log_full(), with journal fields ("KVTIER_PEER_UID=1001", a
 * NULL-terminated list; may be NULL) that only the journal sink sees. */
int kvt_log_fields(int level, int err, const char *const *fields, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

/* Takes a line (level, escaped message, fields or NULL) where stderr is the
 * journal; returns < 0 to have it written to stderr instead. */
typedef int (*kvt_log_sink_t)(int level, const char *message, const char *const *fields);

/* Sets the sink (the daemon's sd_journal_sendv()); NULL: stderr only. */
void kvt_log_set_journal_sink(kvt_log_sink_t sink);

#define log_error_errno(err, ...) kvt_log_full(KVT_LOG_ERR, (err), __VA_ARGS__)
#define log_warning_errno(err, ...) kvt_log_full(KVT_LOG_WARNING, (err), __VA_ARGS__)
#define log_error(...) kvt_log_full(KVT_LOG_ERR, 0, __VA_ARGS__)
#define log_warning(...) kvt_log_full(KVT_LOG_WARNING, 0, __VA_ARGS__)
#define log_notice(...) kvt_log_full(KVT_LOG_NOTICE, 0, __VA_ARGS__)
#define log_info(...) kvt_log_full(KVT_LOG_INFO, 0, __VA_ARGS__)
#define log_debug(...) kvt_log_full(KVT_LOG_DEBUG, 0, __VA_ARGS__)
