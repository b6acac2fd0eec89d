/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "identity.h"
#include "log.h"
#include "ssd-block.h"
#include "ssd-book.h"
#include "ssd-io.h"
#include "ssd-keep.h"
#include "ssd.h"
#include "util.h"

/* Spills one client may hold at once, whatever their size: the daemon's
 * memory for them (48 bytes and one block's 32 each) is bounded by this and
 * the byte quotas together. */
#define SSD_MAX_SPILLS_PER_CLIENT 65536

/* What a session did, for status; under the store's lock. */
struct ssd_stats {
        uint64_t live_spills, live_bytes, stored_bytes;
        uint64_t spills, restores, drops;
        uint64_t checksum_failures, short_reads, io_errors, retries, refused;
        uint64_t write_bytes, write_ns, read_bytes, read_ns;
};

struct ssd_uid {
        uint32_t uid;
        uint64_t bytes;
};

struct ssd_store {
        struct conf_ssd cfg;
        int dir_fd; /* -1: the tier is off */
        char proc_root[256];
        pthread_mutex_t lock;
        struct ssd_session *sessions;
        struct ssd_keep *keep; /* books an earlier kvtierd left, for their clients */
        struct ssd_uid *uids;
        size_t n_uids;
        struct ssd_stats gone; /* of sessions that ended */
        unsigned next_id;
        int direct;    /* -1 unknown yet, 0 buffered (the filesystem refused O_DIRECT), 1 O_DIRECT */
        int uring;     /* -1 unknown yet, 0 pread/pwrite, 1 io_uring */
        bool stopping; /* ssd_store_stop(): sessions ended from here on keep their files */
        atomic_flag warned_buffered, warned_uring;
};

struct ssd_session {
        struct ssd_store *store;
        struct ssd_session *next;
        unsigned id;
        pid_t pid;
        uint32_t uid;
        int sock, stop_fd, done_fd;
        void *staging;
        uint64_t staging_bytes;
        struct ssd_book *book; /* NULL when the tier is off */
        uint64_t block_bytes;  /* the book's */
        bool reattached;       /* the book is one an earlier kvtierd kept */
        bool has_files;        /* for status, under the store's lock */
        bool client_left;      /* the thread ended for the client, not for a stop: the files go */
        struct ssd_io *io;
        struct ssd_io_op *ops;
        void **bounce; /* queue_depth buffers of block_bytes' compress bound, for zstd */
        size_t n_bounce, bounce_bytes;
        struct ssd_stats st;
        bool warned_retry;
        pthread_t thread;
        bool thread_started;
        struct kvt_msg msg;
};

/* ------------------------------------------------------------ quotas per uid */

static struct ssd_uid *uid_get_locked(struct ssd_store *s, uint32_t uid) {
        struct ssd_uid *a;

        for (size_t i = 0; i < s->n_uids; i++)
                if (s->uids[i].uid == uid)
                        return &s->uids[i];
        a = realloc(s->uids, (s->n_uids + 1) * sizeof(*a));
        if (!a)
                return NULL;
        s->uids = a;
        a[s->n_uids] = (struct ssd_uid){.uid = uid};
        return &a[s->n_uids++];
}

/* The kept books' part of the quota books (ssd-keep.h). */
static void uid_count_locked(void *ctx, uint32_t uid, int64_t bytes) {
        struct ssd_uid *u = uid_get_locked(ctx, uid);

        if (u)
                u->bytes += (uint64_t)bytes;
}

/* ------------------------------------------------------------ the store */

static int dir_open(const char *path) {
        char buf[sizeof(((struct conf_ssd *)0)->dir)];
        int fd;

        /* mkdir -p, each level 0700 where it is made */
        snprintf(buf, sizeof(buf), "%s", path);
        for (char *p = buf + 1; *p; p++)
                if (*p == '/') {
                        *p = 0;
                        (void)mkdir(buf, 0700);
                        *p = '/';
                }
        if (mkdir(buf, 0700) < 0 && errno != EEXIST)
                return -errno;
        fd = open(buf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static void store_open_dir(struct ssd_store *s) {
        int fd = dir_open(s->cfg.dir);
        struct stat st;

        if (fd < 0)
                log_warning("Failed to open [ssd] dir %s: %s; the SSD tier is off, ignoring.", s->cfg.dir,
                            strerror(-fd));
        else if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 0022)) {
                log_warning(
                        "[ssd] dir %s is not kvtierd's own or is writable by others; the SSD tier is off, "
                        "ignoring.",
                        s->cfg.dir);
                close(fd);
        } else
                s->dir_fd = fd;
}

