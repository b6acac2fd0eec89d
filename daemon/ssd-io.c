/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "ssd-io.h"
#include "util.h"

enum fault_kind {
        FAULT_READ_SHORT,
        FAULT_READ_EIO,
        FAULT_READ_EAGAIN,
        FAULT_READ_FLIP,
        FAULT_WRITE_EIO,
        FAULT_WRITE_EINTR,
        FAULT_WRITE_SHORT,
        FAULT_WRITE_ENOSPC,
        FAULT_DIRECT_REFUSED, /* not an I/O: opening with O_DIRECT fails with EINVAL */
        FAULT_DROP_SLOW,      /* not an I/O: the N-th drop served waits DROP_SLOW_MS */
        _FAULT_MAX,
};

static const char *const fault_names[_FAULT_MAX] = {
        "read-short", "read-eio",    "read-eagain", "read-flip",      "write-eio",
        "write-eintr", "write-short", "write-enospc", "direct-refused", "drop-slow",
};

#define DROP_SLOW_MS 5000

#define FAULTS_MAX 16
static struct fault {
        enum fault_kind kind;
        uint64_t nth;   /* op number, from 1 */
        uint64_t times; /* attempts; UINT64_MAX: all */
} faults[FAULTS_MAX];
static size_t n_faults;
static _Atomic uint64_t n_reads, n_writes, n_drops; /* ops started, for the faults' N */

int ssd_faults_from_env(void) {
        const char *spec = getenv("KVTIER_SSD_FAULTS");
        char buf[512], *save = NULL;

        n_faults = 0;
        if (!spec || !*spec)
                return 0;
        if (strlen(spec) >= sizeof(buf))
                goto bad;
        strcpy(buf, spec);
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                char *at = strchr(t, '@'), *end;
                struct fault f = {.times = 1};
                size_t k;

                if (!at || n_faults == FAULTS_MAX)
                        goto bad;
                *at = 0;
                for (k = 0; k < _FAULT_MAX && strcmp(fault_names[k], t) != 0; k++)
                        ;
                if (k == _FAULT_MAX)
                        goto bad;
                f.kind = (enum fault_kind)k;
                f.nth = strtoull(at + 1, &end, 10);
                if (f.nth == 0)
                        goto bad;
                if (*end == 'x') {
                        if (strcmp(end + 1, "*") == 0)
                                f.times = UINT64_MAX;
                        else if ((f.times = strtoull(end + 1, &end, 10)) == 0 || *end)
                                goto bad;
                } else if (*end)
                        goto bad;
                faults[n_faults++] = f;
        }
        log_warning("KVTIER_SSD_FAULTS=%s: injecting %zu I/O faults (tests only).", spec, n_faults);
        return 0;
bad:
        n_faults = 0;
        log_error("KVTIER_SSD_FAULTS=%s: not a list of KIND@N[xM], ignoring.", spec);
        return -EINVAL;
}

/* The fault to inject into attempt number `attempt` (0-based) of op `nth`. */
static const struct fault *fault_for(bool write, uint64_t nth, unsigned attempt) {
        for (size_t i = 0; i < n_faults; i++) {
                const struct fault *f = &faults[i];
                bool w = f->kind >= FAULT_WRITE_EIO;

                if (f->kind == FAULT_DIRECT_REFUSED || f->kind == FAULT_DROP_SLOW)
                        continue;
                if (w == write && f->nth == nth && attempt < f->times)
                        return f;
        }
        return NULL;
}

/* Changes a completion as the fault says: *res (bytes or -errno), the data. */
static void fault_apply(const struct fault *f, struct ssd_io_op *op, int *res) {
        switch (f->kind) {
        case FAULT_READ_SHORT:
        case FAULT_WRITE_SHORT:
                if (*res > 1)
                        *res /= 2;
                break;
        case FAULT_READ_EIO:
        case FAULT_WRITE_EIO:
                *res = -EIO;
                break;
        case FAULT_READ_EAGAIN:
                *res = -EAGAIN;
                break;
        case FAULT_WRITE_EINTR:
                *res = -EINTR;
                break;
        case FAULT_WRITE_ENOSPC:
                *res = -ENOSPC;
                break;
        case FAULT_DIRECT_REFUSED:
        case FAULT_DROP_SLOW:
                break; /* not faults of a completion */
        case FAULT_READ_FLIP:
                if (*res > 0)
                        ((unsigned char *)op->buf)[op->done + (uint64_t)*res / 2] ^= 0x40;
                break;
        case _FAULT_MAX:
                break;
        }
}

