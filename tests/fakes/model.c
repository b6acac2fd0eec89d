/* SPDX-License-Identifier: MIT */

/*
 * Residency model of the fake CUDA.  Device memory is host memory.  Managed
 * memory is modelled per 2 MiB page: the host backing is the memory the
 * application sees; a page resident on a device has its data in a separate
 * "device copy" buffer.  Read-mostly pages may have one read-only duplicate
 * on a device while the host copy stays valid.
 *
 * CPU access works as under UVM (x86, concurrentManagedAccess): the host
 * backing is protected as residency says (no access while a device holds
 * the only copy, read-only beside a device's duplicate, read-write when the
 * host holds the only copy), and a SIGSEGV handler serves the CPU's faults:
 * a device-resident page migrates to the host (a read of a read-mostly one
 * leaves a duplicate behind), a write drops a duplicate.  The access then
 * completes with the right data.  The backing of a device-resident page is
 * also poisoned with 0xDB, so a bug in the protection shows as garbage.
 *
 * The handler takes the model's lock, so the model never touches a backing
 * the application cannot: it reads one only while readable, and writes one
 * by filling a new backing aside and moving it in (host_replace), so that
 * other threads never see a page half migrated.  Every state change ends
 * with the protection its residency calls for.  Unlike under UVM, syscalls
 * given a device-resident page fail with EFAULT instead of migrating it.
 */

#define _GNU_SOURCE

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "../engine/backend.h"
#include "cuda-abi.h"
#include "model.h"

#define POISON_BYTE          0xDB
#define PROT_RW              (PROT_READ | PROT_WRITE)
#define MISALIGN_BYTES       ((size_t)64 << 10)
#define SMALL_ALIGN_BYTES    256
#define DEFAULT_DEVICE_BYTES ((size_t)16 << 30)
#define ALIGN_UP_PAGE(x)     (((x) + MODEL_PAGE_BYTES - 1) & ~(MODEL_PAGE_BYTES - 1))

struct page {
        uint8_t *devcopy;     /* data on loc (a device) or on dup; NULL otherwise */
        uint64_t last_touch;  /* model clock of the last GPU touch or prefetch */
        uint32_t accessed_by; /* device bit mask */
        uint32_t mapped_by;   /* devices that mapped it on a fault (preferred host).  As on the H200
                               * (driver 580): UnsetAccessedBy, a prefetch to the host and CPU access
                               * leave such a mapping in place; a move of the page, and read
                               * duplication set then unset, drop it */
        int8_t loc;           /* MODEL_LOC_NONE, MODEL_LOC_HOST or a device */
        int8_t dup;           /* device with a read-only copy while loc is host, or -1 */
        int8_t preferred;     /* MODEL_LOC_NONE, MODEL_LOC_HOST or a device */
        bool preferred_numa;  /* preferred is the host, named as a NUMA node: never mapped remotely */
        int8_t numa;          /* host NUMA node a prefetch named for the host copy, or -1 (the kernel's) */
        int8_t prot;          /* the host backing's protection now (PROT_*) */
        bool read_mostly;
        /* A 4 KiB sample of a page on a device (kvtier's probe): advice and a
         * prefetch to the host over less than a page send that one 4 KiB page
         * out, unmapped, and leave the rest where it is (as on the H200).
         * sample_pref: its preferred location became the host (or the whole
         * page's is: a promotion leaves kvtier's eviction advice); sample_out:
         * it is out, and the device's next touch faults (a fault and a
         * remote map) and maps it. */
        bool sample_pref, sample_out;
        /* A host page re-armed (read-mostly set, unset) while a device mapped it
         * by accessed-by: that mapping is gone until the device's next touch,
         * which faults once and maps it again (as on the H200). */
        bool rearmed;
        /* Accessed-by over all of it but its first 4 KiB page (kvtier's
         * sample page): the driver maps the rest for the device as the page
         * moves to the host, and that page only at the device's touch, which
         * faults once (rearmed).  The driver's remote maps name the second
         * page on. */
        bool first_free;
        /* The 4 KiB edges inside the page at which advice over part of it
         * split the driver's block: UVM splits a managed range, and the 2
         * MiB blocks in it, at the edges of every range an advice names,
         * and never merges them again (uvm_policy.c, split_span_as_needed()),
         * so a block split in many pieces moves slower for good (H200:
         * tests/gpu/rearm-split.cu).  Bit k: an edge at k * 4 KiB. */
        uint64_t split[MODEL_PAGE_BYTES / 4096 / 64];
};

struct alloc {
        uintptr_t base; /* what the application sees */
        size_t size;
        uint8_t *raw; /* malloc'd (device) or mmap'd, 2 MiB aligned (managed) */
        size_t raw_bytes;
        bool managed;
        int dev;
        size_t n_pages;
        struct page *pages;
};

struct fail_rule {
        uint64_t nth; /* 0: never */
        bool onward;
        uint64_t calls;
};

static const char *const fail_kind_names[_MODEL_FAIL_MAX] = {
        [MODEL_FAIL_MALLOC] = "malloc",
        [MODEL_FAIL_MALLOC_MANAGED] = "malloc_managed",
        [MODEL_FAIL_PREFETCH] = "prefetch",
        [MODEL_FAIL_ADVISE] = "advise",
        [MODEL_FAIL_CTX_CREATE] = "ctx_create",
};

static struct {
        pthread_mutex_t lock;
        pthread_t owner; /* the thread holding lock, valid while owned */
        bool owned;
        struct sigaction old_segv; /* the SIGSEGV action before ours, chained to */
        bool forked; /* this is the child of a fork() after CUDA was initialized */
        pthread_once_t once;
        bool torn_down; /* the runtime's atexit teardown ran */
        bool initialized;
        int n_devices;
        int n_numa;
        int host_numa_id[MODEL_MAX_DEVICES];
        uint64_t numa_bytes[MODEL_MAX_NUMA];      /* host copies placed on each node by a prefetch naming it */
        uint64_t numa_peak_bytes[MODEL_MAX_NUMA];
        bool misalign;
        bool fault_batch; /* FAKECUDA_FAULT_BATCH: a kernel's faults and maps batched (um_batch) */
        bool silent_evict; /* FAKECUDA_SILENT_EVICT: a mapped eviction's sample page stays mapped, unseen */
        unsigned delay_us;
        unsigned free_delay_us;
        unsigned event_delay_us;
        unsigned advise_delay_us;
        const char *stats_path;
        size_t total_bytes[MODEL_MAX_DEVICES];
        struct fakecuda_stats stats[MODEL_MAX_DEVICES];
        struct alloc **allocs;
        size_t n_allocs, cap_allocs;
        struct fail_rule fail[_MODEL_FAIL_MAX];
        uint64_t clock;
} m = {
        .lock = PTHREAD_MUTEX_INITIALIZER,
        .once = PTHREAD_ONCE_INIT,
};

static _Thread_local int current_device;
static _Thread_local int current_ctx; /* 0: current_device's primary; else a created context's key */

/* Created contexts, by key (1..MODEL_MAX_CTX, never reused: a destroyed
 * context's streams stay dead), under m.lock; their call locks, and the
 * primaries' (by device), outside it. */
static struct {
        bool alive;
        int device;
        size_t limits[MODEL_CTX_LIMITS];
} ctxs[MODEL_MAX_CTX + 1];
static const size_t ctx_limit_defaults[MODEL_CTX_LIMITS] = { 1024, 1 << 20, 8 << 20 };
static size_t primary_limits[MODEL_MAX_DEVICES][MODEL_CTX_LIMITS]; /* CUDA's defaults from init_once() */
static int host_prefetches_busy[MODEL_MAX_DEVICES];
static int next_ctx_key = 1;
static pthread_mutex_t ctx_locks[MODEL_MAX_DEVICES + MODEL_MAX_CTX + 1] = {
        [0 ... MODEL_MAX_DEVICES + MODEL_MAX_CTX] = PTHREAD_MUTEX_INITIALIZER,
};

