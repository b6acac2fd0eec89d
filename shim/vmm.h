/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * VMM mappings (cuMemMap) tracked as untiered regions (vmm.c).  Like the
 * captured regions, they are registered again with each new daemon.
 */

#include <stddef.h>

/* The number of tracked mappings. */
size_t vmm_count(void);

/* The daemon is gone: no tracked mapping is registered any more. */
void vmm_forget_registration(void);

/* Registers every tracked mapping the daemon on fd does not know; returns
 * how many, or -errno when a send fails (the rest wait for the next
 * connection). */
int vmm_register(int fd);
