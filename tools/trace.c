/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

/* Region id -> declaration index of the live region with that id. */
struct live_map {
        uint32_t *ids, *decl;
        size_t n, cap;
};

struct loader {
        struct trace *t;
        struct live_map live;
        const char *name;
        unsigned line;
        uint64_t last_ns;
        size_t cap_events, cap_regions;
        char *err;
        size_t errlen;
};

static int fail(struct loader *l, const char *fmt, ...) {
        va_list ap;
        int n = snprintf(l->err, l->errlen, "%s:%u: ", l->name, l->line);

        va_start(ap, fmt);
        if (n >= 0 && (size_t)n < l->errlen)
                vsnprintf(l->err + n, l->errlen - (size_t)n, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

static ssize_t live_find(const struct live_map *m, uint32_t id) {
        for (size_t i = 0; i < m->n; i++)
                if (m->ids[i] == id)
                        return (ssize_t)i;
        return -1;
}

static int grow(void **a, size_t *cap, size_t want, size_t elem) {
        size_t n = *cap ? *cap : 256;
        void *p;

        if (want <= *cap)
                return 0;
        while (n < want)
                n *= 2;
        p = realloc(*a, n * elem);
        if (!p)
                return -ENOMEM;
        *a = p;
        *cap = n;
        return 0;
}

/* Parses n unsigned decimal fields after the op letter, the last n_opt of
 * them optional (left as they are when absent).  Returns 0 or -EINVAL. */
static int fields(struct loader *l, const char *s, uint64_t *v, int n, int n_opt) {
        for (int i = 0; i < n; i++) {
                char *end;

                while (*s == ' ' || *s == '\t')
                        s++;
                if (i >= n - n_opt && (*s == '\0' || *s == '\r' || *s == '\n'))
                        break;
                if (!isdigit((unsigned char)*s))
                        return fail(l, "expected %d unsigned numbers", n - n_opt);
                errno = 0;
                v[i] = strtoull(s, &end, 10);
                if (errno)
                        return fail(l, "number out of range");
                s = end;
        }
        while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
                s++;
        return *s ? fail(l, "trailing text \"%.20s\"", s) : 0;
}

static int push(struct loader *l, const struct trace_event *e) {
        if (grow((void **)&l->t->events, &l->cap_events, l->t->n_events + 1, sizeof(*e)) < 0)
                return -ENOMEM;
        l->t->events[l->t->n_events++] = *e;
        return 0;
}

static int on_region(struct loader *l, const uint64_t *v) {
        struct trace *t = l->t;
        uint32_t idx = (uint32_t)t->n_regions;

        if (v[1] == 0 || v[1] > TRACE_MAX_REGION_CHUNKS)
                return fail(l, "region size %" PRIu64 " chunks is not in 1..%u", v[1], TRACE_MAX_REGION_CHUNKS);
        if (v[0] > UINT32_MAX)
                return fail(l, "region id %" PRIu64 " is not a 32-bit number", v[0]);
        if (live_find(&l->live, (uint32_t)v[0]) >= 0)
                return fail(l, "region %" PRIu64 " is declared twice while live", v[0]);
        if (grow((void **)&t->region_chunks, &l->cap_regions, idx + 1u, sizeof(*t->region_chunks)) < 0 ||
            grow((void **)&l->live.ids, &l->live.cap, l->live.n + 1, sizeof(uint32_t)) < 0)
                return -ENOMEM;
        l->live.decl = realloc(l->live.decl, l->live.cap * sizeof(uint32_t));
        if (!l->live.decl)
                return -ENOMEM;
        l->live.ids[l->live.n] = (uint32_t)v[0];
        l->live.decl[l->live.n++] = idx;
        t->region_chunks[idx] = (uint32_t)v[1];
        t->n_regions++;
        t->total_chunks += v[1];
        return push(l, &(struct trace_event){
                               .time_ns = l->last_ns, .op = TRACE_REGION, .region = idx, .n_chunks = (uint32_t)v[1]});
}

static int on_time(struct loader *l, uint64_t ns) {
        if (ns < l->last_ns)
                return fail(l, "time %" PRIu64 " goes back (previous %" PRIu64 ")", ns, l->last_ns);
        l->last_ns = ns;
        return 0;
}

static int on_access(struct loader *l, const uint64_t *v) {
        ssize_t at;
        uint32_t idx, size;

        if (on_time(l, v[0]) < 0)
                return -EINVAL;
        at = v[1] <= UINT32_MAX ? live_find(&l->live, (uint32_t)v[1]) : -1;
        if (at < 0)
                return fail(l, "access to region %" PRIu64 ", which is not declared (or freed)", v[1]);
        idx = l->live.decl[at];
        size = l->t->region_chunks[idx];
        if (v[3] == 0 || v[2] >= size || v[3] > size - v[2])
                return fail(l, "chunks %" PRIu64 "+%" PRIu64 " are outside region %" PRIu64 " of %u chunks",
                            v[2], v[3], v[1], size);
        if (v[4] == 0 || v[4] > TRACE_CHUNK_BYTES)
                return fail(l, "bytes per chunk %" PRIu64 " is not in 1..%u", v[4], TRACE_CHUNK_BYTES);
        l->t->n_chunk_accesses += v[3];
        return push(l, &(struct trace_event){.time_ns = v[0],
                                             .op = TRACE_ACCESS,
                                             .region = idx,
                                             .first_chunk = (uint32_t)v[2],
                                             .n_chunks = (uint32_t)v[3],
                                             .bytes = (uint32_t)v[4]});
}

static int on_free(struct loader *l, const uint64_t *v) {
        ssize_t at;
        uint32_t idx;

        if (on_time(l, v[0]) < 0)
                return -EINVAL;
        at = v[1] <= UINT32_MAX ? live_find(&l->live, (uint32_t)v[1]) : -1;
        if (at < 0)
                return fail(l, "free of region %" PRIu64 ", which is not live", v[1]);
        idx = l->live.decl[at];
        l->live.ids[at] = l->live.ids[l->live.n - 1];
        l->live.decl[at] = l->live.decl[--l->live.n];
        return push(l, &(struct trace_event){.time_ns = v[0], .op = TRACE_FREE, .region = idx});
}

static int on_line(struct loader *l, const char *s) {
        uint64_t v[5] = {0, 0, 0, 0, TRACE_CHUNK_BYTES};
        int r;

        while (*s == ' ' || *s == '\t')
                s++;
        if (*s == '#' || *s == '\0' || *s == '\n' || *s == '\r')
                return 0;
        switch (*s) {
        case 'R':
                r = fields(l, s + 1, v, 2, 0);
                return r < 0 ? r : on_region(l, v);
        case 'A':
                r = fields(l, s + 1, v, 5, 1);
                return r < 0 ? r : on_access(l, v);
        case 'F':
                r = fields(l, s + 1, v, 2, 0);
                return r < 0 ? r : on_free(l, v);
        }
        return fail(l, "unknown record \"%.20s\" (expected R, A, F or #)", s);
}

int trace_load(FILE *f, const char *name, struct trace *ret, char *err, size_t errlen) {
        struct loader l = {.t = ret, .name = name, .err = err, .errlen = errlen};
        char *buf = NULL;
        size_t cap = 0;
        ssize_t n;
        int r = 0;

        *ret = (struct trace){0};
        while ((n = getline(&buf, &cap, f)) >= 0) {
                l.line++;
                if (l.line == 1) {
                        if (strcmp(buf, "kvtier-trace 1\n") != 0 && strcmp(buf, "kvtier-trace 1") != 0) {
                                r = fail(&l, "not a kvtier trace: the first line must be \"kvtier-trace 1\"");
                                break;
                        }
                        continue;
                }
                if (strlen(buf) != (size_t)n) {
                        r = fail(&l, "NUL byte in line");
                        break;
                }
                r = on_line(&l, buf);
                if (r < 0)
                        break;
        }
        if (r == 0 && l.line == 0)
                r = fail(&l, "empty file");
        if (r == -ENOMEM)
                snprintf(err, errlen, "%s: out of memory", name);
        free(buf);
        free(l.live.ids);
        free(l.live.decl);
        if (r < 0)
                trace_free(ret);
        return r;
}

void trace_free(struct trace *t) {
        if (!t)
                return;
        free(t->events);
        free(t->region_chunks);
        *t = (struct trace){0};
}
