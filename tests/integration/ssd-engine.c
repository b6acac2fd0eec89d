/* SPDX-License-Identifier: MIT */
/*
 * ssd-engine: drives the SSD tier's API (include/kvtier.h) the way an
 * engine would, under LD_PRELOAD=libkvtier.so against the fake CUDA, and
 * checks every word it gets back.
 *
 *   ssd-engine roundtrip N SEED   N random ranges (captured device memory,
 *                                 sub-ranges of it, host memory), spilled,
 *                                 restored (some by readahead first), checked
 *   ssd-engine fault WHERE RC     one 40 MiB range (WHERE: device, captured;
 *                                 or host); its restore must end in RC (0 or
 *                                 -errno) and leave every word either right or
 *                                 as the spill left it (device: 0xdb.., host:
 *                                 a marker written after the spill)
 *   ssd-engine fault-spill WHERE RC  its spill must end in RC; a failed one
 *                                 changes nothing, one that succeeded restores
 *                                 every word
 *   ssd-engine quota BYTES RC     a spill of BYTES (host memory) must end in RC
 *   ssd-engine hang               spills 64 MiB ranges until killed, printing
 *                                 "spilling N" before each
 *   ssd-engine absent RC          kvtier_try_spill must return RC
 *   ssd-engine early DIR          one 8 MiB captured range spilled and
 *                                 restored; once kvtier_restore_wait() returns it
 *                                 makes DIR/restored and waits for
 *                                 DIR/restored.go (the test reads the daemon's
 *                                 books meanwhile), then checks every word
 *   ssd-engine books DIR [MIB [late]]  one 32 MiB captured range (after MIB
 *                                 of another, filled first; with late, after
 *                                 the spilled step), filled by the GPU,
 *                                 spilled, restored; after each step it makes
 *                                 DIR/STEP (filled, spilled, restored) and waits
 *                                 for DIR/STEP.go, so that the test can read the
 *                                 daemon's books; prints the range's bytes in
 *                                 VRAM and its pages the GPU is advised to
 *                                 access (accessed-by) after each
 *   ssd-engine keep N SEED GO RC K   N random ranges (device and host)
 *                                 spilled, "ready N ranges, B bytes" printed;
 *                                 once the file GO exists (the test restarted
 *                                 kvtierd meanwhile) all are restored: the
 *                                 first N-K with every word right, the last K
 *                                 must end in RC with every word either right
 *                                 or as the spill left them
 *   ssd-engine fork               a host range spilled, then fork(): the child
 *                                 must not see it, and spills and restores one
 *                                 of its own; the parent's then restores intact
 *   ssd-engine claim TOKEN HANDLE speaks the protocol itself: SSD_HELLO with
 *                                 TOKEN (32 hex digits), then SSD_READ of
 *                                 HANDLE; expects a new session and ENOENT
 *
 * Prints one line per finding; exit status: 0 as expected, 1 wrong data or
 * outcome, 2 usage, 3 a CUDA call (or, for claim, the socket) failed.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda-abi.h"
#include "fakecuda.h"
#include "kvtier.h"
#include "protocol.h"
#include "util.h"

KVT_CUDART_FUNCS(KVT_CUDA_PROTOTYPE)
KVT_CUDART_TEST_FUNCS(KVT_CUDA_PROTOTYPE)

#define MIB    (1ull << 20)
#define POISON 0xdbdbdbdbdbdbdbdbull /* the fake's discarded memory */
#define MARKER 0x4d41524b4d41524bull /* "MARKMARK": host memory after its spill */

static uint64_t rng_state;

static uint64_t rng(void) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        return rng_state;
}

struct range {
        char *ptr;
        size_t len;
        bool device;
        uint64_t *shadow; /* what it held at spill */
        uint64_t handle;
};

static void fill_host(struct range *r) {
        for (size_t i = 0; i + 8 <= r->len; i += 8) {
                uint64_t w = rng();
                memcpy(r->ptr + i, &w, 8);
        }
        for (size_t i = r->len & ~(size_t)7; i < r->len; i++)
                r->ptr[i] = (char)rng();
}