bool ssd_faults_refuse_direct(void) {
        for (size_t i = 0; i < n_faults; i++)
                if (faults[i].kind == FAULT_DIRECT_REFUSED)
                        return true;
        return false;
}

struct ssd_io {
        struct io_uring ring;
        bool uring;
        unsigned depth;
        uint64_t *nth; /* per op of the running batch: its number for the faults */
        size_t cap_nth;
};

int ssd_io_new(unsigned queue_depth, struct ssd_io **ret, bool *ret_uring) {
        struct ssd_io *io;
        int r;

        if (queue_depth < 1 || queue_depth > 4096)
                return -EINVAL;
        io = calloc(1, sizeof(*io));
        if (!io)
                return -ENOMEM;
        io->depth = queue_depth;
        r = io_uring_queue_init(queue_depth, &io->ring, 0);
        io->uring = r == 0;
        *ret_uring = io->uring;
        *ret = io;
        return 0;
}

struct ssd_io *ssd_io_free(struct ssd_io *io) {
        if (!io)
                return NULL;
        if (io->uring)
                io_uring_queue_exit(&io->ring);
        free(io->nth);
        free(io);
        return NULL;
}

static void sleep_ms(unsigned ms) {
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

void ssd_faults_drop(void) {
        uint64_t nth = atomic_fetch_add(&n_drops, 1) + 1;

        for (size_t i = 0; i < n_faults; i++)
                if (faults[i].kind == FAULT_DROP_SLOW && faults[i].nth == nth)
                        sleep_ms(DROP_SLOW_MS);
}

/* Decides what a completion means for op: 1 done, 0 submit again (the rest,
 * or a retry after backoff), or < 0 failed. */
static int op_complete(struct ssd_io_op *op, uint64_t nth, int res) {
        const struct fault *f = fault_for(op->write, nth, op->attempts);

        if (f)
                fault_apply(f, op, &res);
        op->attempts++;
        if (res > 0 && (uint64_t)res == op->len - op->done) {
                op->done = op->len;
                return 1;
        }
        if (res > 0 && op->write) { /* a short write: the rest again */
                op->done += (uint64_t)res;
                return 0;
        }
        if (res >= 0)
                return -ENODATA; /* a short read (or none): the store wrote all of it */
        if ((res == -EAGAIN || res == -EINTR || res == -EIO) && op->retries < SSD_IO_MAX_RETRIES) {
                sleep_ms(SSD_IO_BACKOFF_MS << op->retries);
                op->retries++;
                return 0;
        }
        return res;
}

static int hook_prepare(const struct ssd_io_hooks *h, size_t i, struct ssd_io_op *op) {
        return h && h->prepare ? h->prepare(h->ctx, i, op) : 0;
}

static int hook_complete(const struct ssd_io_hooks *h, size_t i, struct ssd_io_op *op) {
        return h && h->complete ? h->complete(h->ctx, i, op) : 0;
}

/* Without io_uring: one at a time. */
static int run_sync(struct ssd_io *io, struct ssd_io_op *ops, size_t n, const struct ssd_io_hooks *hooks) {
        int first = 0;

        for (size_t i = 0; i < n; i++) {
                struct ssd_io_op *op = &ops[i];
                int r;

                if (first) {
                        op->result = -ECANCELED;
                        continue;
                }
                r = hook_prepare(hooks, i, op);
                while (r == 0) {
                        char *p = (char *)op->buf + op->done;
                        size_t len = op->len - op->done;
                        off_t off = (off_t)(op->offset + op->done);
                        ssize_t k = op->write ? pwrite(op->fd, p, len, off) : pread(op->fd, p, len, off);

                        r = op_complete(op, io->nth[i],
                                        k < 0 ? -errno : (int)MIN((uint64_t)k, (uint64_t)INT32_MAX));
                }
                if (r > 0)
                        r = hook_complete(hooks, i, op);
                op->result = r < 0 ? r : 0;
                if (r < 0)
                        first = r;
        }
        return first;
}

static int submit_one(struct ssd_io *io, struct ssd_io_op *op, size_t i) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
        char *p = (char *)op->buf + op->done;
        unsigned len = (unsigned)MIN(op->len - op->done, (uint64_t)1 << 30);

        if (!sqe)
                return -EBUSY;
        if (op->write)
                io_uring_prep_write(sqe, op->fd, p, len, op->offset + op->done);
        else
                io_uring_prep_read(sqe, op->fd, p, len, op->offset + op->done);
        io_uring_sqe_set_data64(sqe, i);
        return 0;
}