int ssd_store_new(const struct conf *conf, const char *proc_root, struct ssd_store **ret) {
        struct ssd_store *s = calloc(1, sizeof(*s));

        if (!s)
                return -ENOMEM;
        conf_ssd(conf, &s->cfg);
        snprintf(s->proc_root, sizeof(s->proc_root), "%s", proc_root);
        pthread_mutex_init(&s->lock, NULL);
        s->direct = s->uring = -1;
        s->dir_fd = -1;
        atomic_flag_clear(&s->warned_buffered);
        atomic_flag_clear(&s->warned_uring);
        (void)ssd_faults_from_env();
        if (s->cfg.per_uid_bytes == 0)
                log_info("SSD tier off ([ssd] max_per_uid = 0).");
        else
                store_open_dir(s);
        if (ssd_keep_new(s->cfg.reattach_grace_s, uid_count_locked, s, &s->keep) < 0) {
                ssd_store_free(s);
                return -ENOMEM;
        }
        if (s->dir_fd >= 0) {
                pthread_mutex_lock(&s->lock);
                ssd_keep_sweep(s->keep, s->dir_fd, s->cfg.dir, s->proc_root, now_ns());
                pthread_mutex_unlock(&s->lock);
        }
        *ret = s;
        return 0;
}

void ssd_store_stop(struct ssd_store *s) {
        if (!s)
                return;
        pthread_mutex_lock(&s->lock);
        s->stopping = true;
        pthread_mutex_unlock(&s->lock);
}

uint64_t ssd_store_expire(struct ssd_store *s, uint64_t now) {
        uint64_t next;

        pthread_mutex_lock(&s->lock);
        next = ssd_keep_expire(s->keep, now);
        pthread_mutex_unlock(&s->lock);
        return next;
}

struct ssd_store *ssd_store_free(struct ssd_store *s) {
        if (!s)
                return NULL;
        ssd_keep_free(s->keep);
        if (s->dir_fd >= 0)
                close(s->dir_fd);
        free(s->uids);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
}

/* ------------------------------------------------------------ status */

static void stats_add(struct ssd_stats *to, const struct ssd_stats *from) {
        to->spills += from->spills;
        to->restores += from->restores;
        to->drops += from->drops;
        to->checksum_failures += from->checksum_failures;
        to->short_reads += from->short_reads;
        to->io_errors += from->io_errors;
        to->retries += from->retries;
        to->refused += from->refused;
        to->write_bytes += from->write_bytes;
        to->write_ns += from->write_ns;
        to->read_bytes += from->read_bytes;
        to->read_ns += from->read_ns;
}

static double gbps(uint64_t bytes, uint64_t ns) {
        return ns ? (double)bytes / (double)ns : 0.0;
}

static json_object *stats_json(const struct ssd_stats *st, json_object *o) {
        json_object_object_add(o, "spills", json_object_new_int64((int64_t)st->spills));
        json_object_object_add(o, "restores", json_object_new_int64((int64_t)st->restores));
        json_object_object_add(o, "drops", json_object_new_int64((int64_t)st->drops));
        json_object_object_add(o, "checksum_failures",
                               json_object_new_int64((int64_t)st->checksum_failures));
        json_object_object_add(o, "short_reads", json_object_new_int64((int64_t)st->short_reads));
        json_object_object_add(o, "io_errors", json_object_new_int64((int64_t)st->io_errors));
        json_object_object_add(o, "retries", json_object_new_int64((int64_t)st->retries));
        json_object_object_add(o, "refused", json_object_new_int64((int64_t)st->refused));
        json_object_object_add(o, "written_bytes", json_object_new_int64((int64_t)st->write_bytes));
        json_object_object_add(o, "read_bytes", json_object_new_int64((int64_t)st->read_bytes));
        json_object_object_add(o, "write_gbps", json_object_new_double(gbps(st->write_bytes, st->write_ns)));
        json_object_object_add(o, "read_gbps", json_object_new_double(gbps(st->read_bytes, st->read_ns)));
        return o;
}