/* CUPTI-shaped event sink (fakecuda_set_um_hook), called under the lock. */
static fakecuda_um_hook um_hook;

void fakecuda_set_um_hook(fakecuda_um_hook hook) {
        __atomic_store_n(&um_hook, hook, __ATOMIC_RELEASE);
}

static void um_emit(int kind, uintptr_t addr, uint64_t value, int dev) {
        fakecuda_um_hook h = __atomic_load_n(&um_hook, __ATOMIC_ACQUIRE);

        if (h)
                h(kind, addr, value, dev);
}

enum { UM_HTOD = 1, UM_DTOH = 2, UM_GPU_FAULT = 4, UM_REMOTE_MAP = 7 }; /* CUPTI's counter kinds */

/* One kernel's faults and remote maps while FAKECUDA_FAULT_BATCH holds them
 * (model_kernel()), under the lock: the first fault and the count, the run
 * of adjacent maps being grown. */
static struct {
        bool on;
        int dev;
        uintptr_t fault_addr, map_addr;
        uint64_t faults, map_bytes;
} um_batch;

static void um_batch_flush_map(void) {
        if (um_batch.map_bytes)
                um_emit(UM_REMOTE_MAP, um_batch.map_addr, um_batch.map_bytes, um_batch.dev);
        um_batch.map_bytes = 0;
}

static void um_event(int kind, const void *page, uint64_t value, int dev) {
        uintptr_t addr = (uintptr_t)page;

        if (!um_batch.on || dev != um_batch.dev || (kind != UM_GPU_FAULT && kind != UM_REMOTE_MAP)) {
                um_emit(kind, addr, value, dev);
                return;
        }
        if (kind == UM_GPU_FAULT) {
                if (!um_batch.faults++)
                        um_batch.fault_addr = addr;
                return;
        }
        if (um_batch.map_bytes && um_batch.map_addr + um_batch.map_bytes == addr) {
                um_batch.map_bytes += value;
                return;
        }
        um_batch_flush_map();
        um_batch.map_addr = addr;
        um_batch.map_bytes = value;
}

/* Starts holding a kernel's records on dev (FAKECUDA_FAULT_BATCH), or hands
 * out what was held. */
static void um_batch_begin(int dev) {
        um_batch.on = m.fault_batch;
        um_batch.dev = dev;
        um_batch.faults = um_batch.map_bytes = 0;
}

static void um_batch_end(void) {
        if (!um_batch.on)
                return;
        if (um_batch.faults)
                um_emit(UM_GPU_FAULT, um_batch.fault_addr, um_batch.faults, um_batch.dev);
        um_batch_flush_map();
        um_batch.on = false;
}

/* "16G", "512M", "65536": binary suffixes K/M/G/T, optional B or iB. */
static int parse_size(const char *s, uint64_t *ret) {
        static const char units[] = "KMGT";
        const char *unit;
        char *end;
        unsigned long long v;

        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno != 0 || end == s)
                return -EINVAL;
        unit = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
        if (unit) {
                v <<= 10 * (unit - units + 1);
                end++;
        }
        if (*end != '\0' && strcmp(end, "B") != 0 && strcmp(end, "iB") != 0)
                return -EINVAL;
        *ret = v;
        return 0;
}

static long env_long(const char *name, long def, long min, long max) {
        const char *s = getenv(name);
        char *end;
        long v;

        if (!s || !*s)
                return def;
        errno = 0;
        v = strtol(s, &end, 10);
        if (errno != 0 || *end != '\0' || v < min || v > max) {
                fprintf(stderr, "fakecuda: invalid %s=%s, ignoring.\n", name, s);
                return def;
        }
        return v;
}

/* A flag: set and not "0". */
static bool env_flag(const char *name) {
        const char *s = getenv(name);

        return s && *s && strcmp(s, "0") != 0;
}

static void parse_fail(const char *spec) {
        char *copy = strdup(spec), *save = NULL;

        if (!copy)
                return;
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                char *colon = strchr(tok, ':'), *end;
                unsigned long long nth;
                int k;

                if (!colon)
                        goto bad;
                *colon = '\0';
                for (k = 0; k < _MODEL_FAIL_MAX; k++)
                        if (strcmp(tok, fail_kind_names[k]) == 0)
                                break;
                errno = 0;
                nth = strtoull(colon + 1, &end, 10);
                if (k == _MODEL_FAIL_MAX || errno != 0 || end == colon + 1 || nth == 0 ||
                    (*end != '\0' && strcmp(end, "+") != 0))
                        goto bad;
                m.fail[k].nth = nth;
                m.fail[k].onward = *end == '+';
                continue;
        bad:
                if (colon)
                        *colon = ':';
                fprintf(stderr, "fakecuda: invalid FAKECUDA_FAIL entry '%s', ignoring.\n", tok);
        }
        free(copy);
}

/* CUDA is not usable in the child of a fork() made after it was
 * initialized: every runtime call there fails with an initialization error.
 * The model itself stays consistent there (fork waits for the lock), so
 * the child's CPU faults on managed memory are still served. */
static void atfork_prepare(void) {
        pthread_mutex_lock(&m.lock);
}

static void atfork_parent(void) {
        pthread_mutex_unlock(&m.lock);
}

/* The forking thread took the lock in atfork_prepare(): it lets it go, as
 * in the parent (re-initialising a mutex this thread holds would leave it
 * held in ThreadSanitizer's eyes). */
static void atfork_child(void) {
        pthread_mutex_unlock(&m.lock);
        /* a prefetch of the parent's may have held one */
        for (size_t i = 0; i < sizeof(ctx_locks) / sizeof(ctx_locks[0]); i++)
                pthread_mutex_init(&ctx_locks[i], NULL);
        __atomic_store_n(&m.owned, false, __ATOMIC_RELAXED);
        m.forked = true;
}

static unsigned calls_under_way; /* model_call_begin() .. _end() */

void model_call_begin(void) {
        __atomic_add_fetch(&calls_under_way, 1, __ATOMIC_SEQ_CST);
}

void model_call_end(void) {
        __atomic_sub_fetch(&calls_under_way, 1, __ATOMIC_SEQ_CST);
}

/* The real runtime tears its contexts down in an atexit handler registered
 * when it initializes: after it has run, CUDA (and CUPTI with it) is gone,
 * although shared-library destructors still run later. */
static void teardown(void) {
        unsigned n;

        __atomic_store_n(&m.torn_down, true, __ATOMIC_SEQ_CST);
        n = __atomic_load_n(&calls_under_way, __ATOMIC_SEQ_CST);
        if (n > 0)
                fprintf(stderr, "fakecuda: the runtime tore down with %u calls under way on other threads\n", n);
}

bool fakecuda_torn_down(void) {
        return __atomic_load_n(&m.torn_down, __ATOMIC_ACQUIRE);
}

static void register_teardown(void) {
        atexit(teardown);
}

/* The runtime's first call: it registers its teardown then, as the real one
 * does when it initializes (the driver API alone registers none). */
void model_runtime_started(void) {
        static pthread_once_t once = PTHREAD_ONCE_INIT;

        pthread_once(&once, register_teardown);
}

/* FAKECUDA_HOST_NUMA_ID: one id for every device, or a comma list, one per
 * device (the last one repeats); default the last node. */
static void parse_host_numa_ids(const char *s) {
        long id = m.n_numa - 1;
        int d = 0;

        while (s && *s && d < MODEL_MAX_DEVICES) {
                char *end;

                errno = 0;
                id = strtol(s, &end, 10);
                if (errno || end == s || (*end && *end != ',') || id < -1 || id > 1024) {
                        fprintf(stderr, "fakecuda: invalid FAKECUDA_HOST_NUMA_ID=%s, ignoring.\n", s);
                        id = m.n_numa - 1;
                        d = 0;
                        break;
                }
                m.host_numa_id[d++] = (int)id;
                s = *end ? end + 1 : end;
        }
        for (; d < MODEL_MAX_DEVICES; d++)
                m.host_numa_id[d] = (int)id;
}

