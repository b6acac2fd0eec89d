/* SPDX-License-Identifier: MIT */
#pragma once

/* The SSD tier's client side (ssd.c; its API is include/kvtier.h's). */

/* In the child of fork(): forgets the parent's connection, staging buffer
 * and spills. */
void ssd_atfork_child(void);
