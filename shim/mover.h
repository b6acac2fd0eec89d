/* SPDX-License-Identifier: MIT */
#pragma once

/* Starts the mover thread.  For each connection client_next_connection()
 * gives it, it first registers the regions the daemon does not know (after
 * returning them to host memory, since the daemon's books start there), then
 * reads the daemon's orders, carries each out on the region's device with
 * cudaMemAdvise and cudaMemPrefetchAsync on its own non-blocking stream, and
 * replies ORDER_DONE.  Returns 0 or -errno. */
int mover_start(void);