static void segv_install(void);

static void init_once(void) {
        const char *s;
        uint64_t total = DEFAULT_DEVICE_BYTES;

        pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
        segv_install();
        for (int d = 0; d < MODEL_MAX_DEVICES; d++)
                memcpy(primary_limits[d], ctx_limit_defaults, sizeof(ctx_limit_defaults));

        m.n_devices = (int)env_long("FAKECUDA_DEVICES", 1, 1, MODEL_MAX_DEVICES);
        m.n_numa = (int)env_long("FAKECUDA_NUMA_NODES", 1, 1, 1024);
        parse_host_numa_ids(getenv("FAKECUDA_HOST_NUMA_ID"));
        m.delay_us = (unsigned)env_long("FAKECUDA_PREFETCH_DELAY_US", 0, 0, 10000000);
        m.free_delay_us = (unsigned)env_long("FAKECUDA_FREE_DELAY_US", 0, 0, 10000000);
        m.event_delay_us = (unsigned)env_long("FAKECUDA_EVENT_DELAY_US", 0, 0, 10000000);
        m.advise_delay_us = (unsigned)env_long("FAKECUDA_ADVISE_DELAY_US", 0, 0, 10000000);
        m.misalign = env_flag("FAKECUDA_MANAGED_MISALIGN");
        m.fault_batch = env_flag("FAKECUDA_FAULT_BATCH");
        m.silent_evict = env_flag("FAKECUDA_SILENT_EVICT");
        s = getenv("FAKECUDA_MEM");
        if (s && *s && parse_size(s, &total) < 0) {
                fprintf(stderr, "fakecuda: invalid FAKECUDA_MEM=%s, ignoring.\n", s);
                total = DEFAULT_DEVICE_BYTES;
        }
        for (int d = 0; d < m.n_devices; d++)
                m.total_bytes[d] = (size_t)total;
        s = getenv("FAKECUDA_FAIL");
        if (s && *s)
                parse_fail(s);
        s = getenv("FAKECUDA_STATS");
        m.stats_path = s && *s ? strdup(s) : NULL;
        __atomic_store_n(&m.initialized, true, __ATOMIC_RELEASE);
}

void model_init(void) {
        pthread_once(&m.once, init_once);
}

bool model_enter(void) {
        model_init();
        return !m.forked;
}

static void lock(void) {
        model_init();
        pthread_mutex_lock(&m.lock);
        __atomic_store_n(&m.owner, pthread_self(), __ATOMIC_RELAXED);
        __atomic_store_n(&m.owned, true, __ATOMIC_RELEASE);
}

static void unlock(void) {
        __atomic_store_n(&m.owned, false, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&m.lock);
}

/* Whether the calling thread holds the lock. */
static bool lock_held_here(void) {
        return __atomic_load_n(&m.owned, __ATOMIC_ACQUIRE) &&
               pthread_equal(__atomic_load_n(&m.owner, __ATOMIC_RELAXED), pthread_self());
}

bool model_initialized(void) {
        return __atomic_load_n(&m.initialized, __ATOMIC_ACQUIRE);
}

int model_device_count(void) {
        model_init();
        return m.n_devices;
}

int model_numa_nodes(void) {
        model_init();
        return m.n_numa;
}

int model_host_numa_id(int dev) {
        model_init();
        return dev >= 0 && dev < MODEL_MAX_DEVICES ? m.host_numa_id[dev] : -1;
}

/* Moves a page's host copy to node numa (-1: the kernel's node) in the gauges. */
static void page_set_numa(struct page *p, int numa) {
        if (p->numa >= 0 && p->numa < MODEL_MAX_NUMA)
                m.numa_bytes[p->numa] -= MODEL_PAGE_BYTES;
        p->numa = (int8_t)(numa < MODEL_MAX_NUMA ? numa : -1);
        if (p->numa >= 0) {
                m.numa_bytes[p->numa] += MODEL_PAGE_BYTES;
                if (m.numa_bytes[p->numa] > m.numa_peak_bytes[p->numa])
                        m.numa_peak_bytes[p->numa] = m.numa_bytes[p->numa];
        }
}

void model_count_numa_location(int caller) {
        lock();
        m.stats[caller].numa_location_calls++;
        unlock();
}

unsigned model_prefetch_delay_us(void) {
        model_init();
        return m.delay_us;
}

unsigned model_event_delay_us(void) {
        model_init();
        return m.event_delay_us;
}

unsigned model_advise_delay_us(void) {
        model_init();
        return m.advise_delay_us;
}

unsigned model_free_delay_us(void) {
        model_init();
        return m.free_delay_us;
}

int model_current_device(void) {
        return current_device;
}

void model_set_current_device(int dev) {
        current_device = dev;
        current_ctx = 0;
}

int model_ctx_current(void) {
        return current_ctx ? current_ctx : -(1 + current_device);
}

bool model_ctx_alive(int key) {
        bool alive;

        if (key < 0)
                return -key - 1 < MODEL_MAX_DEVICES;
        if (key == 0 || key > MODEL_MAX_CTX)
                return false;
        lock();
        alive = ctxs[key].alive;
        unlock();
        return alive;
}

int model_ctx_create(int dev, int *ret_key) {
        int key = 0;

        model_init();
        if (dev < 0 || dev >= m.n_devices)
                return -ENODEV;
        if (model_fail_now(MODEL_FAIL_CTX_CREATE))
                return -ENOMEM;
        lock();
        if (next_ctx_key <= MODEL_MAX_CTX) {
                key = next_ctx_key++;
                ctxs[key].alive = true;
                ctxs[key].device = dev;
                memcpy(ctxs[key].limits, ctx_limit_defaults, sizeof(ctx_limit_defaults));
                m.stats[dev].ctx_created++;
        }
        unlock();
        if (!key)
                return -ENOMEM;
        current_ctx = key;
        current_device = dev;
        *ret_key = key;
        return 0;
}

int model_ctx_set_current(int key) {
        int dev = -1;

        if (key == 0) {
                current_ctx = 0;
                return 0;
        }
        if (key < 0 || key > MODEL_MAX_CTX)
                return -EINVAL;
        lock();
        if (ctxs[key].alive)
                dev = ctxs[key].device;
        unlock();
        if (dev < 0)
                return -EINVAL;
        current_ctx = key;
        current_device = dev;
        return 0;
}

int model_ctx_destroy(int key) {
        int r = -EINVAL;

        if (key <= 0 || key > MODEL_MAX_CTX)
                return -EINVAL;
        lock();
        if (ctxs[key].alive) {
                ctxs[key].alive = false;
                r = 0;
        }
        unlock();
        if (r == 0 && current_ctx == key)
                current_ctx = 0;
        return r;
}

/* The calling thread's current context's limits.  Under the lock. */
static size_t *current_limits(void) {
        return current_ctx ? ctxs[current_ctx].limits : primary_limits[current_device];
}

static bool limits_all_zero(const size_t *l) {
        for (int i = 0; i < MODEL_CTX_LIMITS; i++)
                if (l[i])
                        return false;
        return true;
}

int model_ctx_set_limit(int limit, size_t value) {
        size_t *l;
        bool was_low;

        if (limit < 0 || limit >= MODEL_CTX_LIMITS)
                return -EINVAL;
        lock();
        l = current_limits();
        was_low = limits_all_zero(l);
        l[limit] = value;
        if (current_ctx && !was_low && limits_all_zero(l))
                m.stats[ctxs[current_ctx].device].ctx_limits_lowered++;
        unlock();
        return 0;
}

int model_ctx_get_limit(int limit, size_t *ret) {
        if (limit < 0 || limit >= MODEL_CTX_LIMITS)
                return -EINVAL;
        lock();
        *ret = current_limits()[limit];
        unlock();
        return 0;
}