/* Copies the range's current contents to buf (len rounded up to words). */
static int read_range(const struct range *r, uint64_t *buf) {
        memset(buf, 0, (r->len + 7) / 8 * 8);
        if (!r->device) {
                memcpy(buf, r->ptr, r->len);
                return 0;
        }
        return cudaMemcpy(buf, r->ptr, r->len, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -EIO;
}

static int snapshot(struct range *r) {
        r->shadow = malloc((r->len + 7) / 8 * 8);
        return r->shadow ? read_range(r, r->shadow) : -ENOMEM;
}

/* Counts words that are neither what the spill saw nor `other` (0: none
 * allowed).  Returns the count of wrong words; *ret_other gets the others. */
static size_t compare(const struct range *r, uint64_t other, size_t *ret_other) {
        size_t words = (r->len + 7) / 8, wrong = 0, n_other = 0;
        uint64_t *now = malloc(words * 8);

        if (!now || read_range(r, now) < 0) {
                free(now);
                return SIZE_MAX;
        }
        for (size_t i = 0; i < words; i++) {
                uint64_t mask = (i + 1) * 8 <= r->len ? ~0ull : (1ull << (8 * (r->len % 8))) - 1;

                if (((now[i] ^ r->shadow[i]) & mask) == 0)
                        continue;
                if (other && ((now[i] ^ other) & mask) == 0)
                        n_other++;
                else
                        wrong++;
        }
        free(now);
        if (ret_other)
                *ret_other = n_other;
        return wrong;
}

static int roundtrip(int n, uint64_t seed) {
        const size_t pool_bytes = 256 * MIB;
        struct range *rs = calloc((size_t)n, sizeof(*rs));
        char *pool = NULL;
        cudaStream_t st;
        size_t pool_off = 0;
        int bad = 0, r;

        rng_state = seed | 1;
        if (!rs || cudaMalloc((void **)&pool, pool_bytes) != cudaSuccess ||
            cudaStreamCreate(&st) != cudaSuccess)
                return 3;
        if (fakecuda_kernel_fill(pool, pool_bytes, seed) != 0)
                return 3;
        for (int i = 0; i < n; i++) {
                struct range *x = &rs[i];

                x->device = i % 3 != 2;
                if (x->device) {
                        /* a 4 KiB aligned piece of the pool, 4 KiB .. 40 MiB, not overlapping */
                        size_t len = (1 + rng() % (10 * 256)) * 4096;

                        pool_off += (rng() % 512) * 4096;
                        if (pool_off + len > pool_bytes) {
                                x->device = false;
                        } else {
                                x->ptr = pool + pool_off;
                                x->len = len;
                                pool_off += len;
                        }
                }
                if (!x->device) {
                        x->len = 1 + rng() % (20 * MIB);
                        x->ptr = malloc(x->len);
                        if (!x->ptr)
                                return 3;
                        fill_host(x);
                }
                if (snapshot(x) < 0)
                        return 3;
        }
        for (int i = 0; i < n; i++) {
                struct kvtier_spill_info info;

                r = kvtier_try_spill(rs[i].ptr, rs[i].len, &rs[i].handle);
                if (r < 0) {
                        printf("spill %d (%zu bytes, %s): %d\n", i, rs[i].len,
                               rs[i].device ? "device" : "host", r);
                        return 1;
                }
                if (kvtier_try_query(rs[i].handle, &info) < 0 || info.state != KVTIER_SPILLED ||
                    info.size_bytes != rs[i].len) {
                        printf("query %d: wrong\n", i);
                        return 1;
                }
                if (info.released)
                        printf("released %d\n", i);
                if (!rs[i].device) /* the engine's memory is free to be anything until restored */
                        memset(rs[i].ptr, 0x5a, rs[i].len);
        }
        for (int i = 0; i < n; i++) /* every third by readahead first */
                if (i % 3 == 0 && (r = kvtier_try_readahead(rs[i].handle)) < 0)
                        printf("readahead %d: %d\n", i, r), bad++;
        for (int i = n - 1; i >= 0; i--)
                if ((r = kvtier_try_restore(rs[i].handle, st)) < 0)
                        printf("restore %d: %d\n", i, r), bad++;
        cudaStreamSynchronize(st);
        for (int i = 0; i < n; i++) {
                size_t wrong;
                uint64_t bad_words = 0;

                r = kvtier_try_restore_wait(rs[i].handle);
                wrong = compare(&rs[i], 0, NULL);
                if (r < 0 || wrong) {
                        printf("range %d (%zu bytes, %s): restore %d, %zu wrong words\n", i, rs[i].len,
                               rs[i].device ? "device" : "host", r, wrong);
                        bad++;
                }
                if (kvtier_try_drop(rs[i].handle) < 0)
                        bad++;
                if (!rs[i].device)
                        free(rs[i].ptr);
                free(rs[i].shadow);
                (void)bad_words;
        }
        /* the GPU's view of the whole pool: the fill's pattern everywhere */
        {
                uint64_t bad_words = 0;

                if (fakecuda_kernel_check(pool, pool_bytes, seed, &bad_words) != 0 || bad_words) {
                        printf("pool: %" PRIu64 " bad words as the GPU sees it\n", bad_words);
                        bad++;
                }
        }
        printf("roundtrip: %d ranges, %d bad\n", n, bad);
        cudaFree(pool);
        free(rs);
        return bad ? 1 : 0;
}

/* One 40 MiB range (captured device memory, or host memory) through a
 * spill and a restore under the daemon's injected faults. */
static int fault(bool device, int want, bool at_spill) {
        struct range x = {.len = 40 * MIB, .device = device};
        struct kvtier_spill_info info = {0};
        size_t wrong, other = 0;
        int r;

        rng_state = 7;
        if (device) {
                if (cudaMalloc((void **)&x.ptr, x.len) != cudaSuccess ||
                    fakecuda_kernel_fill(x.ptr, x.len, 3) != 0)
                        return 3;
        } else {
                if (!(x.ptr = malloc(x.len)))
                        return 3;
                fill_host(&x);
        }
        if (snapshot(&x) < 0)
                return 3;
        r = kvtier_try_spill(x.ptr, x.len, &x.handle);
        if (at_spill) {
                printf("spill: %d (want %d)\n", r, want);
                if (r != want)
                        return 1;
                if (r < 0) { /* a failed spill releases nothing and changes nothing */
                        wrong = compare(&x, 0, NULL);
                        printf("after the failed spill: %zu words changed\n", wrong);
                        return wrong ? 1 : 0;
                }
                want = 0; /* what was written despite the faults must come back whole */
        } else if (r < 0) {
                printf("spill: %d\n", r);
                return 1;
        }
        if (!device)
                for (size_t k = 0; k + 8 <= x.len; k += 8)
                        memcpy(x.ptr + k, &(uint64_t){MARKER}, 8);
        r = kvtier_try_restore(x.handle, NULL);
        if (r == 0)
                r = kvtier_try_restore_wait(x.handle);
        kvtier_try_query(x.handle, &info);
        wrong = compare(&x, device ? POISON : MARKER, &other);
        printf("restore %s: %d (want %d), state %d, last_error %d, %zu wrong words, %zu as the spill left "
               "them\n",
               device ? "device" : "host", r, want, info.state, info.last_error, wrong, other);
        kvtier_try_drop(x.handle);
        if (r != want || wrong != 0)
                return 1;
        if (want != 0 && (info.state != KVTIER_SPILLED || info.last_error != want))
                return 1;
        return 0;
}

/* Fills r (device: a piece of pool; host: malloc'd) for keep(). */
static int keep_range(struct range *r, int i, char *pool, size_t *pool_off, size_t pool_bytes) {
        r->len = 4096 + rng() % (8 * MIB);
        r->device = i % 2 == 0 && *pool_off + r->len <= pool_bytes;
        if (r->device) {
                r->ptr = pool + *pool_off;
                *pool_off += ALIGN_UP(r->len, 4096);
        } else {
                if (!(r->ptr = malloc(r->len)))
                        return -ENOMEM;
                fill_host(r);
        }
        return snapshot(r);
}

/* Waits (up to 300 s) for the file go to exist. */
static bool wait_for(const char *go) {
        for (int i = 0; i < 15000; i++) {
                if (access(go, F_OK) == 0)
                        return true;
                nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL);
        }
        return false;
}

