/* SPDX-License-Identifier: MIT */
#pragma once

/* Starts the mover thread.  For each connection client_next_connection()
 * gives it, it first registers the regions the daemon does not know (after
 * returning them to host memory, since the daemon's books start there), then
 * reads the daemon's orders in batches and hands them to the pipeline
 * (pipeline.h), which coalesces adjacent ones, promotes on its own
 * non-blocking streams and evicts on its evictor threads, several runs at
 * once, and reports each with ORDER_DONE when its run completes.  Returns
 * 0 or -errno. */
int mover_start(void);
