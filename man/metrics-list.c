/* SPDX-License-Identifier: MIT */
/*
 * Prints every metric kvtierctl metrics can write, as "name<TAB>type<TAB>help"
 * lines: tools/metrics.c itself run on a status document that has every
 * section and no GPU, node or client, so that each family's HELP and TYPE
 * come out once.  The build renders them into kvtierctl(1).
 */
#include "config.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

int main(void) {
        struct json_object *st = json_tokener_parse(
                "{\"gpus\": [], \"nodes\": [], \"clients\": [], \"migrations\": {}, \"connections\": {},"
                " \"ssd\": {\"clients\": [], \"totals\": {}}}");
        char *text = NULL, name[128], help[1024], type[32], *line, *save = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);

        if (!st || !f)
                return 1;
        metrics_print(f, st);
        if (fclose(f) != 0)
                return 1;
        /* The exposition has "# HELP name text" then "# TYPE name type" for each family. */
        name[0] = help[0] = '\0';
        for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                if (sscanf(line, "# HELP %127s %1023[^\n]", name, help) == 2)
                        continue;
                if (sscanf(line, "# TYPE %*s %31s", type) == 1)
                        printf("%s\t%s\t%s\n", name, type, help);
        }
        free(text);
        json_object_put(st);
        return ferror(stdout) ? 1 : 0;
}
