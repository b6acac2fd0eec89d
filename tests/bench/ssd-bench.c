/* SPDX-License-Identifier: MIT */
/*
 * ssd-bench: the SSD tier's speed next to what the hardware does, in one
 * run, on the same bytes (tests/bench/ssd-h200.sh runs it on the GPU).
 *
 *   ssd-bench DIR BYTES [SESSION_BYTES [REPS]]
 *
 *   raw-write / raw-read   O_DIRECT io_uring, 1 MiB blocks, 32 in flight, of
 *                          BYTES in a file in DIR (the daemon's [ssd] dir's disk)
 *   raw-read-pieces        the same read as requests of RAW_PIECE, each run to
 *                          its end before the next starts: what the queue's
 *                          drain at the end of each request costs
 *   pinned-d2h / -h2d      cudaMemcpy between the device buffer and pinned host
 *                          memory (cudaHostRegister), BYTES
 *   spill / restore        kvtier_spill of BYTES of captured device memory, then
 *                          kvtier_restore + kvtier_restore_wait, every word checked
 *   session-restore        latency of one SESSION_BYTES restore (default 256 MiB),
 *                          REPS times (default 5): min and median
 *   readahead-restore      the same with kvtier_readahead issued first and
 *                          kvtier_restore issued when it is done: the
 *                          restore's own wait (what prefetch leaves)
 *
 * Runs under LD_PRELOAD=libkvtier.so with KVTIER_MIN_SIZE below BYTES, so
 * that the device buffers are captured (managed) and spill releases them.
 * Prints one line per figure; exit 0, 1 on wrong data, 3 on a failed call.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda-abi.h"
#include "kvtier.h"

KVT_CUDART_FUNCS(KVT_CUDA_PROTOTYPE)
KVT_CUDART_TEST_FUNCS(KVT_CUDA_PROTOTYPE)

#define MIB       ((uint64_t)1 << 20)
#define RAW_BLOCK (1 * MIB)
#define RAW_QD    32
#define RAW_PIECE (128 * MIB) /* half of the shim's staging */

