/* SPDX-License-Identifier: MIT */
#pragma once

/* Starts the mover thread for a fresh daemon connection: it reads the
 * daemon's orders from fd, carries each out on the region's device with
 * cudaMemAdvise and cudaMemPrefetchAsync on its own non-blocking stream, and
 * replies ORDER_DONE.  It ends when fd fails.  Returns 0 or -errno. */
int mover_start(int fd);
