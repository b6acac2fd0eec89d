/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "identity.h"
#include "log.h"
#include "ssd-keep.h"
#include "util.h"

/* A book an earlier kvtierd left, whose process still runs: it waits for
 * that process to re-attach (SSD_HELLO with its token) until deadline_ns. */
struct ssd_kept {
        struct ssd_kept *next;
        struct ssd_book *book;
        uint64_t deadline_ns;
};

struct ssd_keep {
        unsigned grace_s;
        ssd_keep_count_fn count;
        void *ctx;
        struct ssd_kept *head;
};

int ssd_keep_new(unsigned grace_s, ssd_keep_count_fn count, void *ctx, struct ssd_keep **ret) {
        struct ssd_keep *k = calloc(1, sizeof(*k));

        if (!k)
                return -ENOMEM;
        *k = (struct ssd_keep){.grace_s = grace_s, .count = count, .ctx = ctx};
        *ret = k;
        return 0;
}

void ssd_keep_free(struct ssd_keep *k) {
        if (!k)
                return;
        while (k->head) { /* not re-attached yet: the next kvtierd's sweep decides */
                struct ssd_kept *e = k->head;

                k->head = e->next;
                ssd_book_free(e->book, false);
                free(e);
        }
        free(k);
}

int ssd_keep_put(struct ssd_keep *k, struct ssd_book *b, uint64_t now) {
        struct ssd_kept *e = calloc(1, sizeof(*e));

        if (!e)
                return -ENOMEM;
        *e = (struct ssd_kept){
                .next = k->head, .book = b, .deadline_ns = now + (uint64_t)k->grace_s * 1000000000ull};
        k->head = e;
        return 0;
}

static bool token_equal(const uint8_t *a, const uint8_t *b) {
        uint8_t d = 0;

        for (size_t i = 0; i < KVT_SSD_TOKEN_BYTES; i++) /* no early exit: how far a guess got is not told */
                d |= a[i] ^ b[i];
        return d == 0;
}

struct ssd_book *ssd_keep_take(struct ssd_keep *k, pid_t pid, uint32_t uid, const uint8_t *token) {
        static const uint8_t none[KVT_SSD_TOKEN_BYTES];

        if (token_equal(token, none))
                return NULL;
        for (struct ssd_kept **p = &k->head; *p; p = &(*p)->next) {
                struct ssd_kept *e = *p;
                const struct ssd_owner *o = ssd_book_owner(e->book);
                struct ssd_book *b = e->book;

                if (!token_equal(o->token, token))
                        continue;
                if (o->uid != uid || o->pid != pid) {
                        log_warning("SSD client pid %d (uid %u) presented the token of the spills of pid %d "
                                    "(uid %u): refused, a new session.",
                                    (int)pid, (unsigned)uid, (int)o->pid, (unsigned)o->uid);
                        return NULL;
                }
                *p = e->next;
                free(e);
                return b;
        }
        log_warning("SSD client pid %d (uid %u) asked for spills kvtierd does not hold (not kept over a "
                    "restart, past [ssd] reattach_grace, or not its own): a new session; its earlier spills "
                    "are lost.",
                    (int)pid, (unsigned)uid);
        return NULL;
}

uint64_t ssd_keep_expire(struct ssd_keep *k, uint64_t now) {
        uint64_t next = 0;

        for (struct ssd_kept **p = &k->head; *p;) {
                struct ssd_kept *e = *p;
                const struct ssd_owner *o = ssd_book_owner(e->book);

                if (e->deadline_ns > now) {
                        next = next ? MIN(next, e->deadline_ns) : e->deadline_ns;
                        p = &e->next;
                        continue;
                }
                *p = e->next;
                log_info("Removed %zu SSD spills (%llu bytes) of pid %d (uid %u): not re-attached within "
                         "[ssd] reattach_grace (%u s).",
                         ssd_book_n_spills(e->book), (unsigned long long)ssd_book_live_bytes(e->book),
                         (int)o->pid, (unsigned)o->uid, k->grace_s);
                k->count(k->ctx, o->uid, -(int64_t)ssd_book_live_bytes(e->book));
                ssd_book_free(e->book, true);
                free(e);
        }
        return next;
}

json_object *ssd_keep_json(const struct ssd_keep *k, uint64_t now) {
        json_object *a = json_object_new_array();

        for (const struct ssd_kept *e = k->head; e; e = e->next) {
                json_object *c = json_object_new_object();
                const struct ssd_owner *o = ssd_book_owner(e->book);
                uint64_t left_ms = e->deadline_ns > now ? (e->deadline_ns - now) / 1000000 : 0;

                json_object_object_add(c, "pid", json_object_new_int64(o->pid));
                json_object_object_add(c, "uid", json_object_new_int64(o->uid));
                json_object_object_add(c, "live_spills",
                                       json_object_new_int64((int64_t)ssd_book_n_spills(e->book)));
                json_object_object_add(c, "bytes",
                                       json_object_new_int64((int64_t)ssd_book_live_bytes(e->book)));
                json_object_object_add(c, "expires_in_ms", json_object_new_int64((int64_t)left_ms));
                json_object_array_add(a, c);
        }
        return a;
}