void *ssd_store_json(const void *store) {
        struct ssd_store *s = (struct ssd_store *)store;
        json_object *o = json_object_new_object(), *clients = json_object_new_array();
        struct ssd_stats all;

        pthread_mutex_lock(&s->lock);
        all = s->gone;
        json_object_object_add(o, "enabled", json_object_new_boolean(s->dir_fd >= 0));
        json_object_object_add(o, "dir", json_object_new_string(s->cfg.dir));
        json_object_object_add(
                o, "io", s->uring < 0 ? NULL : json_object_new_string(s->uring ? "io_uring" : "pread"));
        json_object_object_add(o, "direct", s->direct < 0 ? NULL : json_object_new_boolean(s->direct));
        json_object_object_add(
                o, "compress",
                json_object_new_string(conf_compress_name(s->cfg.compress)));
        json_object_object_add(o, "block_bytes", json_object_new_int64((int64_t)s->cfg.block_bytes));
        json_object_object_add(o, "max_per_uid", json_object_new_int64((int64_t)s->cfg.per_uid_bytes));
        json_object_object_add(o, "max_per_client", json_object_new_int64((int64_t)s->cfg.per_client_bytes));
        for (struct ssd_session *ss = s->sessions; ss; ss = ss->next) {
                json_object *c = json_object_new_object();

                json_object_object_add(c, "pid", json_object_new_int64(ss->pid));
                json_object_object_add(c, "uid", json_object_new_int64(ss->uid));
                json_object_object_add(c, "files", json_object_new_int64(ss->has_files));
                json_object_object_add(c, "reattached", json_object_new_boolean(ss->reattached));
                json_object_object_add(c, "live_spills", json_object_new_int64((int64_t)ss->st.live_spills));
                json_object_object_add(c, "bytes", json_object_new_int64((int64_t)ss->st.live_bytes));
                json_object_object_add(c, "stored_bytes",
                                       json_object_new_int64((int64_t)ss->st.stored_bytes));
                json_object_array_add(clients, stats_json(&ss->st, c));
                stats_add(&all, &ss->st);
        }
        json_object_object_add(o, "reattach_grace_s", json_object_new_int64(s->cfg.reattach_grace_s));
        json_object_object_add(o, "kept", ssd_keep_json(s->keep, now_ns()));
        pthread_mutex_unlock(&s->lock);
        json_object_object_add(o, "clients", clients);
        json_object_object_add(o, "totals", stats_json(&all, json_object_new_object()));
        return o;
}

/* ------------------------------------------------------------ a session's files */

/* Makes the session's files at its first spill. */
static int files_open(struct ssd_session *ss) {
        struct ssd_store *s = ss->store;
        bool direct = false;
        int r = ssd_book_open_files(ss->book, &direct);

        if (r < 0)
                return r;
        pthread_mutex_lock(&s->lock);
        s->direct = direct;
        ss->has_files = true;
        pthread_mutex_unlock(&s->lock);
        if (!direct && !atomic_flag_test_and_set(&s->warned_buffered))
                log_notice("[ssd] dir %s refuses O_DIRECT: the SSD tier's I/O is buffered.", s->cfg.dir);
        return 0;
}

/* ------------------------------------------------------------ requests */

/* Takes size_bytes of the session's and its uid's quotas.  Returns 0,
 * -EDQUOT (logged) or -ENOMEM. */
static int quota_take(struct ssd_session *ss, uint64_t size_bytes) {
        struct ssd_store *s = ss->store;
        uint64_t client_max = s->cfg.per_client_bytes ? s->cfg.per_client_bytes : s->cfg.per_uid_bytes;
        bool over_client;
        struct ssd_uid *u;
        int r;

        pthread_mutex_lock(&s->lock);
        u = uid_get_locked(s, ss->uid);
        over_client = ss->st.live_bytes + size_bytes > client_max;
        if (!u)
                r = -ENOMEM;
        else if (over_client || u->bytes + size_bytes > s->cfg.per_uid_bytes) {
                ss->st.refused++;
                r = -EDQUOT;
        } else {
                u->bytes += size_bytes;
                ss->st.live_bytes += size_bytes;
                ss->st.live_spills++;
                r = 0;
        }
        pthread_mutex_unlock(&s->lock);
        if (r == -EDQUOT)
                log_info("Client pid %d (uid %u): a spill of %llu bytes is over [ssd] %s, refused.",
                         (int)ss->pid, (unsigned)ss->uid, (unsigned long long)size_bytes,
                         over_client ? "max_per_client" : "max_per_uid");
        return r;
}

/* Gives back what quota_take() took (a spill forgotten), and its stored bytes. */
static void quota_give(struct ssd_session *ss, uint64_t size_bytes, uint64_t stored_bytes) {
        struct ssd_store *s = ss->store;
        struct ssd_uid *u;

        pthread_mutex_lock(&s->lock);
        u = uid_get_locked(s, ss->uid);
        if (u)
                u->bytes -= size_bytes;
        ss->st.live_bytes -= size_bytes;
        ss->st.live_spills--;
        ss->st.stored_bytes -= stored_bytes;
        pthread_mutex_unlock(&s->lock);
}