void model_host_prefetch_busy(int dev, int delta) {
        if (dev < 0 || dev >= MODEL_MAX_DEVICES)
                return;
        lock();
        host_prefetches_busy[dev] += delta;
        if ((uint64_t)host_prefetches_busy[dev] > m.stats[dev].host_prefetch_overlap_max)
                m.stats[dev].host_prefetch_overlap_max = (uint64_t)host_prefetches_busy[dev];
        unlock();
}

static pthread_mutex_t *ctx_lock_of(int key) {
        if (key < 0 && -key - 1 < MODEL_MAX_DEVICES)
                return &ctx_locks[-key - 1];
        if (key > 0 && key <= MODEL_MAX_CTX)
                return &ctx_locks[MODEL_MAX_DEVICES + key];
        return NULL;
}

void model_ctx_lock(int key) {
        pthread_mutex_t *l = ctx_lock_of(key);

        if (l)
                pthread_mutex_lock(l);
}

void model_ctx_unlock(int key) {
        pthread_mutex_t *l = ctx_lock_of(key);

        if (l)
                pthread_mutex_unlock(l);
}

bool model_fail_now(enum model_fail_kind kind) {
        struct fail_rule *r;
        bool fail;

        lock();
        r = &m.fail[kind];
        r->calls++;
        fail = r->nth != 0 && (r->calls == r->nth || (r->onward && r->calls > r->nth));
        unlock();
        return fail;
}

/* ---------------------------------------------------------------- allocations */

static struct alloc *alloc_find(uintptr_t addr) {
        for (size_t i = 0; i < m.n_allocs; i++) {
                struct alloc *a = m.allocs[i];
                if (addr >= a->base && addr - a->base < a->size)
                        return a;
        }
        return NULL;
}

/* The managed allocation holding all of [ptr, ptr+count), count > 0. */
static size_t page_index(const struct alloc *a, uintptr_t addr) {
        return (addr - (uintptr_t)a->raw) / MODEL_PAGE_BYTES;
}

/* The managed allocation holding all of [ptr, ptr+count), and the indices of
 * the first and last pages the range touches; NULL if there is none. */
static struct alloc *managed_find(const void *ptr, size_t count, size_t *ret_first, size_t *ret_last) {
        uintptr_t p = (uintptr_t)ptr;
        struct alloc *a;

        if (count == 0)
                return NULL;
        a = alloc_find(p);
        if (!a || !a->managed || count > a->size - (p - a->base))
                return NULL;
        *ret_first = page_index(a, p);
        *ret_last = page_index(a, p + count - 1);
        return a;
}

/* The managed allocation whose host backing holds addr (its 2 MiB pages,
 * including what lies around the range the application sees), or NULL. */
static struct alloc *managed_find_backing(uintptr_t addr) {
        for (size_t i = 0; i < m.n_allocs; i++) {
                struct alloc *a = m.allocs[i];
                if (a->managed && addr >= (uintptr_t)a->raw && addr - (uintptr_t)a->raw < a->raw_bytes)
                        return a;
        }
        return NULL;
}

static int alloc_add(struct alloc *a) {
        if (m.n_allocs == m.cap_allocs) {
                size_t cap = m.cap_allocs ? m.cap_allocs * 2 : 64;
                struct alloc **n = realloc(m.allocs, cap * sizeof(*n));
                if (!n)
                        return -ENOMEM;
                m.allocs = n;
                m.cap_allocs = cap;
        }
        m.allocs[m.n_allocs++] = a;
        return 0;
}

static void alloc_remove(struct alloc *a) {
        for (size_t i = 0; i < m.n_allocs; i++)
                if (m.allocs[i] == a) {
                        m.allocs[i] = m.allocs[--m.n_allocs];
                        return;
                }
}

static uint8_t *page_host(const struct alloc *a, size_t i) {
        return a->raw + i * MODEL_PAGE_BYTES;
}

/* ENOMEM (vm.max_map_count, memory): the model cannot go on faithfully. */
static _Noreturn void host_fail(const char *what) {
        fprintf(stderr, "fakecuda: failed to %s a managed page's host backing: %m\n", what);
        abort();
}

static void host_protect(struct alloc *a, size_t i, int prot) {
        struct page *p = &a->pages[i];

        if (p->prot == prot)
                return;
        if (mprotect(page_host(a, i), MODEL_PAGE_BYTES, prot) < 0)
                host_fail("protect");
        p->prot = (int8_t)prot;
}

/* The protection page p's residency calls for: no access while a device
 * holds the only copy, read-only beside a device's duplicate, read-write
 * while the host holds the only copy (or nobody touched the page). */
static int page_prot(const struct page *p) {
        return p->loc >= 0 ? PROT_NONE : p->dup >= 0 ? PROT_READ : PROT_RW;
}

/* Protects page i's host backing as its residency says. */
static void host_seal(struct alloc *a, size_t i) {
        host_protect(a, i, page_prot(&a->pages[i]));
}

/* Replaces page i's host backing with one holding src (poison if NULL),
 * protected as its residency says.  Other threads see the old backing (and
 * fault, then wait for the lock) or the new one, never a page half written:
 * the new one is filled aside and moved in by mremap. */
