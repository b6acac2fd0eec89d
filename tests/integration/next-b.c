/* SPDX-License-Identifier: MIT */
const char *probe_name(void);

const char *probe_name(void) {
        return "b";
}
