/* SPDX-License-Identifier: MIT */
/*
 * prom-lint: a strict check of the Prometheus text exposition format
 * (0.0.4) that `kvtierctl metrics` writes, for the suite where promtool is
 * not installed (ctl.sh runs promtool as well where it is).
 *
 *   prom-lint [--names] < FILE
 *
 * Checks: line syntax (names, labels, escapes, values); one HELP and one
 * TYPE per family, both before its samples; a family's samples together;
 * sample names that fit its type (counters end in _total; a histogram has
 * _bucket, _sum, _count); no series twice; histograms' le bounds rising to
 * +Inf, cumulative counts, _count equal to the +Inf bucket; counters not
 * negative; no blank line.  Prints each problem as "LINE: ..." to stderr.
 * --names prints the families' names, one a line, when there is none.
 *
 * Exit status: 0 valid, 1 a problem, 99 out of memory or a line too long.
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINE     4096
#define MAX_FAMILIES 512
#define MAX_SERIES   65536

struct family {
        char name[256];
        char type[16]; /* "" until its TYPE */
        bool help;
        bool sampled; /* samples seen */
        bool closed;  /* another family's samples came after its own */
};

/* One histogram series being read: its labels without le, its last bound and count. */
struct hist {
        char labels[MAX_LINE];
        double last_le;
        double last_count;
        bool inf_seen;
        double inf_count;
};

static struct family families[MAX_FAMILIES];
static size_t n_families;
static char *series[MAX_SERIES];
static size_t n_series;
static unsigned line_no, problems;

static void problem(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void problem(const char *fmt, ...) {
        va_list ap;

        fprintf(stderr, "%u: ", line_no);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        problems++;
}

static bool name_valid(const char *s, size_t n, bool label) {
        if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_' || (!label && s[0] == ':')))
                return false;
        for (size_t i = 1; i < n; i++)
                if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || (!label && s[i] == ':')))
                        return false;
        return !(label && n >= 2 && s[0] == '_' && s[1] == '_');
}

static struct family *family_find(const char *name) {
        for (size_t i = 0; i < n_families; i++)
                if (strcmp(families[i].name, name) == 0)
                        return &families[i];
        return NULL;
}

static struct family *family_get(const char *name) {
        struct family *f = family_find(name);

        if (f || n_families == MAX_FAMILIES)
                return f;
        f = &families[n_families++];
        snprintf(f->name, sizeof(f->name), "%.255s", name);
        return f;
}

/* "# HELP name text" and "# TYPE name type"; other comments pass. */
static void comment(char *line) {
        char *kind = line + 2, *name, *rest;
        struct family *f;

        if (strncmp(kind, "HELP ", 5) != 0 && strncmp(kind, "TYPE ", 5) != 0)
                return;
        name = kind + 5;
        rest = strchr(name, ' ');
        if (!rest) {
                problem("%s without a name and a text", kind[0] == 'H' ? "HELP" : "TYPE");
                return;
        }
        *rest++ = '\0';
        if (!name_valid(name, strlen(name), false)) {
                problem("bad metric name '%s'", name);
                return;
        }
        f = family_get(name);
        if (!f) {
                problem("too many families at '%s'", name);
                return;
        }
        if (f->sampled)
                problem("HELP or TYPE of '%s' after its samples", name);
        if (kind[0] == 'H') {
                if (f->help)
                        problem("second HELP of '%s'", name);
                if (!*rest)
                        problem("empty HELP of '%s'", name);
                f->help = true;
                return;
        }
        if (f->type[0])
                problem("second TYPE of '%s'", name);
        if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "histogram") &&
            strcmp(rest, "summary") && strcmp(rest, "untyped"))
                problem("unknown TYPE '%s'", rest);
        snprintf(f->type, sizeof(f->type), "%s", rest);
}

/* A value: a float as Go's ParseFloat takes it, NaN, +Inf or -Inf. */
static bool value_parse(const char *s, double *ret) {
        char *end;

        if (strcmp(s, "NaN") == 0 || strcmp(s, "+Inf") == 0 || strcmp(s, "-Inf") == 0) {
                *ret = s[0] == 'N' ? NAN : s[0] == '+' ? INFINITY : -INFINITY;
                return true;
        }
        if (!*s || isspace((unsigned char)*s))
                return false;
        *ret = strtod(s, &end);
        return *end == '\0' && !isnan(*ret) && !isinf(*ret);
}