/* Restores range i of n (the last k must end in want) and checks it. */
static bool keep_check(struct range *r, int i, int n, int want, int k, cudaStream_t st) {
        int expect = i >= n - k ? want : 0;
        size_t wrong, other = 0;
        int rc = kvtier_try_restore(r->handle, st);

        if (rc == 0)
                rc = kvtier_try_restore_wait(r->handle);
        wrong = compare(r, r->device ? POISON : MARKER, &other);
        printf("range %d (%zu bytes, %s): restore %d (want %d), %zu wrong words, %zu as the spill left "
               "them\n",
               i, r->len, r->device ? "device" : "host", rc, expect, wrong, other);
        kvtier_try_drop(r->handle);
        return rc == expect && wrong == 0;
}

static int keep(int n, uint64_t seed, const char *go, int want, int k) {
        const size_t pool_bytes = 64 * MIB;
        struct range *rs = calloc((size_t)n, sizeof(*rs));
        size_t pool_off = 0, total = 0;
        char *pool = NULL;
        cudaStream_t st;
        int bad = 0;

        rng_state = seed | 1;
        if (!rs || cudaMalloc((void **)&pool, pool_bytes) != cudaSuccess ||
            cudaStreamCreate(&st) != cudaSuccess || fakecuda_kernel_fill(pool, pool_bytes, seed) != 0)
                return 3;
        for (int i = 0; i < n; i++) {
                int r;

                if (keep_range(&rs[i], i, pool, &pool_off, pool_bytes) < 0)
                        return 3;
                r = kvtier_try_spill(rs[i].ptr, rs[i].len, &rs[i].handle);
                if (r < 0) {
                        printf("spill %d (%zu bytes): %d\n", i, rs[i].len, r);
                        return 1;
                }
                if (!rs[i].device)
                        for (size_t j = 0; j + 8 <= rs[i].len; j += 8)
                                memcpy(rs[i].ptr + j, &(uint64_t){MARKER}, 8);
                total += rs[i].len;
        }
        printf("ready %d ranges, %zu bytes\n", n, total);
        if (!wait_for(go))
                return printf("no %s\n", go), 1;
        for (int i = 0; i < n; i++)
                bad += !keep_check(&rs[i], i, n, want, k, st);
        printf("keep: %d ranges, %d bad\n", n, bad);
        return bad ? 1 : 0;
}

