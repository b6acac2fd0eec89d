/* SPDX-License-Identifier: MIT */
/* ssd-io.c: a batch of reads keeps its queue full while each finished read
 * is verified, the data read is what was written, and a failed check ends
 * the batch with the ops never started cancelled. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "ssd-io.h"
#include "tap.h"
#include "util.h"

#define N_OPS 24
#define DEPTH 4
#define BLOCK 4096

struct seen {
        int fd;
        char *bufs;
        size_t prepared;                /* prepare calls so far */
        size_t completed;               /* complete calls so far */
        size_t prepared_at[N_OPS];      /* prepared, at the j-th complete call */
        size_t fail_at;                 /* the op whose check fails; N_OPS: none */
        bool data_ok;
};

static int prepare(void *ctx, size_t i, struct ssd_io_op *op) {
        struct seen *s = ctx;

        s->prepared++;
        *op = (struct ssd_io_op){.fd = s->fd, .buf = s->bufs + i * BLOCK, .len = BLOCK, .offset = i * BLOCK};
        return 0;
}

static int complete(void *ctx, size_t i, struct ssd_io_op *op) {
        struct seen *s = ctx;
        const unsigned char *p = op->buf;

        s->prepared_at[s->completed++] = s->prepared;
        for (size_t k = 0; k < BLOCK; k++)
                s->data_ok &= p[k] == (unsigned char)(i * 7 + k % 13);
        return i == s->fail_at ? -EBADMSG : 0;
}

static void run(struct ssd_io *io, int fd, size_t fail_at, const char *what) {
        struct ssd_io_op ops[N_OPS];
        struct seen s = {.fd = fd, .fail_at = fail_at, .data_ok = true};
        struct ssd_io_hooks h = {.prepare = prepare, .complete = complete, .ctx = &s};
        size_t cancelled = 0, held = 0;
        int r;

        s.bufs = aligned_alloc(BLOCK, N_OPS * BLOCK);
        r = ssd_io_run(io, ops, N_OPS, &h);
        if (fail_at == N_OPS) {
                TAP_EQ_INT(r, 0, "%s: every read succeeded", what);
                TAP_OK(s.data_ok, "%s: every byte as written", what);
                TAP_EQ_U64(s.completed, N_OPS, "%s: each read verified once", what);
                /* Before each check the queue was topped up to DEPTH in
                 * flight (the old loop verified a burst of completions
                 * before submitting any). */
                for (size_t j = 0; j < s.completed; j++)
                        held += s.prepared_at[j] == MIN((size_t)N_OPS, j + 1 + DEPTH);
                TAP_EQ_U64(held, s.completed, "%s: the queue was full at every check", what);
        } else {
                TAP_EQ_INT(r, -EBADMSG, "%s: the batch fails with the check's error", what);
                TAP_EQ_INT(ops[fail_at].result, -EBADMSG, "%s: the op that failed its check says so", what);
                for (size_t i = 0; i < N_OPS; i++)
                        cancelled += ops[i].result == -ECANCELED;
                TAP_EQ_U64(cancelled, N_OPS - s.prepared, "%s: the ops never started are cancelled", what);
                TAP_OK(s.prepared < N_OPS, "%s: no op started after the failure was seen", what);
        }
        free(s.bufs);
}

int main(void) {
        char path[] = "/tmp/kvtier-ssd-io.XXXXXX";
        unsigned char *data = malloc(N_OPS * BLOCK);
        struct ssd_io *io;
        bool uring;
        int fd = mkstemp(path), r;

        if (fd < 0 || !data)
                return 99;
        unlink(path);
        for (size_t i = 0; i < N_OPS; i++)
                for (size_t k = 0; k < BLOCK; k++)
                        data[i * BLOCK + k] = (unsigned char)(i * 7 + k % 13);
        if (pwrite(fd, data, N_OPS * BLOCK, 0) != N_OPS * BLOCK)
                return 99;
        r = ssd_io_new(DEPTH, &io, &uring);
        if (r == 0 && !uring) { /* pread: one at a time, nothing to keep full; no test line before the plan */
                ssd_io_free(io);
                printf("1..0 # SKIP io_uring cannot be set up here\n");
                return 0;
        }
        TAP_EQ_INT(r, 0, "an I/O context of depth %d", DEPTH);
        if (r < 0)
                return tap_done();
        run(io, fd, N_OPS, "reads");
        run(io, fd, 2, "a failed check");
        ssd_io_free(io);
        close(fd);
        free(data);
        return tap_done();
}
