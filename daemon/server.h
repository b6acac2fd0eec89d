/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The socket: listening (or socket-activated), peers identified by
 * SO_PEERCRED, the first message deciding the role (HELLO: shim, CTL_STATUS:
 * control), message dispatch into the registry, and non-blocking sends with a
 * per-peer queue.  A peer that breaks the protocol is dropped, never trusted.
 * What peers may hold is bounded ([daemon] keys): connections in all, per
 * uid and kept for root and the admin group; time to say HELLO; bytes
 * queued and time without reading; lines logged per uid.  When descriptors
 * run out, accepts pause instead of spinning.
 */

#include <stdbool.h>
#include <systemd/sd-event.h>

#include "conf.h"
#include "registry.h"
#include "status.h"

struct server;

/* Listens as listen_open() (listen.h) says, on listen_fd (the server's
 * then) or conf's socket path.  info must outlive the server.  conf changes
 * live through CTL_SET (control.h).  Returns 0, -EADDRINUSE when another
 * daemon answers on the path, or -errno (all logged). */
int server_new(sd_event *e, struct conf *conf, struct registry *r, const struct status_info *info,
               int listen_fd, struct server **ret);

/* Drops every peer (releasing its registry client), closes the socket and
 * unlinks it unless systemd owns it (a listen_fd's directory goes too, if
 * that leaves it empty).  Accepts NULL; returns NULL. */
struct server *server_free(struct server *s);

/* What the connection limits did so far (status.h); lives as long as s. */
const struct connection_stats *server_connection_stats(const struct server *s);

/* Reads peers' /proc/PID/cgroup under root instead of /proc (it must
 * outlive the server).  Before the event loop runs. */
void server_set_proc_root(struct server *s, const char *root);
/* Where /proc is read ("/proc" unless set). */
const char *server_proc_root(const struct server *s);

/* Serves SSD_HELLO connections with store (ssd.h; it must outlive the
 * server).  Before the event loop runs; without it they are refused. */
struct ssd_store;
void server_set_ssd_store(struct server *s, struct ssd_store *store);

/* The path listened on. */
const char *server_socket_path(const struct server *s);

/* planner_ops: whether a shim client's send queue is empty, and sending an
 * order (queued on EAGAIN; a broken peer is dropped later from the event loop). */
bool server_client_ready(struct client *c, void *userdata);
void server_send_order(struct client *c, const struct kvt_order *o, void *userdata);
void server_send_grant(struct client *c, const struct kvt_grant *g, void *userdata);
void server_send_pace(struct client *c, const struct kvt_pace *pc, void *userdata);

/* Calls fn(userdata) when a shim with a heat table sends DEMAND (faults were
 * counted), or a GRANT_ACK gives back room its grant held: the caller
 * replans (rate-limited as it sees fit). */
void server_set_demand_handler(struct server *s, void (*fn)(void *userdata), void *userdata);

/* Turns the counters of every shim's heat table into registry_chunk_touch()
 * calls; once per tick, before planning.  Returns 0 or -ENOMEM. */
int server_collect_heat(struct server *s);

/* status_info.client_heat: the counters of a client's heat table, or NULL. */
const struct heat_table_stats *server_client_heat(const struct client *c);