/* A sealed staging memfd of bytes, as the shim makes it. */
static int staging_fd(size_t bytes) {
        int fd = memfd_create("ssd-engine-staging", MFD_CLOEXEC | MFD_ALLOW_SEALING);

        if (fd < 0 || ftruncate(fd, (off_t)bytes) < 0 ||
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
                return -1;
        return fd;
}

/* Another process asks for spills with token: it must get a new session
 * and not the spill of handle. */
static int claim(const char *token_hex, uint64_t handle) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct kvt_ssd_hello h = {
                .proto_version = KVT_PROTO_VERSION, .staging_bytes = 4 * MIB, .next_handle = 1};
        struct kvt_ssd_io io = {.handle = handle, .len = 4096};
        static struct kvt_msg m;
        const char *path = getenv("KVTIER_SOCKET");
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), sfd = staging_fd(4 * MIB);

        for (size_t i = 0; i < KVT_SSD_TOKEN_BYTES && strlen(token_hex) == 2 * KVT_SSD_TOKEN_BYTES; i++)
                sscanf(token_hex + 2 * i, "%2hhx", &h.token[i]);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path ? path : "");
        if (fd < 0 || sfd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            kvt_msg_send_fd(fd, KVT_MSG_SSD_HELLO, 0, &h, sizeof(h), sfd) < 0 ||
            kvt_msg_recv_timeout(fd, &m, 5000) < 0 || m.hdr.type != KVT_MSG_SSD_WELCOME)
                return printf("claim: no SSD_WELCOME\n"), 3;
        printf("claim: welcome status %d, reattached %u, %llu spills\n", m.u.ssd_welcome.status,
               m.u.ssd_welcome.reattached, (unsigned long long)m.u.ssd_welcome.spills);
        if (m.u.ssd_welcome.reattached)
                return 1;
        if (kvt_msg_send(fd, KVT_MSG_SSD_READ, 1, &io, sizeof(io)) < 0 ||
            kvt_msg_recv_timeout(fd, &m, 5000) < 0 || m.hdr.type != KVT_MSG_SSD_REPLY)
                return printf("claim: no SSD_REPLY\n"), 3;
        printf("claim: read of handle %llu: %d\n", (unsigned long long)handle, m.u.ssd_reply.status);
        return m.u.ssd_reply.status == -ENOENT ? 0 : 1;
}

static int quota(size_t bytes, int want) {
        char *p = calloc(1, bytes);
        uint64_t h = 0;
        int r;

        if (!p)
                return 3;
        r = kvtier_try_spill(p, bytes, &h);
        printf("quota: spill of %zu bytes: %d (want %d)\n", bytes, r, want);
        if (r == 0)
                kvtier_try_drop(h);
        free(p);
        return r == want ? 0 : 1;
}