/* Prepares and submits ops from *next on while the queue has room and
 * nothing failed (first == 0); each goes to the kernel as soon as it is
 * prepared, so that what is in flight runs while the next is hashed or
 * compressed.  With yield, stops early once something has finished, for
 * it to be seen to before more are prepared.  Returns first, or the
 * failure of a prepare. */
static int fill(struct ssd_io *io, struct ssd_io_op *ops, size_t n, size_t *next, size_t *inflight,
                const struct ssd_io_hooks *hooks, int first, bool yield) {
        struct io_uring_cqe *cqe;

        while (*next < n && !first && *inflight < io->depth) {
                struct ssd_io_op *op = &ops[*next];
                int r = hook_prepare(hooks, *next, op);

                if (r == 0) {
                        io->nth[*next] = atomic_fetch_add(op->write ? &n_writes : &n_reads, 1) + 1;
                        r = submit_one(io, op, *next);
                }
                if (r < 0) {
                        op->result = r;
                        return r;
                }
                (*next)++;
                (*inflight)++;
                (void)io_uring_submit(&io->ring);
                if (yield && io_uring_peek_cqe(&io->ring, &cqe) == 0)
                        break;
        }
        return first;
}

int ssd_io_run(struct ssd_io *io, struct ssd_io_op *ops, size_t n, const struct ssd_io_hooks *hooks) {
        size_t next = 0, inflight = 0;
        int first = 0, r;

        if (n > io->cap_nth) {
                uint64_t *a = realloc(io->nth, n * sizeof(*a));
                if (!a)
                        return -ENOMEM;
                io->nth = a;
                io->cap_nth = n;
        }
        for (size_t i = 0; i < n; i++) {
                ops[i].done = 0;
                ops[i].attempts = 0;
                ops[i].retries = 0;
                ops[i].result = -ECANCELED;
        }
        if (!io->uring) {
                for (size_t i = 0; i < n; i++)
                        io->nth[i] = atomic_fetch_add(ops[i].write ? &n_writes : &n_reads, 1) + 1;
                return run_sync(io, ops, n, hooks);
        }
        while ((next < n && !first) || inflight > 0) {
                struct io_uring_cqe *cqe;
                size_t i;

                first = fill(io, ops, n, &next, &inflight, hooks, first, true);
                if (inflight == 0)
                        break;
                r = io_uring_submit_and_wait(&io->ring, 1);
                if (r < 0 && r != -EINTR && r != -EAGAIN)
                        return r; /* the ring itself failed: ops in flight are lost with it */
                while (io_uring_peek_cqe(&io->ring, &cqe) == 0) {
                        i = (size_t)io_uring_cqe_get_data64(cqe);
                        r = cqe->res;
                        io_uring_cqe_seen(&io->ring, cqe);
                        inflight--;
                        r = op_complete(&ops[i], io->nth[i], r);
                        if (r == 0) {
                                if (submit_one(io, &ops[i], i) == 0) {
                                        inflight++;
                                        io_uring_submit(&io->ring);
                                        continue;
                                }
                                r = -EBUSY;
                        }
                        if (r > 0 && hooks && hooks->complete) {
                                /* The queue is topped up before op i is
                                 * verified (a read's checksum), so that the
                                 * disk is not left idle while it is. */
                                first = fill(io, ops, n, &next, &inflight, hooks, first, false);
                                r = hook_complete(hooks, i, &ops[i]);
                        }
                        ops[i].result = r < 0 ? r : 0;
                        if (r < 0 && !first)
                                first = r;
                }
        }
        return first;
}