static void host_replace(struct alloc *a, size_t i, const uint8_t *src) {
        int prot = page_prot(&a->pages[i]);
        uint8_t *stage =
                mmap(NULL, MODEL_PAGE_BYTES, PROT_RW, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

        if (stage == MAP_FAILED)
                host_fail("stage");
        if (src)
                memcpy(stage, src, MODEL_PAGE_BYTES);
        else
                memset(stage, POISON_BYTE, MODEL_PAGE_BYTES);
        if (prot != PROT_RW && mprotect(stage, MODEL_PAGE_BYTES, prot) < 0)
                host_fail("protect");
        if (mremap(stage, MODEL_PAGE_BYTES, MODEL_PAGE_BYTES, MREMAP_MAYMOVE | MREMAP_FIXED,
                   page_host(a, i)) == MAP_FAILED)
                host_fail("replace");
        a->pages[i].prot = (int8_t)prot;
}

/* ---------------------------------------------------------------- residency */

static size_t managed_capacity(int dev) {
        size_t used = (size_t)m.stats[dev].device_alloc_bytes;
        return used < m.total_bytes[dev] ? m.total_bytes[dev] - used : 0;
}

static void resident_inc(int dev) {
        struct fakecuda_stats *s = &m.stats[dev];

        s->managed_resident_bytes += MODEL_PAGE_BYTES;
        if (s->managed_resident_bytes > s->managed_resident_peak_bytes)
                s->managed_resident_peak_bytes = s->managed_resident_bytes;
}

static void resident_dec(int dev) {
        m.stats[dev].managed_resident_bytes -= MODEL_PAGE_BYTES;
}

static bool page_on(const struct page *p, int dev) {
        return p->loc == dev || p->dup == dev;
}

/* Invalidates page i's read-only device duplicate, if any. */
static void page_drop_dup(struct alloc *a, size_t i) {
        struct page *p = &a->pages[i];

        if (p->dup < 0)
                return;
        resident_dec(p->dup);
        free(p->devcopy);
        p->devcopy = NULL;
        p->dup = -1;
        host_seal(a, i);
}

/* The driver maps host page i of a for dev, as accessed-by makes it, all
 * of it or (first_free) all but its first 4 KiB: one remote map. */
static void driver_maps(struct alloc *a, size_t i, bool first_free, int dev) {
        size_t skip = first_free ? 4096 : 0;

        um_event(UM_REMOTE_MAP, page_host(a, i) + skip, MODEL_PAGE_BYTES - skip, dev);
}

/* Migrates a device-resident page back to its host backing. */
static void page_to_host(struct alloc *a, size_t i) {
        struct page *p = &a->pages[i];
        uint8_t *data = p->devcopy;

        if (p->loc < 0)
                return;
        m.stats[p->loc].d2h_bytes += MODEL_PAGE_BYTES;
        um_event(UM_DTOH, page_host(a, i), MODEL_PAGE_BYTES, p->loc);
        resident_dec(p->loc);
        p->devcopy = NULL;
        p->loc = MODEL_LOC_HOST;
        p->mapped_by = 0; /* a new host page: no GPU maps it yet */
        p->sample_pref = p->sample_out = false;
        /* its first 4 KiB page unmapped (FAKECUDA_SILENT_EVICT: mapped, unseen) */
        p->rearmed = p->accessed_by && p->first_free && !m.silent_evict;
        host_replace(a, i, data);
        free(data);
        /* the driver maps it for the devices it is accessed by, as it goes */
        for (int d = 0; d < MODEL_MAX_DEVICES; d++)
                if (p->accessed_by & (1u << d))
                        driver_maps(a, i, p->first_free, d);
}

/* Evicts dev's least recently touched managed page other than keep. */
static int evict_lru(int dev, const struct page *keep) {
        struct alloc *victim_alloc = NULL;
        size_t victim = 0;
        uint64_t oldest = UINT64_MAX;

        for (size_t k = 0; k < m.n_allocs; k++) {
                struct alloc *a = m.allocs[k];
                for (size_t i = 0; a->managed && i < a->n_pages; i++) {
                        struct page *p = &a->pages[i];
                        if (p != keep && page_on(p, dev) && p->last_touch < oldest) {
                                oldest = p->last_touch;
                                victim_alloc = a;
                                victim = i;
                        }
                }
        }
        if (!victim_alloc)
                return -ENOMEM;
        if (victim_alloc->pages[victim].dup == dev)
                page_drop_dup(victim_alloc, victim);
        else
                page_to_host(victim_alloc, victim);
        m.stats[dev].evictions++;
        return 0;
}

/* Evicts until extra more bytes fit in dev's managed capacity. */
static int make_room(int dev, size_t extra, const struct page *keep) {
        while (m.stats[dev].managed_resident_bytes + extra > managed_capacity(dev)) {
                int r = evict_lru(dev, keep);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Copies page i to device dev: as a read-only duplicate (host stays valid,
 * read-only) or as a migration (host poisoned, no access).  Evicts for room
 * first. */
static int page_to_device(struct alloc *a, size_t i, int dev, bool duplicate) {
        struct page *p = &a->pages[i];
        uint8_t *buf;
        int r;

        if (p->loc == dev)
                return 0;
        if (p->dup == dev && duplicate)
                return 0;
        if (p->dup == dev) {
                /* collapse the duplicate onto dev */
                p->loc = dev;
                p->dup = -1;
                host_replace(a, i, NULL);
                return 0;
        }
        r = make_room(dev, MODEL_PAGE_BYTES, p);
        if (r < 0)
                return r;
        buf = malloc(MODEL_PAGE_BYTES);
        if (!buf)
                return -ENOMEM;
        page_to_host(a, i);
        page_drop_dup(a, i);
        host_protect(a, i, PROT_READ); /* writers fault and wait while the copy is taken */
        memcpy(buf, page_host(a, i), MODEL_PAGE_BYTES);
        m.stats[dev].h2d_bytes += MODEL_PAGE_BYTES;
        um_event(UM_HTOD, page_host(a, i), MODEL_PAGE_BYTES, dev);
        p->devcopy = buf;
        if (duplicate) {
                p->loc = MODEL_LOC_HOST;
                p->dup = (int8_t)dev;
                host_seal(a, i);
        } else {
                p->loc = (int8_t)dev;
                page_set_numa(p, -1);
                host_replace(a, i, NULL);
        }
        resident_inc(dev);
        return 0;
}

/* ---------------------------------------------------------------- allocation API */

int model_malloc(int dev, size_t size, void **ret) {
        size_t align = size >= MODEL_PAGE_BYTES ? MODEL_PAGE_BYTES : SMALL_ALIGN_BYTES;
        struct alloc *a;
        void *mem = NULL;
        int r;

        if (size == 0) {
                *ret = NULL;
                return 0;
        }
        lock();
        r = -ENOMEM;
        if (size > m.total_bytes[dev] - (size_t)m.stats[dev].device_alloc_bytes)
                goto out;
        a = calloc(1, sizeof(*a));
        if (!a)
                goto out;
        if (posix_memalign(&mem, align, size) != 0 || alloc_add(a) < 0) {
                free(mem);
                free(a);
                goto out;
        }
        *a = (struct alloc){.base = (uintptr_t)mem, .size = size, .raw = mem, .raw_bytes = size, .dev = dev};
        m.stats[dev].device_alloc_bytes += size;
        /* UVM gives way to cudaMalloc: evict managed pages that no longer fit */
        (void)make_room(dev, 0, NULL);
        *ret = mem;
        r = 0;
out:
        unlock();
        return r;
}

int model_malloc_managed(int dev, size_t size, void **ret) {
        size_t offset, raw_bytes, map_bytes, head;
        struct alloc *a;
        uint8_t *map;
        int r = -ENOMEM;

        if (size == 0)
                return -EINVAL;
        lock();
        offset = m.misalign ? MISALIGN_BYTES : 0;
        if (size > SIZE_MAX / 2)
                goto out;
        raw_bytes = ALIGN_UP_PAGE(size + offset);
        map_bytes = raw_bytes + MODEL_PAGE_BYTES;
        a = calloc(1, sizeof(*a));
        if (!a)
                goto out;
        a->n_pages = raw_bytes / MODEL_PAGE_BYTES;
        a->pages = calloc(a->n_pages, sizeof(*a->pages));
        map = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                   0);
        if (!a->pages || map == MAP_FAILED || alloc_add(a) < 0) {
                if (map != MAP_FAILED)
                        munmap(map, map_bytes);
                free(a->pages);
                free(a);
                goto out;
        }
        /* trim the mapping to a 2 MiB aligned raw_bytes */
        head = ALIGN_UP_PAGE((uintptr_t)map) - (uintptr_t)map;
        if (head > 0)
                munmap(map, head);
        munmap(map + head + raw_bytes, MODEL_PAGE_BYTES - head);
        a->raw = map + head;
        a->raw_bytes = raw_bytes;
        a->base = (uintptr_t)a->raw + offset;
        a->size = size;
        a->managed = true;
        a->dev = dev;
        for (size_t i = 0; i < a->n_pages; i++)
                a->pages[i] = (struct page){.loc = MODEL_LOC_NONE,
                                            .dup = -1,
                                            .preferred = MODEL_LOC_NONE,
                                            .numa = -1,
                                            .prot = PROT_RW};
        m.stats[dev].managed_alloc_bytes += size;
        m.stats[dev].managed_allocs++;
        *ret = (void *)a->base;
        r = 0;
out:
        unlock();
        return r;
}

int model_free(void *ptr) {
        struct alloc *a;
        int r = -EINVAL;

        lock();
        a = alloc_find((uintptr_t)ptr);
        if (!a || a->base != (uintptr_t)ptr)
                goto out;
        alloc_remove(a);
        if (a->managed) {
                for (size_t i = 0; i < a->n_pages; i++) {
                        struct page *p = &a->pages[i];
                        page_drop_dup(a, i);
                        page_set_numa(p, -1);
                        if (p->loc >= 0) {
                                resident_dec(p->loc);
                                free(p->devcopy);
                        }
                }
                m.stats[a->dev].managed_alloc_bytes -= a->size;
                munmap(a->raw, a->raw_bytes);
                free(a->pages);
        } else {
                m.stats[a->dev].device_alloc_bytes -= a->size;
                free(a->raw);
        }
        free(a);
        r = 0;
out:
        unlock();
        return r;
}

int model_mem_info(int dev, size_t *ret_free, size_t *ret_total) {
        lock();
        *ret_total = m.total_bytes[dev];
        *ret_free = m.total_bytes[dev] - (size_t)m.stats[dev].device_alloc_bytes;
        unlock();
        return 0;
}

/* ---------------------------------------------------------------- advice and prefetch */

/* Advice over page i of a; sub_page: over less than the page, first: over
 * its first 4 KiB page among the rest. */
static void page_advise(struct alloc *a, size_t i, int advice, int loc, bool sub_page, bool first) {
        struct page *p = &a->pages[i];

        if (sub_page && p->loc >= 0 && advice == cudaMemAdviseSetPreferredLocation && loc == MODEL_LOC_HOST) {
                p->sample_pref = true; /* that 4 KiB page only */
                return;
        }
        switch (advice) {
        case cudaMemAdviseSetReadMostly:
                p->read_mostly = true;
                break;
        case cudaMemAdviseUnsetReadMostly:
                /* CUDA collapses duplicates: onto the preferred location if a
                 * copy is there, else anywhere (here: the host); the GPU's
                 * mappings of a host page go with them */
                if (p->read_mostly) {
                        p->rearmed = p->accessed_by != 0 && p->loc == MODEL_LOC_HOST;
                        p->mapped_by = 0;
                }
                p->read_mostly = false;
                if (p->dup >= 0 && p->preferred == p->dup) {
                        p->loc = p->dup;
                        p->dup = -1;
                        host_replace(a, i, NULL);
                } else
                        page_drop_dup(a, i);
                break;
        case cudaMemAdviseSetPreferredLocation:
                p->preferred_numa = loc == MODEL_LOC_HOST_NUMA;
                p->preferred = (int8_t)(p->preferred_numa ? MODEL_LOC_HOST : loc);
                break;
        case cudaMemAdviseUnsetPreferredLocation:
                p->preferred = MODEL_LOC_NONE;
                p->preferred_numa = false;
                break;
        case cudaMemAdviseSetAccessedBy:
                if (loc < 0)
                        break;
                if (!(p->accessed_by & (1u << loc))) {
                        p->first_free = !first;
                        if (p->loc == MODEL_LOC_HOST) {
                                driver_maps(a, i, !first, loc);
                                p->rearmed = !first && !(p->mapped_by & (1u << loc));
                        }
                } else if (first)
                        p->first_free = false;
                p->accessed_by |= 1u << loc;
                break;
        case cudaMemAdviseUnsetAccessedBy:
                if (loc >= 0 && (p->accessed_by & (1u << loc))) {
                        /* the mapping the advice made stays */
                        p->accessed_by &= ~(1u << loc);
                        p->first_free = p->rearmed = false;
                        if (p->loc == MODEL_LOC_HOST && p->preferred == MODEL_LOC_HOST && !p->preferred_numa)
                                p->mapped_by |= 1u << loc;
                }
                break;
        }
}

/* Notes the edge at addr (inside page i of a, or on its border) of a
 * range advised; returns whether it split the block anew. */
static bool page_split_at(struct alloc *a, size_t i, uintptr_t addr) {
        size_t k = (addr - (uintptr_t)a->raw - i * MODEL_PAGE_BYTES) / 4096;
        uint64_t bit = 1ull << (k % 64), *w = &a->pages[i].split[k / 64];

        if (k == 0 || k >= MODEL_PAGE_BYTES / 4096 || (*w & bit))
                return false;
        *w |= bit;
        return true;
}

int model_advise(int caller, const void *ptr, size_t count, int advice, int loc) {
        struct alloc *a;
        size_t first, last;
        int r = -EINVAL;

        if (advice < cudaMemAdviseSetReadMostly || advice > cudaMemAdviseUnsetAccessedBy)
                return -EINVAL;
        lock();
        a = managed_find(ptr, count, &first, &last);
        if (!a)
                goto out;
        for (size_t i = first; i <= last; i++)
                page_advise(a, i, advice, loc, count < MODEL_PAGE_BYTES,
                            (uintptr_t)ptr < (uintptr_t)a->raw + i * MODEL_PAGE_BYTES + 4096);
        m.stats[caller].block_splits += page_split_at(a, first, (uintptr_t)ptr) +
                                        page_split_at(a, last, (uintptr_t)ptr + count);
        m.stats[caller].advise_calls++;
        r = 0;
out:
        unlock();
        return r;
}

static void page_touch(struct page *p) {
        p->last_touch = ++m.clock;
}

/* Prefetch of page i to the host: a read-mostly page keeps its device copy
 * as a duplicate. */
static bool page_prefetch_host(struct alloc *a, size_t i) {
        struct page *p = &a->pages[i];

        if (p->loc == MODEL_LOC_NONE)
                p->loc = MODEL_LOC_HOST;
        if (p->loc < 0)
                return false;
        if (!p->read_mostly) {
                page_to_host(a, i);
                return true;
        }
        m.stats[p->loc].d2h_bytes += MODEL_PAGE_BYTES;
        um_event(UM_DTOH, page_host(a, i), MODEL_PAGE_BYTES, p->loc);
        p->dup = p->loc;
        p->loc = MODEL_LOC_HOST;
        host_replace(a, i, p->devcopy);
        return true;
}

int model_prefetch(int caller, const void *ptr, size_t count, int loc, int numa, size_t *ret_pages_moved) {
        struct alloc *a;
        size_t first, last, moved = 0;
        int r = -EINVAL;

        lock();
        a = managed_find(ptr, count, &first, &last);
        if (!a)
                goto out;
        m.stats[caller].prefetch_calls++;
        m.stats[caller].prefetch_calls_created_ctx += current_ctx != 0;
        m.stats[caller].prefetch_to_device_created_ctx += current_ctx != 0 && loc >= 0;
        r = 0;
        for (size_t i = first; i <= last; i++) {
                struct page *p = &a->pages[i];

                /* less than a page to the host, where the 4 KiB page's preferred
                 * location is the host (advised for it, or for the whole page) */
                if (loc == MODEL_LOC_HOST && count < MODEL_PAGE_BYTES && p->loc >= 0 &&
                    (p->sample_pref || (p->preferred == MODEL_LOC_HOST && !p->preferred_numa)) && !p->read_mostly) {
                        if (!p->sample_out)
                                m.stats[p->loc].d2h_bytes += 4096;
                        p->sample_out = true; /* 4 KiB out, unmapped; the rest stays */
                        continue;
                }
                if (loc == MODEL_LOC_HOST) {
                        bool was_moved = page_prefetch_host(a, i);

                        moved += was_moved;
                        /* a named node takes the host copy; plain host leaves it where it is */
                        if (numa >= 0 || was_moved)
                                page_set_numa(p, numa);
                        continue;
                }
                if (!page_on(p, loc)) {
                        r = page_to_device(a, i, loc, p->read_mostly);
                        if (r < 0)
                                break;
                        moved++;
                }
                p->sample_pref = p->sample_out = false; /* its 4 KiB page back too */
                page_touch(p);
        }
out:
        unlock();
        *ret_pages_moved = moved;
        return r;
}

/* ---------------------------------------------------------------- host-side access */

/* Resolves host-side access at addr to real memory: *ret_ptr and the
 * contiguous bytes *ret_len there (at most remaining).  Plain host memory
 * only if allow_host. */
static int host_resolve(uintptr_t addr, size_t remaining, bool write, bool allow_host, uint8_t **ret_ptr,
                        size_t *ret_len) {
        struct alloc *a = alloc_find(addr);
        struct page *p;
        size_t i, in_page;

        if (!a) {
                if (!allow_host || managed_find_backing(addr))
                        return -EINVAL;
                *ret_ptr = (uint8_t *)addr;
                *ret_len = remaining;
                return 0;
        }
        if (remaining > a->size - (addr - a->base))
                return -EINVAL;
        if (!a->managed) {
                *ret_ptr = (uint8_t *)addr;
                *ret_len = remaining;
                return 0;
        }
        i = page_index(a, addr);
        p = &a->pages[i];
        in_page = addr - (uintptr_t)page_host(a, i);
        if (write)
                page_drop_dup(a, i);
        if (p->loc == MODEL_LOC_NONE)
                p->loc = MODEL_LOC_HOST;
        *ret_ptr = (p->loc >= 0 ? p->devcopy : page_host(a, i)) + in_page;
        *ret_len = remaining < MODEL_PAGE_BYTES - in_page ? remaining : MODEL_PAGE_BYTES - in_page;
        return 0;
}

int model_copy(void *dst, const void *src, size_t count) {
        uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
        int r = 0;

        lock();
        while (count > 0) {
                uint8_t *dp, *sp;
                size_t dn, sn, n;

                r = host_resolve(s, count, false, true, &sp, &sn);
                if (r < 0)
                        break;
                r = host_resolve(d, count, true, true, &dp, &dn);
                if (r < 0)
                        break;
                n = dn < sn ? dn : sn;
                memmove(dp, sp, n);
                d += n;
                s += n;
                count -= n;
        }
        unlock();
        return r;
}

int model_set(void *dst, int value, size_t count) {
        uintptr_t d = (uintptr_t)dst;
        int r = 0;

        lock();
        while (count > 0) {
                uint8_t *dp;
                size_t dn;

                r = host_resolve(d, count, true, false, &dp, &dn);
                if (r < 0)
                        break;
                memset(dp, value, dn);
                d += dn;
                count -= dn;
        }
        unlock();
        return r;
}

/* ---------------------------------------------------------------- CPU faults */

enum fault_access { FAULT_READ, FAULT_WRITE, FAULT_UNKNOWN };

/* Whether the faulting access was a write, where the context says (x86-64's
 * page-fault error code).  Elsewhere a write to a device-resident read-mostly
 * page faults twice: once to read it in beside its duplicate, once more to
 * drop the duplicate. */
static enum fault_access fault_access(const void *uc) {
#if defined(__x86_64__)
        return ((const ucontext_t *)uc)->uc_mcontext.gregs[REG_ERR] & 2 ? FAULT_WRITE : FAULT_READ;
#else
        (void)uc;
        return FAULT_UNKNOWN;
#endif
}

/* The CPU faulted at addr: serves the fault as UVM would if addr is in a
 * managed page's host backing, so that the access can be retried.  Returns
 * false if the fault is not the model's. */
static bool cpu_fault(uintptr_t addr, enum fault_access access, bool access_error) {
        static const char held_msg[] =
                "fakecuda: the model faulted on managed memory while holding its lock\n";
        struct alloc *a;
        struct page *p;
        bool served = true;
        size_t i;

        if (lock_held_here()) {
                /* a bug in the model: let the fault take its course */
                (void)!write(STDERR_FILENO, held_msg, sizeof(held_msg) - 1);
                return false;
        }
        lock();
        a = managed_find_backing(addr);
        if (!a) {
                served = false;
                goto out;
        }
        i = page_index(a, addr);
        p = &a->pages[i];
        if (p->loc >= 0) {
                int dev = p->loc;

                /* a read of a read-mostly page leaves a duplicate behind, as a prefetch does */
                if (p->read_mostly && access != FAULT_WRITE)
                        (void)page_prefetch_host(a, i);
                else
                        page_to_host(a, i);
                m.stats[dev].cpu_faults++;
        } else if (p->dup >= 0 && p->prot == PROT_READ && access != FAULT_READ) {
                m.stats[p->dup].cpu_faults++; /* a readable page faults on writes only */
                page_drop_dup(a, i);
        } else
                served = access_error && p->prot != PROT_NONE; /* raced a migration: retry */
out:
        unlock();
        return served;
}

/* Hands a fault that is not the model's to the action installed before. */
static void segv_chain(int sig, siginfo_t *info, void *uc) {
        const struct sigaction *old = &m.old_segv;

        if (!(old->sa_flags & SA_SIGINFO) && (old->sa_handler == SIG_DFL || old->sa_handler == SIG_IGN)) {
                /* the access faults again on return, and kills the process */
                struct sigaction dfl = {.sa_handler = SIG_DFL};

                sigemptyset(&dfl.sa_mask);
                sigaction(sig, &dfl, NULL);
                return;
        }
        if (old->sa_flags & SA_SIGINFO)
                old->sa_sigaction(sig, info, uc);
        else
                old->sa_handler(sig);
}

static void segv_handler(int sig, siginfo_t *info, void *uc) {
        int saved_errno = errno;
        bool served = cpu_fault((uintptr_t)info->si_addr, fault_access(uc), info->si_code == SEGV_ACCERR);

        errno = saved_errno;
        if (!served)
                segv_chain(sig, info, uc);
}

/* Installs the CPU fault handler once, at initialization; on the alternate
 * stack if the handler before it (AddressSanitizer's) used one. */
static void segv_install(void) {
        struct sigaction sa = {.sa_sigaction = segv_handler};

        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGSEGV, NULL, &m.old_segv) < 0) {
                fprintf(stderr, "fakecuda: failed to read the SIGSEGV action: %m\n");
                return;
        }
        sa.sa_flags = SA_SIGINFO | (m.old_segv.sa_flags & SA_ONSTACK);
        if (sigaction(SIGSEGV, &sa, NULL) < 0)
                fprintf(stderr, "fakecuda: failed to install the SIGSEGV handler: %m\n");
}