static int hang(void) {
        size_t len = 64 * MIB;
        char *p = malloc(len);

        if (!p)
                return 3;
        memset(p, 1, len);
        for (unsigned i = 0;; i++) {
                uint64_t h;
                int r;

                printf("spilling %u\n", i);
                fflush(stdout);
                r = kvtier_try_spill(p, len, &h);
                if (r < 0) {
                        printf("spill: %d\n", r);
                        return 1;
                }
        }
}

/* Makes dir/step and waits (20 s at most) for dir/step.go. */
static int step_wait(const char *dir, const char *step, const void *ptr, size_t len) {
        char path[4096];
        uint64_t vram = 0;
        unsigned mapped = 0;
        struct stat st;
        FILE *f;

        (void)fakecuda_resident_bytes(ptr, len, 0, &vram);
        for (size_t off = 0; off < len; off += FAKECUDA_PAGE_BYTES) {
                struct fakecuda_page_info pi;

                mapped += fakecuda_page_info((const char *)ptr + off, &pi) == 0 && (pi.accessed_by & 1u);
        }
        printf("%s: %" PRIu64 " bytes in VRAM, %u pages accessed-by\n", step, vram, mapped);
        snprintf(path, sizeof(path), "%s/%s", dir, step);
        if (!(f = fopen(path, "w")))
                return -errno;
        fclose(f);
        snprintf(path, sizeof(path), "%s/%s.go", dir, step);
        for (int i = 0; i < 400 && stat(path, &st) < 0; i++)
                usleep(50000);
        return stat(path, &st);
}

static int fill_filler(size_t mib) {
        char *filler;

        return mib && (cudaMalloc((void **)&filler, mib * MIB) != cudaSuccess ||
                       fakecuda_kernel_fill(filler, mib * MIB, 9) != 0)
                       ? -ENOMEM
                       : 0;
}

static int books(const char *dir, size_t filler_mib, bool late) {
        struct range x = {.len = 32 * MIB, .device = true};
        cudaStream_t st;
        int r;

        if (!late && fill_filler(filler_mib) < 0)
                return 3;
        if (cudaMalloc((void **)&x.ptr, x.len) != cudaSuccess || cudaStreamCreate(&st) != cudaSuccess ||
            fakecuda_kernel_fill(x.ptr, x.len, 5) != 0 || snapshot(&x) < 0)
                return 3;
        if (step_wait(dir, "filled", x.ptr, x.len) < 0)
                return 1;
        if ((r = kvtier_try_spill(x.ptr, x.len, &x.handle)) < 0) {
                printf("spill: %d\n", r);
                return 1;
        }
        if (step_wait(dir, "spilled", x.ptr, x.len) < 0 || (late && fill_filler(filler_mib) < 0))
                return 1;
        if ((r = kvtier_try_restore(x.handle, st)) < 0 || (r = kvtier_try_restore_wait(x.handle)) < 0 ||
            cudaStreamSynchronize(st) != cudaSuccess) {
                printf("restore: %d\n", r);
                return 1;
        }
        if (compare(&x, 0, NULL) != 0) {
                printf("restore: wrong words\n");
                return 1;
        }
        kvtier_try_drop(x.handle);
        return step_wait(dir, "restored", x.ptr, x.len) < 0 ? 1 : 0;
}

static int early(const char *dir) {
        struct range x = {.len = 8 * MIB, .device = true};
        int r;

        if (cudaMalloc((void **)&x.ptr, x.len) != cudaSuccess || fakecuda_kernel_fill(x.ptr, x.len, 6) != 0 ||
            snapshot(&x) < 0)
                return 3;
        if ((r = kvtier_try_spill(x.ptr, x.len, &x.handle)) < 0 || (r = kvtier_try_restore(x.handle, NULL)) < 0 ||
            (r = kvtier_try_restore_wait(x.handle)) < 0) {
                printf("spill and restore: %d\n", r);
                return 1;
        }
        if (step_wait(dir, "restored", x.ptr, x.len) < 0)
                return 1;
        kvtier_try_drop(x.handle);
        return compare(&x, 0, NULL) == 0 ? 0 : 1;
}

/* A host range spilled by a process that then forks: the child sees none
 * of the parent's spills, spills and restores one of its own on a
 * connection of its own, and the parent's still restores, every word. */
