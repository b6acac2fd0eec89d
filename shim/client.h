/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvt_region_add;

/* Makes sure a daemon connection exists, connecting (HELLO, WELCOME, the
 * mover thread started or woken) when none does and the back-off has passed.
 * Never waits longer than the configured timeout (KVTIER_TIMEOUT_MS).  Returns 0 when connected,
 * -errno otherwise (logged once per outage). */
int client_ensure(void);

/* Sends one message on the current connection, waiting at most
 * the configured timeout (KVTIER_TIMEOUT_MS) for room.  A failure drops the connection.
 * Returns 0, -ENOTCONN or -errno. */
int client_send(uint16_t type, const void *payload, size_t len);

/* As client_send(), but only if fd is still the current connection (the
 * mover replies on the connection its order came from). */
int client_send_on(int fd, uint16_t type, const void *payload, size_t len);
/* Sends a REGION_ADD on fd (-1: the current connection) if that connection
 * is of generation gen (0: any; a start in VRAM names the connection its
 * grant came from: client_grant_take()), else fails with -ENOTCONN.  Once
 * it is sent, calls mark(region_id) before any lost connection can be
 * noticed, so the caller's "registered" flag is never left set for a
 * daemon that is gone.  mark runs with the client's lock held: it may take
 * only its own table's lock. */
int client_register(int fd, uint64_t gen, const struct kvt_region_add *add, void (*mark)(uint32_t region_id));

/* For the mover: waits for a connection and returns its fd, connecting in
 * the background (once per back-off period) while captured regions exist.
 * Returns -1 when there is no connection and nothing left to tier: the
 * mover then ends, and the next capture starts a new one. */
int client_next_connection(void);

/* The mover saw fd fail or close: drop it if it is still current. */
void client_lost(int fd, int err);

/* Takes bytes from the current connection's VRAM grant for device dev.
 * Returns the connection's generation (never 0) if they fit (a capture may
 * start there), 0 otherwise or when not connected. */
uint64_t client_grant_take(int dev, uint64_t bytes);
/* Gives back bytes taken from the grant of connection gen for a capture
 * that did not start after all (nothing, if that connection is gone). */
void client_grant_return(uint64_t gen, int dev, uint64_t bytes);
/* Whether the connection of generation gen is still the current one. */
bool client_grant_current(uint64_t gen);

/* A GRANT that came on fd: the new cap, if fd is still current, and its
 * GRANT_ACK with the bytes taken from the connection's grants so far (a
 * failed send drops the connection). */
struct kvt_grant;
void client_grant_set(int fd, const struct kvt_grant *g);

/* Tells the daemon that faults were counted into the heat table (DEMAND),
 * without waiting for room on the socket. */
void client_demand(void);

/* Records the total memory of device dev and its home host NUMA node (-1:
 * unknown), learnt on a thread whose current device it is, so that a
 * DEVICE message can announce them.  Call before the first REGION_ADD on
 * dev. */
void client_note_device(int dev, uint64_t total_bytes, int host_node);
bool client_device_noted(int dev);
/* How many GPUs this process has captured on. */
unsigned client_devices_noted(void);
/* The ceiling of what this process may capture, like a real GPU's size:
 * the VRAM budget plus the host memory the daemon granted in its last
 * WELCOME.  Whether captured_bytes (this allocation's included) goes past
 * it; never before a daemon has said.  The first refusal is logged, then
 * every 1024th. */
bool client_ceiling_refuses(uint64_t captured_bytes, size_t size);
/* For KVTIER_CAPACITY=auto: the VRAM budget plus the host memory the
 * daemon granted, connecting first if needed (at most the timeout).
 * Returns 0, or -ENOTCONN / -ENODATA when no daemon said. */
int client_capacity(uint64_t *ret_bytes);

/* Whether a daemon has welcomed this process: once it has, an outage is
 * the daemon restarting, not kvtier being absent. */
bool client_was_welcomed(void);

/* Starts the mover if none runs and a daemon has welcomed this process:
 * something was captured or mapped while no daemon answered, and only the
 * mover registers it with the next one. */
void client_kick_mover(void);

/* In the child of fork(): it has no mover thread and must not speak for
 * the parent: it forgets the connection (the parent keeps it open) and
 * connects on its own if it allocates. */
void client_atfork_child(void);