/* ---------------------------------------------------------------- kernels */

/* A GPU access by dev to page i: a hit, a remote access over the link
 * (SetAccessedBy dev and preferred elsewhere), or a fault that migrates
 * (or read-duplicates) the page to dev.  *ret_data: the copy to use. */
static int page_gpu_access(struct alloc *a, size_t i, int dev, bool write, size_t bytes,
                           uint8_t **ret_data) {
        struct page *p = &a->pages[i];
        int r;

        if (p->loc == dev || (p->dup == dev && !write)) {
                if (p->sample_out && p->loc == dev) {
                        /* the sampled 4 KiB page: a fault, and a remote map of it */
                        p->sample_out = false;
                        m.stats[dev].faults++;
                        um_event(UM_GPU_FAULT, page_host(a, i), 1, dev);
                        um_event(UM_REMOTE_MAP, page_host(a, i), 4096, dev);
                }
                page_touch(p);
                *ret_data = p->devcopy;
                return 0;
        }
        /* CUDA: "if the data is already in its preferred location and the
         * faulting processor can establish a mapping without requiring the
         * data to be migrated, then data migration will be avoided": a host
         * page preferred on the host faults once and is mapped. */
        if (p->preferred == MODEL_LOC_HOST && !p->preferred_numa &&
            (p->loc == MODEL_LOC_HOST || p->loc == MODEL_LOC_NONE) && !(p->mapped_by & (1u << dev)) &&
            !(p->accessed_by & (1u << dev))) {
                p->loc = MODEL_LOC_HOST; /* a page only the CPU touched is host memory */
                m.stats[dev].faults++;
                um_event(UM_GPU_FAULT, page_host(a, i), 1, dev);
                um_event(UM_REMOTE_MAP, page_host(a, i), MODEL_PAGE_BYTES, dev);
                p->mapped_by |= 1u << dev;
        }
        if (p->rearmed && (p->accessed_by & (1u << dev))) {
                p->rearmed = false;
                m.stats[dev].faults++;
                um_event(UM_GPU_FAULT, page_host(a, i), 1, dev);
                um_event(UM_REMOTE_MAP, page_host(a, i), MODEL_PAGE_BYTES, dev);
        }
        if (p->preferred != dev && !p->preferred_numa && ((p->accessed_by | p->mapped_by) & (1u << dev))) {
                m.stats[dev].remote_bytes += bytes;
                if (write)
                        page_drop_dup(a, i);
                if (p->loc == MODEL_LOC_NONE)
                        p->loc = MODEL_LOC_HOST;
                *ret_data = p->loc >= 0 ? p->devcopy : page_host(a, i);
                return 0;
        }
        m.stats[dev].faults++;
        um_event(UM_GPU_FAULT, page_host(a, i), 1, dev);
        r = page_to_device(a, i, dev, p->read_mostly && !write);
        if (r < 0)
                return r;
        page_touch(p);
        *ret_data = p->devcopy;
        return 0;
}