/* ------------------------------------------------------------ the sweep at start */

/* Why the process that made a book is gone, or NULL while it runs: its pid
 * must be there with the start time recorded (a pid reused since has
 * another).  A /proc that cannot be read keeps the book: the grace decides. */
static const char *owner_gone(const char *proc_root, const struct ssd_journal_header *h) {
        uint64_t t = 0;
        int r = identity_pid_start_time(proc_root, h->pid, &t);

        if (r == -ESRCH)
                return "its process ended while kvtierd was down";
        if (r == 0 && h->start_time && t != h->start_time)
                return "its pid is another process's now";
        return NULL;
}

/* Keeps a loaded book for its process; its bytes count against its uid's
 * quota as live ones.  Returns 0 or -ENOMEM. */
static int sweep_keep(struct ssd_keep *k, struct ssd_book *b, uint64_t now) {
        const struct ssd_owner *o = ssd_book_owner(b);
        int r = ssd_keep_put(k, b, now);

        if (r < 0)
                return r;
        k->count(k->ctx, o->uid, (int64_t)ssd_book_live_bytes(b));
        log_info("Kept %zu SSD spills (%llu bytes) of pid %d (uid %u) for it to re-attach within %u s.",
                 ssd_book_n_spills(b), (unsigned long long)ssd_book_live_bytes(b), (int)o->pid,
                 (unsigned)o->uid, k->grace_s);
        return 0;
}

/* Deletes the book id an earlier kvtierd left, or loads and keeps it; one
 * another kvtierd on the same directory holds is not touched. */
static void sweep_book(struct ssd_keep *k, int dir_fd, const char *dir, const char *proc_root,
                       const char *id, uint64_t now) {
        struct ssd_journal_header h;
        struct ssd_book *b = NULL;
        const char *why;
        int fd, r = ssd_book_claim(dir_fd, id, &fd, &h);

        if (r == -EBUSY)
                return;
        if (r < 0) {
                log_info("Removed SSD files %s.* in %s: %s.", id, dir,
                         r == -EBADMSG ? "no good index header" : strerror(-r));
                (void)ssd_book_unlink(dir_fd, id);
                if (fd >= 0)
                        close(fd);
                return;
        }
        why = owner_gone(proc_root, &h);
        if (!why) {
                r = ssd_book_load(dir_fd, id, fd, &b);
                if (r == 0 && (r = sweep_keep(k, b, now)) == 0)
                        return;
                if (r == -ENOMEM) { /* not the files' fault: the next kvtierd may keep them */
                        log_warning(
                                "Failed to keep the SSD spills of pid %d (uid %u): out of memory, ignoring.",
                                (int)h.pid, (unsigned)h.uid);
                        if (b)
                                ssd_book_free(b, false);
                        else
                                close(fd);
                        return;
                }
                why = "its files are unreadable";
        }
        log_info("Removed the SSD spills of pid %d (uid %u) in %s: %s.", (int)h.pid, (unsigned)h.uid, dir,
                 why);
        (void)ssd_book_unlink(dir_fd, id);
        close(fd);
}

void ssd_keep_sweep(struct ssd_keep *k, int dir_fd, const char *dir, const char *proc_root, uint64_t now) {
        int fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 3);
        char id[SSD_BOOK_ID_LEN + 1], name[SSD_BOOK_ID_LEN + 8];
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *e;

        if (!d) {
                if (fd >= 0)
                        close(fd);
                log_warning("Failed to read [ssd] dir %s: %s; files an earlier kvtierd left stay, ignoring.",
                            dir, strerror(errno));
                return;
        }
        while ((e = readdir(d)))
                if (ssd_book_id_of(e->d_name, "idx", id))
                        sweep_book(k, dir_fd, dir, proc_root, id, now);
        rewinddir(d);
        /* a book's index is made first and deleted last: other files of an
         * id without one are nobody's */
        while ((e = readdir(d))) {
                bool data = ssd_book_id_of(e->d_name, "spill", id);

                if (!data && !ssd_book_id_of(e->d_name, "idx.new", id))
                        continue;
                snprintf(name, sizeof(name), "%s.idx", id);
                if (faccessat(dir_fd, name, F_OK, 0) == 0)
                        continue; /* a book's: kept, another kvtierd's, or compacting there */
                (void)unlinkat(dir_fd, e->d_name, 0);
        }
        closedir(d);
}
