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
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "ssd-block.h"
#include "ssd-io.h"
#include "ssd.h"
#include "util.h"

/* The file grows by fallocate() in steps of this: 256 MiB, one session's KV
 * at a time (the H200 bench's unit), few calls per GiB. */
#define FILE_RESERVE_STEP (256ull << 20)

/* Spills one client may hold at once, whatever their size: the daemon's
 * memory for them (48 bytes and one block's 32 each) is bounded by this and
 * the byte quotas together. */
#define SSD_MAX_SPILLS_PER_CLIENT 65536

/* One spill: its blocks, in order. */
struct spill {
        uint64_t handle;
        uint64_t size_bytes;
        uint32_t n_blocks;
        struct ssd_block *blocks;
};

/* A free run of the session's file. */
struct extent {
        uint64_t offset, len;
};

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
        pthread_mutex_t lock;
        struct ssd_session *sessions;
        struct ssd_uid *uids;
        size_t n_uids;
        struct ssd_stats gone; /* of sessions that ended */
        unsigned next_id;
        int direct; /* -1 unknown yet, 0 buffered (the filesystem refused O_DIRECT), 1 O_DIRECT */
        int uring;  /* -1 unknown yet, 0 pread/pwrite, 1 io_uring */
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
        int file_fd;            /* -1 until the first spill */
        uint64_t file_end;      /* bytes of the file in use or free below */
        uint64_t file_reserved; /* bytes fallocate()d */
        struct extent *free_ext;
        size_t n_free, cap_free;
        struct spill *spills;
        size_t n_spills, cap_spills;
        uint64_t next_handle;
        struct ssd_io *io;
        struct ssd_io_op *ops;
        void **bounce; /* queue_depth buffers of block_bytes' compress bound, for zstd */
        size_t n_bounce, bounce_bytes;
        struct ssd_stats st;
        bool warned_retry;
        bool ending; /* the file is closed next: no holes punched */
        pthread_t thread;
        bool thread_started;
        struct kvt_msg msg;
};

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

int ssd_store_new(const struct conf *conf, struct ssd_store **ret) {
        struct ssd_store *s = calloc(1, sizeof(*s));
        struct stat st;

        if (!s)
                return -ENOMEM;
        conf_ssd(conf, &s->cfg);
        pthread_mutex_init(&s->lock, NULL);
        s->direct = s->uring = -1;
        s->dir_fd = -1;
        atomic_flag_clear(&s->warned_buffered);
        atomic_flag_clear(&s->warned_uring);
        (void)ssd_faults_from_env();
        if (s->cfg.per_uid_bytes == 0)
                log_info("SSD tier off ([ssd] max_per_uid = 0).");
        else {
                int fd = dir_open(s->cfg.dir);

                if (fd < 0)
                        log_warning("Failed to open [ssd] dir %s: %s; the SSD tier is off, ignoring.",
                                    s->cfg.dir, strerror(-fd));
                else if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 0022)) {
                        log_warning(
                                "[ssd] dir %s is not kvtierd's own or is writable by others; the SSD tier "
                                "is off, ignoring.",
                                s->cfg.dir);
                        close(fd);
                } else
                        s->dir_fd = fd;
        }
        *ret = s;
        return 0;
}

