/* SPDX-License-Identifier: MIT */
/*
 * Prints kvtierd's configuration table, one key a line, tab-separated:
 * section, key, values, default, help.  The build renders it into
 * kvtierd.conf(5) (man/man-table.awk), so the man page lists what the
 * daemon parses.  The table is static in daemon/conf.c: this file includes
 * conf.c to read it rather than widening conf.h for a build tool.
 */
#include "conf.c"

/* A key's values: its type's words and, for numbers, its range. */
static void key_values(const struct conf_key *k, char *buf, size_t len) {
        char lo[32], hi[32];

        if (k->type == CONF_UINT) {
                snprintf(buf, len, "an integer, %" PRIu64 "..%" PRIu64, k->min, k->max);
                return;
        }
        if (k->type == CONF_BYTES || k->type == CONF_BUDGET || k->type == CONF_NODE_BUDGET) {
                format_bytes_exact(lo, sizeof(lo), k->min);
                format_bytes_exact(hi, sizeof(hi), k->max);
                snprintf(buf, len, "%s; %s..%s", type_hint(k), lo, hi);
                return;
        }
        snprintf(buf, len, "%s", type_hint(k));
}

int main(void) {
        char values[256];

        for (size_t i = 0; i < ELEMENTSOF(conf_table); i++) {
                const struct conf_key *k = &conf_table[i];

                key_values(k, values, sizeof(values));
                printf("%s\t%s\t%s\t%s\t%s\n", k->section, k->key, values, k->def ? k->def : "unset",
                       k->help);
        }
        return ferror(stdout) || fflush(stdout) ? 1 : 0;
}