static void kernel_run(uint8_t *data, size_t len, uint64_t off, enum model_access access, uint64_t seed,
                       uint64_t *bad) {
        if (access == MODEL_ACCESS_READ)
                return;
        for (size_t o = 0; o < len; o += 8) {
                uint64_t want = backend_pattern(seed, off + o), w;

                if (access == MODEL_ACCESS_FILL)
                        memcpy(data + o, &want, sizeof(want));
                else {
                        memcpy(&w, data + o, sizeof(w));
                        *bad += w != want;
                }
        }
}

int model_kernel(int dev, void *ptr, size_t len, enum model_access access, uint64_t seed,
                 uint64_t *ret_bad_words) {
        uintptr_t p = (uintptr_t)ptr;
        bool write = access == MODEL_ACCESS_FILL;
        uint64_t bad = 0;
        struct alloc *a;
        int r = 0;

        if (len % 8 != 0 || p % 8 != 0)
                return -EINVAL;
        if (len == 0)
                goto done;
        lock();
        a = alloc_find(p);
        if (!a || len > a->size - (p - a->base)) {
                r = -EFAULT;
                goto out;
        }
        if (!a->managed) {
                kernel_run(ptr, len, 0, access, seed, &bad);
                goto out;
        }
        um_batch_begin(dev);
        for (size_t off = 0; off < len;) {
                size_t i = page_index(a, p + off);
                size_t in_page = p + off - (uintptr_t)page_host(a, i);
                size_t n = len - off < MODEL_PAGE_BYTES - in_page ? len - off : MODEL_PAGE_BYTES - in_page;
                uint8_t *data;

                r = page_gpu_access(a, i, dev, write, n, &data);
                if (r < 0)
                        break;
                kernel_run(data + in_page, n, off, access, seed, &bad);
                off += n;
        }
        um_batch_end();
out:
        unlock();
done:
        if (ret_bad_words)
                *ret_bad_words = bad;
        return r;
}