struct ssd_store *ssd_store_free(struct ssd_store *s) {
        if (!s)
                return NULL;
        if (s->dir_fd >= 0)
                close(s->dir_fd);
        free(s->uids);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
}

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
                json_object_new_string(s->cfg.compress == CONF_COMPRESS_ZSTD ? "zstd" : "none"));
        json_object_object_add(o, "block_bytes", json_object_new_int64((int64_t)s->cfg.block_bytes));
        json_object_object_add(o, "max_per_uid", json_object_new_int64((int64_t)s->cfg.per_uid_bytes));
        json_object_object_add(o, "max_per_client", json_object_new_int64((int64_t)s->cfg.per_client_bytes));
        for (struct ssd_session *ss = s->sessions; ss; ss = ss->next) {
                json_object *c = json_object_new_object();

                json_object_object_add(c, "pid", json_object_new_int64(ss->pid));
                json_object_object_add(c, "uid", json_object_new_int64(ss->uid));
                json_object_object_add(c, "files", json_object_new_int64(ss->file_fd >= 0));
                json_object_object_add(c, "live_spills", json_object_new_int64((int64_t)ss->st.live_spills));
                json_object_object_add(c, "bytes", json_object_new_int64((int64_t)ss->st.live_bytes));
                json_object_object_add(c, "stored_bytes",
                                       json_object_new_int64((int64_t)ss->st.stored_bytes));
                json_object_array_add(clients, stats_json(&ss->st, c));
                stats_add(&all, &ss->st);
        }
        pthread_mutex_unlock(&s->lock);
        json_object_object_add(o, "clients", clients);
        json_object_object_add(o, "totals", stats_json(&all, json_object_new_object()));
        return o;
}

/* ------------------------------------------------------------ a session's file */

/* Opens the session's file, unlinked from the start: O_TMPFILE where the
 * filesystem has it, else a name removed at once.  O_DIRECT where the
 * filesystem takes it (tmpfs, in CI, does not). */
static int file_open(struct ssd_session *ss) {
        struct ssd_store *s = ss->store;
        char name[64];
        int fd = -1, direct;

        for (direct = 1; direct >= 0 && fd < 0; direct--) {
                int flags = O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0);

                if (direct && ssd_faults_refuse_direct()) {
                        errno = EINVAL;
                        continue;
                }
                fd = openat(s->dir_fd, ".", O_TMPFILE | flags, 0600);
                if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == ENOENT)) {
                        snprintf(name, sizeof(name), "client-%u-%d", ss->id, (int)ss->pid);
                        fd = openat(s->dir_fd, name, O_CREAT | O_EXCL | flags, 0600);
                        if (fd >= 0)
                                (void)unlinkat(s->dir_fd, name, 0);
                }
                if (fd < 0 && errno != EINVAL)
                        return -errno;
                if (fd >= 0) {
                        pthread_mutex_lock(&s->lock);
                        s->direct = direct;
                        pthread_mutex_unlock(&s->lock);
                        if (!direct && !atomic_flag_test_and_set(&s->warned_buffered))
                                log_notice("[ssd] dir %s refuses O_DIRECT: the SSD tier's I/O is buffered.",
                                           s->cfg.dir);
                }
        }
        if (fd < 0)
                return -errno;
        ss->file_fd = fd;
        return 0;
}

/* Takes len bytes (KVT_SSD_ALIGN aligned) of the file: first fit among the
 * free runs, else at its end. */
static int file_alloc(struct ssd_session *ss, uint64_t len, uint64_t *ret) {
        for (size_t i = 0; i < ss->n_free; i++)
                if (ss->free_ext[i].len >= len) {
                        *ret = ss->free_ext[i].offset;
                        ss->free_ext[i].offset += len;
                        ss->free_ext[i].len -= len;
                        if (ss->free_ext[i].len == 0)
                                ss->free_ext[i] = ss->free_ext[--ss->n_free];
                        return 0;
                }
        if (ss->file_end + len > (1ull << 60))
                return -EFBIG;
        if (ss->file_end + len > ss->file_reserved) {
                /* Ahead of the writes, in steps: O_DIRECT writes within the
                 * file's size are not serialized as extending ones are, and a
                 * full disk shows here, before anything is written. */
                uint64_t want = MAX(ss->file_end + len, ss->file_reserved + FILE_RESERVE_STEP);

                if (fallocate(ss->file_fd, 0, (off_t)ss->file_reserved, (off_t)(want - ss->file_reserved)) ==
                    0)
                        ss->file_reserved = want;
                else if (errno == ENOSPC)
                        return -ENOSPC;
                /* else (EOPNOTSUPP ...): the writes extend the file */
        }
        *ret = ss->file_end;
        ss->file_end += len;
        return 0;
}