/* Parses {a="x",b="y"} at *p: labels without le into out, le's value into
 * le (NULL when none).  Returns false on bad syntax (reported). */
static bool labels_parse(char **p, char *out, size_t len, char *le, size_t le_len, bool *ret_le) {
        char *s = *p + 1, names[64][128];
        size_t n_names = 0, o = 0;

        *ret_le = false;
        out[0] = '\0';
        while (*s != '}') {
                char *name = s, value[MAX_LINE];
                size_t nl, vl = 0;

                while (isalnum((unsigned char)*s) || *s == '_')
                        s++;
                nl = (size_t)(s - name);
                if (!name_valid(name, nl, true) || *s != '=' || s[1] != '"') {
                        problem("bad label in '%s'", name);
                        return false;
                }
                for (size_t i = 0; i < n_names; i++)
                        if (strlen(names[i]) == nl && strncmp(names[i], name, nl) == 0)
                                problem("label '%s' twice", names[i]);
                if (n_names < 64)
                        snprintf(names[n_names++], sizeof(names[0]), "%.*s", (int)nl, name);
                s += 2;
                while (*s != '"') {
                        if (!*s) {
                                problem("unterminated label value of '%s'", names[n_names - 1]);
                                return false;
                        }
                        if (*s == '\\') {
                                if (s[1] != '\\' && s[1] != '"' && s[1] != 'n') {
                                        problem("bad escape in the value of '%s'", names[n_names - 1]);
                                        return false;
                                }
                                value[vl++] = *s++;
                        }
                        value[vl++] = *s++;
                }
                value[vl] = '\0';
                s++;
                if (nl == 2 && strncmp(name, "le", 2) == 0) {
                        snprintf(le, le_len, "%.63s", value);
                        *ret_le = true;
                } else
                        o += (size_t)snprintf(out + o, o < len ? len - o : 0, "%.*s=\"%s\",", (int)nl, name,
                                              value);
                if (*s == ',')
                        s++;
                else if (*s != '}') {
                        problem("expected , or } after label '%s'", names[n_names - 1]);
                        return false;
                }
        }
        *p = s + 1;
        return true;
}

/* The family a sample name belongs to, given the families typed so far:
 * NAME_bucket, NAME_sum, NAME_count of a histogram (or summary) NAME. */
static struct family *sample_family(const char *name, const char **ret_suffix) {
        static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
        size_t n = strlen(name);
        char base[256];

        *ret_suffix = "";
        for (size_t i = 0; i < 3; i++) {
                size_t k = strlen(suffixes[i]);
                struct family *f;

                if (n <= k || strcmp(name + n - k, suffixes[i]) != 0 || n - k >= sizeof(base))
                        continue;
                snprintf(base, sizeof(base), "%.*s", (int)(n - k), name);
                f = family_find(base);
                if (f && (strcmp(f->type, "histogram") == 0 || strcmp(f->type, "summary") == 0)) {
                        *ret_suffix = suffixes[i];
                        return f;
                }
        }
        return family_find(name);
}

static void series_add(const char *name, const char *labels, const char *le) {
        size_t len = strlen(name) + strlen(labels) + strlen(le) + 8;
        char *key = malloc(len);

        if (!key)
                exit(99);
        snprintf(key, len, "%s{%s|%s}", name, labels, le);
        for (size_t i = 0; i < n_series; i++)
                if (strcmp(series[i], key) == 0) {
                        problem("series %s twice", key);
                        free(key);
                        return;
                }
        if (n_series == MAX_SERIES) {
                free(key);
                return;
        }
        series[n_series++] = key;
}

static struct family *last_family;
static struct hist hist;

/* Closes the histogram series being read: it must have reached +Inf. */
static void hist_end(void) {
        if (hist.labels[0] && !hist.inf_seen)
                problem("histogram series {%s} without a +Inf bucket", hist.labels);
        hist = (struct hist){0};
}