/* ---------------------------------------------------------------- introspection */

void model_um_record(int kind, uintptr_t addr, uint64_t value, int dev) {
        lock();
        um_emit(kind, addr, value, dev);
        unlock();
}

int model_get_stats(int dev, struct fakecuda_stats *ret) {
        lock();
        *ret = m.stats[dev];
        unlock();
        return 0;
}

int model_reset_stats(int dev) {
        struct fakecuda_stats *s;

        lock();
        s = &m.stats[dev];
        *s = (struct fakecuda_stats){
                .managed_resident_bytes = s->managed_resident_bytes,
                .managed_resident_peak_bytes = s->managed_resident_bytes,
                .device_alloc_bytes = s->device_alloc_bytes,
                .managed_alloc_bytes = s->managed_alloc_bytes,
        };
        unlock();
        return 0;
}

int model_resident_bytes(const void *ptr, size_t len, int dev, uint64_t *ret_bytes) {
        uintptr_t start = (uintptr_t)ptr, end = start + len;
        uint64_t bytes = 0;
        size_t first, last;
        struct alloc *a;
        int r = -EINVAL;

        lock();
        a = managed_find(ptr, len, &first, &last);
        if (!a)
                goto out;
        for (size_t i = first; i <= last; i++) {
                uintptr_t ps = (uintptr_t)page_host(a, i), pe = ps + MODEL_PAGE_BYTES;

                if (page_on(&a->pages[i], dev))
                        bytes += (pe < end ? pe : end) - (ps > start ? ps : start);
        }
        *ret_bytes = bytes;
        r = 0;
out:
        unlock();
        return r;
}

int model_page_info(const void *ptr, struct fakecuda_page_info *ret) {
        struct alloc *a;
        struct page *p;
        int r = -EINVAL;

        lock();
        a = alloc_find((uintptr_t)ptr);
        if (!a || !a->managed)
                goto out;
        p = &a->pages[page_index(a, (uintptr_t)ptr)];
        *ret = (struct fakecuda_page_info){
                .location = p->loc,
                .duplicate_device = p->dup,
                .preferred = p->preferred,
                .accessed_by = p->accessed_by,
                .read_mostly = p->read_mostly,
                .last_touch = p->last_touch,
        };
        r = 0;
out:
        unlock();
        return r;
}

/* At exit: one JSON line per device to FAKECUDA_STATS, for shell tests. */
static void __attribute__((destructor)) model_dump_stats(void) {
        int fd;

        if (!model_initialized() || !m.stats_path)
                return;
        fd = open(m.stats_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
                fprintf(stderr, "fakecuda: failed to open %s: %m\n", m.stats_path);
                return;
        }
        pthread_mutex_lock(&m.lock);
        for (int d = 0; d < m.n_devices; d++) {
                const struct fakecuda_stats *s = &m.stats[d];
                char line[2048];
                int n = snprintf(line, sizeof(line),
                                 "{\"pid\":%d,\"device\":%d,\"h2d_bytes\":%" PRIu64 ",\"d2h_bytes\":%" PRIu64
                                 ",\"remote_bytes\":%" PRIu64 ",\"faults\":%" PRIu64 ",\"cpu_faults\":%" PRIu64
                                 ",\"evictions\":%" PRIu64 ",\"managed_resident_bytes\":%" PRIu64
                                 ",\"managed_resident_peak_bytes\":%" PRIu64
                                 ",\"device_alloc_bytes\":%" PRIu64 ",\"managed_alloc_bytes\":%" PRIu64
                                 ",\"managed_allocs\":%" PRIu64 ",\"prefetch_calls\":%" PRIu64 ",\"prefetch_calls_created_ctx\":%" PRIu64
                                 ",\"prefetch_to_device_created_ctx\":%" PRIu64
                                 ",\"advise_calls\":%" PRIu64 ",\"block_splits\":%" PRIu64
                                 ",\"numa_location_calls\":%" PRIu64 ",\"ctx_created\":%" PRIu64
                                 ",\"ctx_limits_lowered\":%" PRIu64 ",\"host_prefetch_overlap_max\":%" PRIu64
                                 ",\"total_bytes\":%zu}\n",
                                 (int)getpid(), d, s->h2d_bytes, s->d2h_bytes, s->remote_bytes, s->faults,
                                 s->cpu_faults, s->evictions, s->managed_resident_bytes, s->managed_resident_peak_bytes,
                                 s->device_alloc_bytes, s->managed_alloc_bytes, s->managed_allocs, s->prefetch_calls,
                                 s->prefetch_calls_created_ctx, s->prefetch_to_device_created_ctx, s->advise_calls, s->block_splits, s->numa_location_calls, s->ctx_created, s->ctx_limits_lowered,
                                 s->host_prefetch_overlap_max, m.total_bytes[d]);
                if (n > 0 && (size_t)n < sizeof(line) && write(fd, line, (size_t)n) != n)
                        fprintf(stderr, "fakecuda: short write to %s\n", m.stats_path);
        }
        for (int n = 0; n < m.n_numa && n < MODEL_MAX_NUMA; n++) {
                char line[256];
                int k = snprintf(line, sizeof(line),
                                 "{\"pid\":%d,\"numa_node\":%d,\"host_bytes\":%" PRIu64 ",\"host_peak_bytes\":%" PRIu64
                                 "}\n",
                                 (int)getpid(), n, m.numa_bytes[n], m.numa_peak_bytes[n]);
                if (k > 0 && write(fd, line, (size_t)k) != k)
                        fprintf(stderr, "fakecuda: short write to %s\n", m.stats_path);
        }
        pthread_mutex_unlock(&m.lock);
        close(fd);
}