static double now_s(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void report(const char *what, uint64_t bytes, double secs) {
        printf("%-20s %8.3f GB/s  (%" PRIu64 " MiB in %.3f s)\n", what, (double)bytes / secs / 1e9,
               bytes / MIB, secs);
}

/* O_DIRECT through io_uring: RAW_QD blocks of RAW_BLOCK in flight, of the
 * bytes from offset at on. */
static int raw_io(int fd, char *buf, uint64_t at, uint64_t bytes, int write) {
        struct io_uring ring;
        uint64_t next = at, done = at;
        unsigned inflight = 0;

        if (io_uring_queue_init(RAW_QD, &ring, 0) < 0)
                return -1;
        bytes += at;
        while (done < bytes) {
                struct io_uring_cqe *cqe;

                while (inflight < RAW_QD && next < bytes) {
                        struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
                        unsigned n = (unsigned)(bytes - next < RAW_BLOCK ? bytes - next : RAW_BLOCK);

                        if (write)
                                io_uring_prep_write(sqe, fd, buf + next % (64 * MIB), n, next);
                        else
                                io_uring_prep_read(sqe, fd, buf + next % (64 * MIB), n, next);
                        next += n;
                        inflight++;
                }
                if (io_uring_submit_and_wait(&ring, 1) < 0)
                        return -1;
                while (io_uring_peek_cqe(&ring, &cqe) == 0) {
                        if (cqe->res <= 0) {
                                fprintf(stderr, "raw I/O: %s\n", strerror(-cqe->res));
                                return -1;
                        }
                        done += (uint64_t)cqe->res;
                        inflight--;
                        io_uring_cqe_seen(&ring, cqe);
                }
        }
        io_uring_queue_exit(&ring);
        return 0;
}

static int bench_raw(const char *dir, uint64_t bytes) {
        char path[4096];
        char *buf;
        double t;
        int fd;

        snprintf(path, sizeof(path), "%s/ssd-bench-raw.%d", dir, (int)getpid());
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
        if (fd < 0) {
                printf("raw: O_DIRECT refused in %s (%s): no raw figures\n", dir, strerror(errno));
                return 0;
        }
        unlink(path);
        if (posix_memalign((void **)&buf, 2 * MIB, 64 * MIB))
                return 3;
        memset(buf, 0x3c, 64 * MIB);
        t = now_s();
        if (raw_io(fd, buf, 0, bytes, 1) < 0 || fdatasync(fd) < 0)
                return 3;
        report("raw-write", bytes, now_s() - t);
        t = now_s();
        if (raw_io(fd, buf, 0, bytes, 0) < 0)
                return 3;
        report("raw-read", bytes, now_s() - t);
        t = now_s();
        for (uint64_t at = 0; at < bytes; at += RAW_PIECE)
                if (raw_io(fd, buf, at, bytes - at < RAW_PIECE ? bytes - at : RAW_PIECE, 0) < 0)
                        return 3;
        report("raw-read-pieces", bytes, now_s() - t);
        close(fd);
        free(buf);
        return 0;
}

static int bench_pinned(char *dev, uint64_t bytes) {
        char *host;
        double t;

        if (posix_memalign((void **)&host, 2 * MIB, bytes) ||
            cudaHostRegister(host, bytes, 0) != cudaSuccess)
                return 3;
        memset(host, 1, bytes);
        cudaDeviceSynchronize();
        t = now_s();
        if (cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
                return 3;
        report("pinned-d2h", bytes, now_s() - t);
        t = now_s();
        if (cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
                return 3;
        report("pinned-h2d", bytes, now_s() - t);
        cudaHostUnregister(host);
        free(host);
        return 0;
}

/* A word pattern the host can check after a copy back. */
static void pattern(uint64_t *w, uint64_t n, uint64_t seed) {
        for (uint64_t i = 0; i < n; i++)
                w[i] = (i + seed) * 0x9e3779b97f4a7c15ull;
}

static int cmp(const char *dev, uint64_t bytes, uint64_t seed) {
        uint64_t *host = malloc(bytes), bad = 0;

        if (!host || cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
                return 3;
        for (uint64_t i = 0; i < bytes / 8; i++)
                bad += host[i] != (i + seed) * 0x9e3779b97f4a7c15ull;
        free(host);
        if (bad)
                printf("WRONG DATA: %" PRIu64 " words\n", bad);
        return bad ? 1 : 0;
}

static int fill(char *dev, uint64_t bytes, uint64_t seed) {
        uint64_t *host = malloc(bytes);
        int r;

        if (!host)
                return 3;
        pattern(host, bytes / 8, seed);
        r = cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : 3;
        free(host);
        return r;
}

static int bench_tier(char *dev, uint64_t bytes, cudaStream_t st) {
        uint64_t h;
        double t;
        int r;

        if ((r = fill(dev, bytes, 11)) != 0)
                return r;
        cudaDeviceSynchronize();
        t = now_s();
        r = kvtier_try_spill(dev, bytes, &h);
        if (r < 0) {
                printf("spill: %s\n", strerror(-r));
                return 3;
        }
        report("spill", bytes, now_s() - t);
        t = now_s();
        if ((r = kvtier_try_restore(h, st)) < 0 || (r = kvtier_try_restore_wait(h)) < 0) {
                printf("restore: %s\n", strerror(-r));
                return 3;
        }
        cudaStreamSynchronize(st);
        report("restore", bytes, now_s() - t);
        kvtier_try_drop(h);
        return cmp(dev, bytes, 11);
}

static int dbl_cmp(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

static int bench_session(char *dev, uint64_t bytes, int reps, cudaStream_t st, int ahead) {
        double *lat = calloc((size_t)reps, sizeof(double));
        int r;

        for (int i = 0; i < reps; i++) {
                uint64_t h;
                double t;

                if ((r = fill(dev, bytes, 100 + (uint64_t)i)) != 0)
                        return r;
                if ((r = kvtier_try_spill(dev, bytes, &h)) < 0) {
                        printf("session spill: %s\n", strerror(-r));
                        return 3;
                }
                if (ahead) { /* the engine hinted early; the restore later waits for what is left */
                        kvtier_try_readahead(h);
                        usleep(200000);
                }
                t = now_s();
                if ((r = kvtier_try_restore(h, st)) < 0 || (r = kvtier_try_restore_wait(h)) < 0 ||
                    cudaStreamSynchronize(st) != cudaSuccess) {
                        printf("session restore: %s\n", strerror(-r));
                        return 3;
                }
                lat[i] = now_s() - t;
                kvtier_try_drop(h);
                if ((r = cmp(dev, bytes, 100 + (uint64_t)i)) != 0)
                        return r;
        }
        qsort(lat, (size_t)reps, sizeof(double), dbl_cmp);
        printf("%-20s %8.2f ms min, %.2f ms median, %d runs of %" PRIu64 " MiB (%.2f GB/s at the median)\n",
               ahead ? "readahead-restore" : "session-restore", lat[0] * 1e3, lat[reps / 2] * 1e3, reps,
               bytes / MIB, (double)bytes / lat[reps / 2] / 1e9);
        free(lat);
        return 0;
}

int main(int argc, char **argv) {
        uint64_t bytes, session;
        int reps, r;
        cudaStream_t st;
        char *dev;

        if (argc < 3) {
                fprintf(stderr, "usage: ssd-bench DIR BYTES [SESSION_BYTES [REPS]]\n");
                return 2;
        }
        setvbuf(stdout, NULL, _IOLBF, 0);
        bytes = strtoull(argv[2], NULL, 0) / MIB * MIB;
        session = argc > 3 ? strtoull(argv[3], NULL, 0) / MIB * MIB : 256 * MIB;
        reps = argc > 4 ? atoi(argv[4]) : 5;
        if (bytes == 0 || session == 0 || session > bytes || reps < 1)
                return 2;
        if (cudaMalloc((void **)&dev, bytes) != cudaSuccess ||
            cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess)
                return 3;
        if ((r = bench_raw(argv[1], bytes)) != 0 || (r = bench_pinned(dev, bytes)) != 0 ||
            (r = bench_tier(dev, bytes, st)) != 0 || (r = bench_session(dev, session, reps, st, 0)) != 0 ||
            (r = bench_session(dev, session, reps, st, 1)) != 0)
                return r;
        cudaFree(dev);
        return 0;
}