static int forked(void) {
        struct range mine = {.len = 3 * MIB + 5}, theirs = {.len = 2 * MIB + 3};
        struct kvtier_spill_info info;
        int r = -ENOMEM, status;
        pid_t pid;

        rng_state = 0xf04c;
        mine.ptr = malloc(mine.len);
        theirs.ptr = malloc(theirs.len);
        if (!mine.ptr || !theirs.ptr)
                return 3;
        fill_host(&theirs);
        if (snapshot(&theirs) < 0 || (r = kvtier_try_spill(theirs.ptr, theirs.len, &theirs.handle)) < 0) {
                printf("fork: the parent's spill: %d\n", r);
                return 1;
        }
        memset(theirs.ptr, 0x5a, theirs.len);
        pid = fork();
        if (pid < 0)
                return 3;
        if (pid == 0) {
                int bad = 0;

                if ((r = kvtier_try_query(theirs.handle, &info)) != -ENOENT)
                        printf("fork: the child sees the parent's spill: %d\n", r), bad++;
                fill_host(&mine);
                if (snapshot(&mine) < 0)
                        _exit(3);
                r = kvtier_try_spill(mine.ptr, mine.len, &mine.handle);
                if (r == 0) {
                        memset(mine.ptr, 0x5a, mine.len);
                        r = kvtier_try_readahead(mine.handle);
                        if (r == 0)
                                r = kvtier_try_restore_wait(mine.handle);
                }
                if (r < 0 || compare(&mine, 0, NULL))
                        printf("fork: the child's own spill and restore: %d\n", r), bad++;
                _exit(bad ? 1 : 0);
        }
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                printf("fork: the child failed\n");
                return 1;
        }
        if ((r = kvtier_try_readahead(theirs.handle)) < 0 || (r = kvtier_try_restore_wait(theirs.handle)) < 0 ||
            compare(&theirs, 0, NULL)) {
                printf("fork: the parent's restore after the fork: %d\n", r);
                return 1;
        }
        printf("fork: the child kept apart, the parent's spill intact\n");
        return kvtier_try_drop(theirs.handle) < 0;
}

int main(int argc, char **argv) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc == 4 && strcmp(argv[1], "roundtrip") == 0)
                return roundtrip(atoi(argv[2]), strtoull(argv[3], NULL, 0));
        if (argc == 4 && strcmp(argv[1], "fault") == 0)
                return fault(strcmp(argv[2], "device") == 0, atoi(argv[3]), false);
        if (argc == 4 && strcmp(argv[1], "fault-spill") == 0)
                return fault(strcmp(argv[2], "device") == 0, atoi(argv[3]), true);
        if (argc == 4 && strcmp(argv[1], "quota") == 0)
                return quota(strtoull(argv[2], NULL, 0), atoi(argv[3]));
        if (argc == 2 && strcmp(argv[1], "hang") == 0)
                return hang();
        if (argc == 3 && strcmp(argv[1], "early") == 0)
                return early(argv[2]);
        if ((argc >= 3 && argc <= 5) && strcmp(argv[1], "books") == 0 && (argc < 5 || strcmp(argv[4], "late") == 0))
                return books(argv[2], argc >= 4 ? strtoull(argv[3], NULL, 0) : 0, argc == 5);
        if (argc == 7 && strcmp(argv[1], "keep") == 0)
                return keep(atoi(argv[2]), strtoull(argv[3], NULL, 0), argv[4], atoi(argv[5]),
                            atoi(argv[6]));
        if (argc == 2 && strcmp(argv[1], "fork") == 0)
                return forked();
        if (argc == 4 && strcmp(argv[1], "claim") == 0)
                return claim(argv[2], strtoull(argv[3], NULL, 0));
        if (argc == 3 && strcmp(argv[1], "absent") == 0) {
                uint64_t h;
                char b[4096] = {0};
                int r = kvtier_try_spill(b, sizeof(b), &h);

                printf("absent: %d (want %s)\n", r, argv[2]);
                return r == atoi(argv[2]) ? 0 : 1;
        }
        fprintf(stderr,
                "usage: ssd-engine roundtrip N SEED | fault RC | fault-spill RC | quota BYTES RC | hang | "
                "absent RC | early DIR | books DIR [MIB [late]] | keep N SEED GO RC K | fork | claim TOKEN HANDLE\n");
        return 2;
}
