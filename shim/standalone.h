/* SPDX-License-Identifier: MIT */
#pragma once

/* KVTIER_STANDALONE=1: returns the shim's end of a new connection to the
 * in-process policy thread (started on first use), as connect(2) to kvtierd
 * would.  Returns an fd or -errno. */
int standalone_connect(void);