static int on_open(struct ssd_session *ss, const struct kvt_ssd_open *o, struct kvt_ssd_reply *rep) {
        struct ssd_store *s = ss->store;
        struct ssd_spill *sp;
        int r;

        if (!ssd_book_has_files(ss->book) && (r = files_open(ss)) < 0) {
                log_error("Failed to create an SSD file in %s for client pid %d: %s", s->cfg.dir,
                          (int)ss->pid, strerror(-r));
                return r;
        }
        if (ssd_book_n_spills(ss->book) >= SSD_MAX_SPILLS_PER_CLIENT) {
                pthread_mutex_lock(&s->lock);
                ss->st.refused++;
                pthread_mutex_unlock(&s->lock);
                log_info("Client pid %d (uid %u): %d spills held already, refused.", (int)ss->pid,
                         (unsigned)ss->uid, SSD_MAX_SPILLS_PER_CLIENT);
                return -EDQUOT;
        }
        r = quota_take(ss, o->size_bytes);
        if (r < 0)
                return r;
        r = ssd_book_spill_add(ss->book, o->size_bytes, &sp);
        if (r < 0) {
                quota_give(ss, o->size_bytes, 0);
                return r;
        }
        rep->handle = sp->handle;
        return 0;
}

static void spill_forget(struct ssd_session *ss, struct ssd_spill *sp) {
        uint64_t size = sp->size_bytes;

        quota_give(ss, size, ssd_book_spill_forget(ss->book, sp));
}

/* Checks an I/O request against its spill and the staging buffer: the
 * blocks [first, first + n) and where they are in staging. */
static int io_range(struct ssd_session *ss, const struct kvt_ssd_io *io, struct ssd_spill **ret_sp,
                    uint32_t *ret_first, uint32_t *ret_n) {
        uint64_t bs = ss->block_bytes, end = io->offset + io->len;
        struct ssd_spill *sp = ssd_book_spill_find(ss->book, io->handle);

        if (!sp)
                return -ENOENT;
        if (io->offset % bs || end > sp->size_bytes || (io->len % bs && end != sp->size_bytes))
                return -EINVAL;
        if (io->staging_offset + ssd_block_disk_bytes((uint32_t)MIN(io->len, UINT32_MAX)) >
                    ss->staging_bytes ||
            io->len > UINT32_MAX)
                return -EINVAL;
        *ret_sp = sp;
        *ret_first = (uint32_t)(io->offset / bs);
        *ret_n = (uint32_t)((io->len + bs - 1) / bs);
        return 0;
}

/* Compression buffers per client, at most: as many blocks in flight as fit
 * (at least one), so that 64 MiB blocks at queue depth 32 do not take 2 GiB. */
#define SSD_BOUNCE_MAX_BYTES (64ull << 20)

static int bounce_ready(struct ssd_session *ss) {
        unsigned qd = ss->store->cfg.queue_depth;

        if (ss->bounce)
                return 0;
        ss->bounce_bytes = ssd_block_disk_bytes((uint32_t)ssd_block_compress_bound(ss->block_bytes));
        qd = (unsigned)MIN((uint64_t)qd, MAX(1, SSD_BOUNCE_MAX_BYTES / ss->bounce_bytes));
        ss->bounce = calloc(qd, sizeof(void *));
        if (!ss->bounce)
                return -ENOMEM;
        for (ss->n_bounce = 0; ss->n_bounce < qd; ss->n_bounce++)
                if (!(ss->bounce[ss->n_bounce] = aligned_alloc(KVT_SSD_ALIGN, ss->bounce_bytes)))
                        return -ENOMEM;
        return 0;
}

static void note_io(struct ssd_session *ss, const struct ssd_io_op *ops, size_t n, int r) {
        unsigned retries = 0;

        for (size_t i = 0; i < n; i++)
                retries += ops[i].retries;
        pthread_mutex_lock(&ss->store->lock);
        ss->st.retries += retries;
        if (r == -ENODATA)
                ss->st.short_reads++;
        else if (r < 0)
                ss->st.io_errors++;
        pthread_mutex_unlock(&ss->store->lock);
        if (retries && !ss->warned_retry) {
                ss->warned_retry = true;
                log_warning(
                        "Client pid %d: retried %u transient SSD I/O errors in %s (logged once per client).",
                        (int)ss->pid, retries, ss->store->cfg.dir);
        }
}

/* One I/O request's blocks, for the hooks around each block's I/O. */
struct io_job {
        struct ssd_session *ss;
        struct ssd_spill *sp;
        uint32_t first; /* block index of op 0 */
        char *staging;  /* where op 0's raw bytes are; op i uses bounce buffer i (zstd) */
};

/* The block flag of an [ssd] compress setting other than none. */
static uint32_t codec_flag(unsigned compress) {
        return compress == CONF_COMPRESS_LZ4 ? SSD_BLOCK_LZ4 : SSD_BLOCK_ZSTD;
}