/* Gives a run back, its disk space too (a hole).  Runs are not merged: a
 * run at the end shrinks the file's end instead. */
static void file_release(struct ssd_session *ss, uint64_t offset, uint64_t len) {
        if (len == 0)
                return;
        (void)fallocate(ss->file_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)len);
        if (offset + len == ss->file_end) {
                ss->file_end = offset;
                return;
        }
        if (ss->n_free == ss->cap_free) {
                size_t cap = ss->cap_free ? ss->cap_free * 2 : 64;
                struct extent *a = realloc(ss->free_ext, cap * sizeof(*a));

                if (!a)
                        return; /* the run is lost to this session's file, which dies with it */
                ss->free_ext = a;
                ss->cap_free = cap;
        }
        ss->free_ext[ss->n_free++] = (struct extent){offset, len};
}

static void block_release(struct ssd_session *ss, struct ssd_block *b) {
        if (b->stored_bytes && !ss->ending)
                file_release(ss, b->file_offset, ssd_block_disk_bytes(b->stored_bytes));
        if (b->stored_bytes) {
                pthread_mutex_lock(&ss->store->lock);
                ss->st.stored_bytes -= b->stored_bytes;
                pthread_mutex_unlock(&ss->store->lock);
        }
        b->stored_bytes = 0;
}

/* ------------------------------------------------------------ requests */

static struct spill *spill_find(struct ssd_session *ss, uint64_t handle) {
        for (size_t i = 0; i < ss->n_spills; i++)
                if (ss->spills[i].handle == handle)
                        return &ss->spills[i];
        return NULL;
}

static int on_open(struct ssd_session *ss, const struct kvt_ssd_open *o, struct kvt_ssd_reply *rep) {
        struct ssd_store *s = ss->store;
        uint64_t client_max = s->cfg.per_client_bytes ? s->cfg.per_client_bytes : s->cfg.per_uid_bytes;
        struct ssd_uid *u;
        struct spill sp;
        int r;

        if (ss->file_fd < 0 && (r = file_open(ss)) < 0) {
                log_error("Failed to create an SSD file in %s for client pid %d: %s", s->cfg.dir,
                          (int)ss->pid, strerror(-r));
                return r;
        }
        if (ss->n_spills >= SSD_MAX_SPILLS_PER_CLIENT) {
                pthread_mutex_lock(&s->lock);
                ss->st.refused++;
                pthread_mutex_unlock(&s->lock);
                log_info("Client pid %d (uid %u): %d spills held already, refused.", (int)ss->pid,
                         (unsigned)ss->uid, SSD_MAX_SPILLS_PER_CLIENT);
                return -EDQUOT;
        }
        if (ss->n_spills == ss->cap_spills) {
                size_t cap = ss->cap_spills ? ss->cap_spills * 2 : 16;
                struct spill *a = realloc(ss->spills, cap * sizeof(*a));

                if (!a)
                        return -ENOMEM;
                ss->spills = a;
                ss->cap_spills = cap;
        }
        sp = (struct spill){
                .handle = ++ss->next_handle,
                .size_bytes = o->size_bytes,
                .n_blocks = (uint32_t)((o->size_bytes + s->cfg.block_bytes - 1) / s->cfg.block_bytes)};
        pthread_mutex_lock(&s->lock);
        u = uid_get_locked(s, ss->uid);
        if (!u)
                r = -ENOMEM;
        else if (ss->st.live_bytes + o->size_bytes > client_max ||
                 u->bytes + o->size_bytes > s->cfg.per_uid_bytes) {
                ss->st.refused++;
                r = -EDQUOT;
        } else {
                u->bytes += o->size_bytes;
                ss->st.live_bytes += o->size_bytes;
                ss->st.live_spills++;
                r = 0;
        }
        pthread_mutex_unlock(&s->lock);
        if (r == -EDQUOT)
                log_info("Client pid %d (uid %u): a spill of %llu bytes is over [ssd] %s, refused.",
                         (int)ss->pid, (unsigned)ss->uid, (unsigned long long)o->size_bytes,
                         ss->st.live_bytes + o->size_bytes > client_max ? "max_per_client" : "max_per_uid");
        if (r < 0)
                return r;
        sp.blocks = calloc(sp.n_blocks, sizeof(*sp.blocks));
        if (!sp.blocks) {
                pthread_mutex_lock(&s->lock);
                u->bytes -= o->size_bytes;
                ss->st.live_bytes -= o->size_bytes;
                ss->st.live_spills--;
                pthread_mutex_unlock(&s->lock);
                return -ENOMEM;
        }
        ss->spills[ss->n_spills++] = sp;
        rep->handle = sp.handle;
        return 0;
}