static void histogram_sample(const char *suffix, const char *labels, bool has_le, const char *le, double v) {
        double bound;

        if (strcmp(suffix, "_bucket") == 0) {
                if (!has_le || !value_parse(le, &bound)) {
                        problem("bucket without a valid le in {%s}", labels);
                        return;
                }
                if (strcmp(hist.labels, labels) != 0) {
                        hist_end();
                        snprintf(hist.labels, sizeof(hist.labels), "%s", labels);
                        hist.last_le = -INFINITY;
                        hist.last_count = 0;
                } else if (hist.inf_seen)
                        problem("bucket after +Inf in {%s}", labels);
                if (!(bound > hist.last_le))
                        problem("le bounds not rising in {%s}", labels);
                if (v < hist.last_count)
                        problem("bucket counts not cumulative in {%s}", labels);
                hist.last_le = bound;
                hist.last_count = v;
                if (isinf(bound)) {
                        hist.inf_seen = true;
                        hist.inf_count = v;
                }
                return;
        }
        if (has_le)
                problem("le label on a histogram's %s", suffix);
        if (strcmp(suffix, "_count") == 0 &&
            (!hist.inf_seen || strcmp(hist.labels, labels) != 0 || v != hist.inf_count))
                problem("_count of {%s} is not its +Inf bucket", labels);
}

static void sample(char *line) {
        char *p = line, name[256], labels[MAX_LINE] = "", le[64] = "";
        const char *suffix;
        struct family *f;
        bool has_le = false;
        double v;
        size_t n;

        while (*p && *p != '{' && *p != ' ')
                p++;
        n = (size_t)(p - line);
        if (!name_valid(line, n, false) || n >= sizeof(name)) {
                problem("bad metric name in '%s'", line);
                return;
        }
        snprintf(name, sizeof(name), "%.*s", (int)n, line);
        if (*p == '{' && !labels_parse(&p, labels, sizeof(labels), le, sizeof(le), &has_le))
                return;
        if (*p != ' ') {
                problem("expected a space before the value of '%s'", name);
                return;
        }
        p++;
        {
                char *ts = strchr(p, ' ');

                if (ts) { /* a timestamp: an integer of milliseconds */
                        *ts++ = '\0';
                        if (!*ts || strspn(ts + (*ts == '-'), "0123456789") != strlen(ts + (*ts == '-')))
                                problem("bad timestamp of '%s'", name);
                }
        }
        if (!value_parse(p, &v)) {
                problem("bad value '%s'", p);
                return;
        }
        f = sample_family(name, &suffix);
        if (!f || !f->type[0] || !f->help) {
                problem("sample of '%s' without HELP and TYPE before it", name);
                return;
        }
        if (f != last_family) {
                if (last_family)
                        last_family->closed = true;
                hist_end();
                if (f->closed)
                        problem("samples of '%s' not together", f->name);
                last_family = f;
        }
        f->sampled = true;
        if (strcmp(f->type, "counter") == 0) {
                n = strlen(name);
                if (n < 6 || strcmp(name + n - 6, "_total") != 0)
                        problem("counter '%s' does not end in _total", name);
                if (v < 0)
                        problem("counter '%s' below 0", name);
        }
        if (strcmp(f->type, "histogram") == 0) {
                if (!*suffix)
                        problem("histogram sample '%s' is not _bucket, _sum or _count", name);
                else
                        histogram_sample(suffix, labels, has_le, le, v);
        } else if (has_le && strcmp(f->type, "summary") != 0)
                problem("le label on the %s", f->type);
        series_add(name, labels, le);
}

int main(int argc, char **argv) {
        bool names = argc > 1 && strcmp(argv[1], "--names") == 0;
        char line[MAX_LINE];

        while (fgets(line, sizeof(line), stdin)) {
                size_t n = strlen(line);

                line_no++;
                if (n == 0 || line[n - 1] != '\n') {
                        problem("line too long or not ended by a newline");
                        return 99;
                }
                line[--n] = '\0';
                if (n == 0)
                        problem("blank line");
                else if (line[0] == '#')
                        comment(line);
                else
                        sample(line);
        }
        hist_end();
        if (line_no == 0)
                problem("no input");
        if (names && !problems)
                for (size_t i = 0; i < n_families; i++)
                        printf("%s\n", families[i].name);
        for (size_t i = 0; i < n_series; i++)
                free(series[i]);
        return problems ? 1 : 0;
}