/* Before a block's write: its checksum, compression, place in the file. */
static int write_prepare(void *ctx, size_t i, struct ssd_io_op *op) {
        struct io_job *job = ctx;
        struct ssd_session *ss = job->ss;
        const struct conf_ssd *cfg = &ss->store->cfg;
        struct ssd_block *b = &job->sp->blocks[job->first + i];
        uint64_t off = (uint64_t)(job->first + i) * ss->block_bytes;
        char *raw = job->staging + (uint64_t)i * ss->block_bytes;
        void *buf = raw;
        long c;
        int r;

        if (b->stored_bytes)
                return -EEXIST; /* written once; a spill is not rewritten */
        b->raw_bytes = (uint32_t)MIN(ss->block_bytes, job->sp->size_bytes - off);
        b->hash = ssd_block_hash(raw, b->raw_bytes);
        b->flags = 0;
        if (cfg->compress != CONF_COMPRESS_NONE &&
            (c = ssd_block_compress(codec_flag(cfg->compress), raw, b->raw_bytes, ss->bounce[i], ss->bounce_bytes,
                                    (int)cfg->compress_level)) > 0) {
                buf = ss->bounce[i];
                b->flags = codec_flag(cfg->compress);
                memset((char *)buf + c, 0, ssd_block_disk_bytes((uint32_t)c) - (uint64_t)c);
        } else
                c = b->raw_bytes;
        r = ssd_book_block_place(ss->book, b, (uint32_t)c);
        if (r < 0)
                return r;
        *op = (struct ssd_io_op){.fd = ssd_book_data_fd(ss->book),
                                 .write = true,
                                 .buf = buf,
                                 .len = ssd_block_disk_bytes(b->stored_bytes),
                                 .offset = b->file_offset};
        return 0;
}

/* Before a block's read: where it is, and where it goes (staging, or a
 * bounce buffer to decompress from). */
static int read_prepare(void *ctx, size_t i, struct ssd_io_op *op) {
        struct io_job *job = ctx;
        struct ssd_session *ss = job->ss;
        const struct ssd_block *b = &job->sp->blocks[job->first + i];
        char *to = job->staging + (uint64_t)i * ss->block_bytes;

        if (!b->stored_bytes)
                return -ENODATA; /* never written: there is nothing to restore */
        *op = (struct ssd_io_op){.fd = ssd_book_data_fd(ss->book),
                                 .buf = (b->flags & SSD_BLOCK_CODECS) ? ss->bounce[i] : to,
                                 .len = ssd_block_disk_bytes(b->stored_bytes),
                                 .offset = b->file_offset};
        return 0;
}

/* After a block's read, while others are in flight: decompress, verify. */
static int read_complete(void *ctx, size_t i, struct ssd_io_op *op) {
        struct io_job *job = ctx;
        struct ssd_session *ss = job->ss;
        const struct ssd_block *b = &job->sp->blocks[job->first + i];
        char *to = job->staging + (uint64_t)i * ss->block_bytes;
        int r = ssd_block_decode(b, op->buf, op->len, to, b->raw_bytes);

        if (r < 0) {
                pthread_mutex_lock(&ss->store->lock);
                if (r == -EBADMSG)
                        ss->st.checksum_failures++;
                pthread_mutex_unlock(&ss->store->lock);
                log_warning(
                        "Client pid %d: SSD block %u of spill %llu failed its check: %s; the restore fails.",
                        (int)ss->pid, job->first + (uint32_t)i, (unsigned long long)job->sp->handle,
                        r == -EBADMSG ? "checksum or frame mismatch" : strerror(-r));
        }
        return r;
}

/* Runs n blocks from first on, their raw bytes at staging, in batches of
 * the bounce buffers where any is compressed (zstd), else at once. */
static int run_blocks(struct ssd_session *ss, struct ssd_spill *sp, uint32_t first, uint32_t n,
                      char *staging, bool write, unsigned *ret_retries) {
        bool coded = ss->store->cfg.compress != CONF_COMPRESS_NONE;
        struct io_job job = {.ss = ss, .sp = sp};
        struct ssd_io_hooks hooks = {.prepare = write ? write_prepare : read_prepare,
                                     .complete = write ? NULL : read_complete,
                                     .ctx = &job};
        uint32_t batch = n;
        int r = 0;

        for (uint32_t j = 0; !write && j < n; j++)
                coded |= (sp->blocks[first + j].flags & SSD_BLOCK_CODECS) != 0;
        if (coded) {
                if ((r = bounce_ready(ss)) < 0)
                        return r;
                batch = (uint32_t)ss->n_bounce;
        }
        for (uint32_t done = 0; done < n && r == 0; done += batch) {
                uint32_t k = MIN(batch, n - done);

                job.first = first + done;
                job.staging = staging + (uint64_t)done * ss->block_bytes;
                r = ssd_io_run(ss->io, ss->ops + done, k, &hooks);
                note_io(ss, ss->ops + done, k, r);
                for (uint32_t j = 0; j < k; j++)
                        *ret_retries += ss->ops[done + j].retries;
        }
        return r;
}