static void spill_forget(struct ssd_session *ss, struct spill *sp) {
        struct ssd_store *s = ss->store;
        struct ssd_uid *u;

        for (uint32_t i = 0; i < sp->n_blocks; i++)
                block_release(ss, &sp->blocks[i]);
        free(sp->blocks);
        pthread_mutex_lock(&s->lock);
        u = uid_get_locked(s, ss->uid);
        if (u)
                u->bytes -= sp->size_bytes;
        ss->st.live_bytes -= sp->size_bytes;
        ss->st.live_spills--;
        pthread_mutex_unlock(&s->lock);
        *sp = ss->spills[--ss->n_spills];
}

/* Checks an I/O request against its spill and the staging buffer: the
 * blocks [first, first + n) and where they are in staging. */
static int io_range(struct ssd_session *ss, const struct kvt_ssd_io *io, struct spill **ret_sp,
                    uint32_t *ret_first, uint32_t *ret_n) {
        uint64_t bs = ss->store->cfg.block_bytes, end = io->offset + io->len;
        struct spill *sp = spill_find(ss, io->handle);

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
        ss->bounce_bytes =
                ssd_block_disk_bytes((uint32_t)ssd_block_compress_bound(ss->store->cfg.block_bytes));
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
        struct spill *sp;
        uint32_t first; /* block index of op 0 */
        char *staging;  /* where op 0's raw bytes are; op i uses bounce buffer i (zstd) */
};