/* Writes n blocks from first on from src (staging). */
static int do_write(struct ssd_session *ss, struct ssd_spill *sp, uint32_t first, uint32_t n, char *src,
                    unsigned *ret_retries) {
        int r = run_blocks(ss, sp, first, n, src, true, ret_retries);
        uint64_t stored = 0;

        if (r == 0) /* the spill's index record, once this completes it */
                r = ssd_book_spill_written(ss->book, sp, n);
        if (r < 0) /* none of this request's blocks counts as written */
                (void)ssd_book_blocks_unwrite(ss->book, &sp->blocks[first], n);
        else
                for (uint32_t j = 0; j < n; j++)
                        stored += sp->blocks[first + j].stored_bytes;
        pthread_mutex_lock(&ss->store->lock);
        ss->st.stored_bytes += stored;
        pthread_mutex_unlock(&ss->store->lock);
        return r;
}

/* Reads n blocks from first on into dst (staging), each checked. */
static int do_read(struct ssd_session *ss, struct ssd_spill *sp, uint32_t first, uint32_t n, char *dst,
                   unsigned *ret_retries) {
        return run_blocks(ss, sp, first, n, dst, false, ret_retries);
}

static int on_io(struct ssd_session *ss, bool write, const struct kvt_ssd_io *io,
                 struct kvt_ssd_reply *rep) {
        struct ssd_spill *sp;
        uint32_t first, n;
        uint64_t t0 = now_ns(), dt;
        int r;

        rep->handle = io->handle;
        r = io_range(ss, io, &sp, &first, &n);
        if (r < 0)
                return r;
        r = write ? do_write(ss, sp, first, n, (char *)ss->staging + io->staging_offset, &rep->retries)
                  : do_read(ss, sp, first, n, (char *)ss->staging + io->staging_offset, &rep->retries);
        dt = now_ns() - t0;
        if (r == 0) {
                rep->bytes = io->len;
                pthread_mutex_lock(&ss->store->lock);
                if (write) {
                        ss->st.write_bytes += io->len;
                        ss->st.write_ns += dt;
                        if (io->offset + io->len == sp->size_bytes)
                                ss->st.spills++;
                } else {
                        ss->st.read_bytes += io->len;
                        ss->st.read_ns += dt;
                        if (io->offset + io->len == sp->size_bytes)
                                ss->st.restores++;
                }
                pthread_mutex_unlock(&ss->store->lock);
        }
        return r;
}

/* Serves one request; returns the reply's status, or -EPROTO to end the session. */
static int session_serve(struct ssd_session *ss, const struct kvt_msg *m, struct kvt_ssd_reply *rep) {
        struct ssd_spill *sp;

        if (ss->store->dir_fd < 0)
                return m->hdr.type >= KVT_MSG_SSD_OPEN && m->hdr.type <= KVT_MSG_SSD_DROP ? -ENOSYS
                                                                                          : -EPROTO;
        switch (m->hdr.type) {
        case KVT_MSG_SSD_OPEN:
                return on_open(ss, &m->u.ssd_open, rep);
        case KVT_MSG_SSD_WRITE:
                return on_io(ss, true, &m->u.ssd_io, rep);
        case KVT_MSG_SSD_READ:
                return on_io(ss, false, &m->u.ssd_io, rep);
        case KVT_MSG_SSD_DROP:
                ssd_faults_drop();
                rep->handle = m->u.ssd_drop.handle;
                sp = ssd_book_spill_find(ss->book, m->u.ssd_drop.handle);
                if (!sp)
                        return -ENOENT;
                spill_forget(ss, sp);
                pthread_mutex_lock(&ss->store->lock);
                ss->st.drops++;
                pthread_mutex_unlock(&ss->store->lock);
                return 0;
        default:
                return -EPROTO;
        }
}

/* Waits for the next message or the stop signal.  Returns 0, or < 0 to end. */
static int session_recv(struct ssd_session *ss) {
        for (;;) {
                struct pollfd p[2] = {{.fd = ss->sock, .events = POLLIN},
                                      {.fd = ss->stop_fd, .events = POLLIN}};
                int r;

                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (p[1].revents)
                        return -ECANCELED;
                r = kvt_msg_recv(ss->sock, &ss->msg);
                if (r != -EAGAIN)
                        return r;
        }
}

/* A message goes out at once: the client waits for it and sends nothing
 * before, so the socket has room unless the peer misbehaves; then it is
 * dropped. */
static int session_send(struct ssd_session *ss, uint16_t type, uint32_t seq, const void *payload,
                        size_t len) {
        for (int i = 0; i < 100; i++) {
                int r = kvt_msg_send(ss->sock, type, seq, payload, len);
                struct pollfd p = {.fd = ss->sock, .events = POLLOUT};

                if (r != -EAGAIN)
                        return r;
                (void)poll(&p, 1, 10);
        }
        return -ETIMEDOUT;
}

/* The HELLO's answer: the session's token, whether it re-attached spills
 * kept over a restart, and its block size, which every I/O but a spill's
 * last must be a multiple of. */
static int session_welcome(struct ssd_session *ss) {
        struct kvt_ssd_welcome w = {.status = ss->book ? 0 : -ENOSYS,
                                    .reattached = ss->reattached,
                                    .block_bytes = ss->block_bytes};

        if (ss->book) {
                memcpy(w.token, ssd_book_owner(ss->book)->token, sizeof(w.token));
                w.spills = ss->reattached ? ssd_book_n_spills(ss->book) : 0;
        }
        return session_send(ss, KVT_MSG_SSD_WELCOME, 0, &w, sizeof(w));
}

static void *session_thread(void *arg) {
        struct ssd_session *ss = arg;
        struct kvt_ssd_reply rep;
        uint64_t one = 1;
        int r;

        r = session_welcome(ss);
        while (r >= 0) {
                uint64_t t0;

                r = session_recv(ss);
                if (r < 0)
                        break;
                t0 = now_ns();
                rep = (struct kvt_ssd_reply){0};
                rep.status = session_serve(ss, &ss->msg, &rep);
                if (rep.status == -EPROTO) {
                        log_warning("Disconnecting SSD client pid %d (uid %u): unexpected %s.", (int)ss->pid,
                                    (unsigned)ss->uid, kvt_msg_type_name(ss->msg.hdr.type));
                        r = -EPROTO;
                        break;
                }
                rep.elapsed_ns = now_ns() - t0;
                r = session_send(ss, KVT_MSG_SSD_REPLY, ss->msg.hdr.seq, &rep, sizeof(rep));
        }
        if (r != -ECONNRESET && r != -ECANCELED && r != -EPROTO)
                log_info("SSD client pid %d: connection ended: %s.", (int)ss->pid, strerror(-r));
        ss->client_left = r != -ECANCELED; /* read after the join */
        (void)write(ss->done_fd, &one, sizeof(one));
        return NULL;
}

/* ------------------------------------------------------------ sessions */

static int staging_map(struct ssd_session *ss, int fd, uint64_t bytes) {
        int seals = fcntl(fd, F_GET_SEALS);
        struct stat st;
        void *map;

        /* Without both seals the client could shrink the file under the
         * mapping (SIGBUS here) or grow it past what was said. */
        if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
                return -EINVAL;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != bytes)
                return -EINVAL;
        map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED)
                return -errno;
        ss->staging = map;
        ss->staging_bytes = bytes;
        return 0;
}

/* The session's book: the one kept for the token of h, where the peer is
 * its owner (re-attached: its handles stay valid), else a new one with a
 * new token.  Returns 0 or -errno. */
static int session_book(struct ssd_session *ss, const struct kvt_ssd_hello *h) {
        struct ssd_store *s = ss->store;
        struct ssd_owner o = {.uid = ss->uid, .pid = ss->pid};

        ss->block_bytes = s->cfg.block_bytes;
        if (s->dir_fd < 0)
                return 0; /* no tier: no book, requests answer -ENOSYS */
        pthread_mutex_lock(&s->lock);
        ss->book = ssd_keep_take(s->keep, ss->pid, ss->uid, h->token);
        pthread_mutex_unlock(&s->lock);
        ss->reattached = ss->book != NULL;
        if (ss->reattached)
                log_info("SSD client pid %d (uid %u) re-attached %zu spills (%llu bytes) "
                         "kept over a restart.",
                         (int)ss->pid, (unsigned)ss->uid, ssd_book_n_spills(ss->book),
                         (unsigned long long)ssd_book_live_bytes(ss->book));
        else {
                int r;

                (void)identity_pid_start_time(s->proc_root, ss->pid, &o.start_time);
                if (getrandom(o.token, sizeof(o.token), 0) != (ssize_t)sizeof(o.token))
                        return -errno;
                r = ssd_book_new(s->dir_fd, &o, (uint32_t)s->cfg.block_bytes, &ss->book);
                if (r < 0)
                        return r;
        }
        ss->block_bytes = ssd_book_block_bytes(ss->book);
        ssd_book_raise_next_handle(ss->book, h->next_handle);
        return 0;
}