/* Before a block's write: its checksum, compression, place in the file. */
static int write_prepare(void *ctx, size_t i, struct ssd_io_op *op) {
        struct io_job *job = ctx;
        struct ssd_session *ss = job->ss;
        const struct conf_ssd *cfg = &ss->store->cfg;
        struct ssd_block *b = &job->sp->blocks[job->first + i];
        uint64_t off = (uint64_t)(job->first + i) * cfg->block_bytes;
        char *raw = job->staging + (uint64_t)i * cfg->block_bytes;
        void *buf = raw;
        long c;
        int r;

        if (b->stored_bytes)
                return -EEXIST; /* written once; a spill is not rewritten */
        b->raw_bytes = (uint32_t)MIN(cfg->block_bytes, job->sp->size_bytes - off);
        b->hash = ssd_block_hash(raw, b->raw_bytes);
        b->flags = 0;
        if (cfg->compress == CONF_COMPRESS_ZSTD &&
            (c = ssd_block_compress(raw, b->raw_bytes, ss->bounce[i], ss->bounce_bytes,
                                    (int)cfg->compress_level)) > 0) {
                buf = ss->bounce[i];
                b->flags = SSD_BLOCK_ZSTD;
                memset((char *)buf + c, 0, ssd_block_disk_bytes((uint32_t)c) - (uint64_t)c);
        } else
                c = b->raw_bytes;
        r = file_alloc(ss, ssd_block_disk_bytes((uint32_t)c), &b->file_offset);
        if (r < 0)
                return r;
        b->stored_bytes = (uint32_t)c;
        *op = (struct ssd_io_op){.fd = ss->file_fd,
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
        char *to = job->staging + (uint64_t)i * ss->store->cfg.block_bytes;

        if (!b->stored_bytes)
                return -ENODATA; /* never written: there is nothing to restore */
        *op = (struct ssd_io_op){.fd = ss->file_fd,
                                 .buf = (b->flags & SSD_BLOCK_ZSTD) ? ss->bounce[i] : to,
                                 .len = ssd_block_disk_bytes(b->stored_bytes),
                                 .offset = b->file_offset};
        return 0;
}

/* After a block's read, while others are in flight: decompress, verify. */
static int read_complete(void *ctx, size_t i, struct ssd_io_op *op) {
        struct io_job *job = ctx;
        struct ssd_session *ss = job->ss;
        const struct ssd_block *b = &job->sp->blocks[job->first + i];
        char *to = job->staging + (uint64_t)i * ss->store->cfg.block_bytes;
        int r = ssd_block_decode(b, op->buf, op->len, to, b->raw_bytes);

        if (r < 0) {
                pthread_mutex_lock(&ss->store->lock);
                if (r == -EBADMSG)
                        ss->st.checksum_failures++;
                pthread_mutex_unlock(&ss->store->lock);
                log_warning("Client pid %d: SSD block %u of spill %llu failed its check: %s; the restore fails.",
                            (int)ss->pid, job->first + (uint32_t)i, (unsigned long long)job->sp->handle,
                            r == -EBADMSG ? "checksum or frame mismatch" : strerror(-r));
        }
        return r;
}

/* Runs n blocks from first on, their raw bytes at staging, in batches of
 * the bounce buffers where any is compressed (zstd), else at once. */
static int run_blocks(struct ssd_session *ss, struct spill *sp, uint32_t first, uint32_t n, char *staging, bool write,
                      unsigned *ret_retries) {
        bool zstd = ss->store->cfg.compress == CONF_COMPRESS_ZSTD;
        struct io_job job = {.ss = ss, .sp = sp};
        struct ssd_io_hooks hooks = {.prepare = write ? write_prepare : read_prepare,
                                     .complete = write ? NULL : read_complete,
                                     .ctx = &job};
        uint32_t batch = n;
        int r = 0;

        for (uint32_t j = 0; !write && j < n; j++)
                zstd |= (sp->blocks[first + j].flags & SSD_BLOCK_ZSTD) != 0;
        if (zstd) {
                if ((r = bounce_ready(ss)) < 0)
                        return r;
                batch = (uint32_t)ss->n_bounce;
        }
        for (uint32_t done = 0; done < n && r == 0; done += batch) {
                uint32_t k = MIN(batch, n - done);

                job.first = first + done;
                job.staging = staging + (uint64_t)done * ss->store->cfg.block_bytes;
                r = ssd_io_run(ss->io, ss->ops + done, k, &hooks);
                note_io(ss, ss->ops + done, k, r);
                for (uint32_t j = 0; j < k; j++)
                        *ret_retries += ss->ops[done + j].retries;
        }
        return r;
}

/* Writes n blocks from first on from src (staging). */
static int do_write(struct ssd_session *ss, struct spill *sp, uint32_t first, uint32_t n, char *src,
                    unsigned *ret_retries) {
        int r = run_blocks(ss, sp, first, n, src, true, ret_retries);
        uint64_t stored = 0;

        for (uint32_t j = 0; j < n; j++)
                stored += sp->blocks[first + j].stored_bytes;
        pthread_mutex_lock(&ss->store->lock);
        ss->st.stored_bytes += stored;
        pthread_mutex_unlock(&ss->store->lock);
        if (r < 0) /* none of this request's blocks counts as written */
                for (uint32_t j = 0; j < n; j++)
                        block_release(ss, &sp->blocks[first + j]);
        return r;
}

/* Reads n blocks from first on into dst (staging), each checked. */
static int do_read(struct ssd_session *ss, struct spill *sp, uint32_t first, uint32_t n, char *dst,
                   unsigned *ret_retries) {
        return run_blocks(ss, sp, first, n, dst, false, ret_retries);
}

static int on_io(struct ssd_session *ss, bool write, const struct kvt_ssd_io *io,
                 struct kvt_ssd_reply *rep) {
        struct spill *sp;
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
        struct spill *sp;

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
                rep->handle = m->u.ssd_drop.handle;
                sp = spill_find(ss, m->u.ssd_drop.handle);
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

/* The reply goes out at once: the client waits for it and sends nothing
 * before, so the socket has room unless the peer misbehaves; then it is
 * dropped. */
static int session_reply(struct ssd_session *ss, uint32_t seq, const struct kvt_ssd_reply *rep) {
        for (int i = 0; i < 100; i++) {
                int r = kvt_msg_send(ss->sock, KVT_MSG_SSD_REPLY, seq, rep, sizeof(*rep));
                struct pollfd p = {.fd = ss->sock, .events = POLLOUT};

                if (r != -EAGAIN)
                        return r;
                (void)poll(&p, 1, 10);
        }
        return -ETIMEDOUT;
}

static void *session_thread(void *arg) {
        struct ssd_session *ss = arg;
        struct kvt_ssd_reply rep = {.bytes = ss->store->cfg.block_bytes,
                                    .status = ss->store->dir_fd < 0 ? -ENOSYS : 0};
        uint64_t one = 1;
        int r;

        /* The HELLO's answer: bytes = the block size, which every I/O but a
         * spill's last must be a multiple of. */
        r = session_reply(ss, 0, &rep);
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
                        break;
                }
                rep.elapsed_ns = now_ns() - t0;
                r = session_reply(ss, ss->msg.hdr.seq, &rep);
        }
        if (r != -ECONNRESET && r != -ECANCELED && r < 0 && r != -EPROTO)
                log_info("SSD client pid %d: connection ended: %s.", (int)ss->pid, strerror(-r));
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
                .store = s, .pid = pid, .uid = uid, .file_fd = -1, .sock = -1, .stop_fd = -1, .done_fd = -1};
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
        ss->ops = calloc(MAX(s->cfg.queue_depth, (unsigned)(h->staging_bytes / s->cfg.block_bytes + 1)),
                         sizeof(*ss->ops));
        if (!ss->ops) {
                r = -ENOMEM;
                goto fail;
        }
        r = ssd_io_new(s->cfg.queue_depth, &ss->io, &uring);
        if (r < 0)
                goto fail;
        if (!uring && !atomic_flag_test_and_set(&s->warned_uring))
                log_warning("Failed to set up io_uring for the SSD tier; using pread/pwrite, ignoring.");
        pthread_mutex_lock(&s->lock);
        s->uring = uring;
        ss->id = ++s->next_id;
        ss->next = s->sessions;
        s->sessions = ss;
        pthread_mutex_unlock(&s->lock);
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

void ssd_session_free(struct ssd_session *ss) {
        struct ssd_store *s;
        uint64_t one = 1;

        if (!ss)
                return;
        s = ss->store;
        if (ss->thread_started) {
                (void)write(ss->stop_fd, &one, sizeof(one));
                pthread_join(ss->thread, NULL);
        }
        ss->ending = true;
        while (ss->n_spills)
                spill_forget(ss, &ss->spills[ss->n_spills - 1]);
        pthread_mutex_lock(&s->lock);
        for (struct ssd_session **p = &s->sessions; *p; p = &(*p)->next)
                if (*p == ss) {
                        *p = ss->next;
                        break;
                }
        stats_add(&s->gone, &ss->st);
        pthread_mutex_unlock(&s->lock);
        if (ss->file_fd >= 0)
                close(ss->file_fd); /* unlinked: its blocks are freed with it */
        for (size_t i = 0; i < ss->n_bounce; i++)
                free(ss->bounce[i]);
        free(ss->bounce);
        ssd_io_free(ss->io);
        free(ss->ops);
        free(ss->spills);
        free(ss->free_ext);
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