/* Adds the session to the store's; a re-attached one with its spills'
 * bytes (counted against its uid already, since the sweep). */
static void session_register(struct ssd_session *ss, bool uring) {
        struct ssd_store *s = ss->store;

        pthread_mutex_lock(&s->lock);
        s->uring = uring;
        ss->id = ++s->next_id;
        ss->next = s->sessions;
        s->sessions = ss;
        if (ss->reattached) {
                ss->st.live_spills = ssd_book_n_spills(ss->book);
                ss->st.live_bytes = ssd_book_live_bytes(ss->book);
                ss->st.stored_bytes = ssd_book_stored_bytes(ss->book);
                ss->has_files = ssd_book_has_files(ss->book);
        }
        pthread_mutex_unlock(&s->lock);
}

int ssd_session_new(struct ssd_store *s, pid_t pid, uint32_t uid, int sock, int staging_fd,
                    const struct kvt_ssd_hello *h, struct ssd_session **ret) {
        struct ssd_session *ss = calloc(1, sizeof(*ss));
        bool uring = false;
        int r;

        if (!ss) {
                close(staging_fd);
                return -ENOMEM;
        }
        *ss = (struct ssd_session){
                .store = s, .pid = pid, .uid = uid, .sock = -1, .stop_fd = -1, .done_fd = -1};
        r = staging_map(ss, staging_fd, h->staging_bytes);
        close(staging_fd);
        if (r < 0)
                goto fail;
        ss->sock = fcntl(sock, F_DUPFD_CLOEXEC, 3);
        ss->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        ss->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (ss->sock < 0 || ss->stop_fd < 0 || ss->done_fd < 0) {
                r = -errno;
                goto fail;
        }
        r = session_book(ss, h);
        if (r < 0)
                goto fail;
        ss->ops = calloc(MAX(s->cfg.queue_depth, (unsigned)(h->staging_bytes / ss->block_bytes + 1)),
                         sizeof(*ss->ops));
        r = ss->ops ? ssd_io_new(s->cfg.queue_depth, &ss->io, &uring) : -ENOMEM;
        if (r < 0)
                goto fail;
        if (!uring && !atomic_flag_test_and_set(&s->warned_uring))
                log_warning("Failed to set up io_uring for the SSD tier; using pread/pwrite, ignoring.");
        session_register(ss, uring);
        r = pthread_create(&ss->thread, NULL, session_thread, ss);
        if (r > 0) {
                r = -r;
                goto fail;
        }
        ss->thread_started = true;
        *ret = ss;
        return 0;
fail:
        ssd_session_free(ss);
        return r;
}

int ssd_session_done_fd(const struct ssd_session *ss) {
        return ss->done_fd;
}

/* Where the session's book goes as it ends (store lock held): kept for
 * the next kvtierd when the daemon stops under it, back to the kept books
 * when it never started, else deleted with its bytes given back.  Returns
 * whether its files stay. */
static bool session_book_end_locked(struct ssd_session *ss) {
        struct ssd_store *s = ss->store;
        struct ssd_uid *u;

        if (!ss->book)
                return false;
        if (s->stopping && ss->thread_started && !ss->client_left)
                return true;
        if (!ss->thread_started && ss->reattached && ssd_keep_put(s->keep, ss->book, now_ns()) == 0) {
                ss->book = NULL; /* still counted against its uid */
                return true;
        }
        u = uid_get_locked(s, ss->uid);
        if (u)
                u->bytes -= ssd_book_live_bytes(ss->book);
        return false;
}

void ssd_session_free(struct ssd_session *ss) {
        struct ssd_store *s;
        uint64_t one = 1;
        bool keep;

        if (!ss)
                return;
        s = ss->store;
        if (ss->thread_started) {
                (void)write(ss->stop_fd, &one, sizeof(one));
                pthread_join(ss->thread, NULL);
        }
        pthread_mutex_lock(&s->lock);
        for (struct ssd_session **p = &s->sessions; *p; p = &(*p)->next)
                if (*p == ss) {
                        *p = ss->next;
                        break;
                }
        stats_add(&s->gone, &ss->st);
        keep = session_book_end_locked(ss);
        pthread_mutex_unlock(&s->lock);
        ssd_book_free(ss->book, !keep);
        for (size_t i = 0; i < ss->n_bounce; i++)
                free(ss->bounce[i]);
        free(ss->bounce);
        ssd_io_free(ss->io);
        free(ss->ops);
        if (ss->staging)
                munmap(ss->staging, ss->staging_bytes);
        if (ss->sock >= 0)
                close(ss->sock);
        if (ss->stop_fd >= 0)
                close(ss->stop_fd);
        if (ss->done_fd >= 0)
                close(ss->done_fd);
        free(ss);
}
