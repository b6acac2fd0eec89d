/* SPDX-License-Identifier: MIT */
#pragma once

/* KVTIER_STANDALONE=1, under the client's lock: the socket of this
 * process's own kvtierd, started on the first call (standalone.c), for the
 * client to connect to as to any daemon; *ret_timeout_ms is raised for the
 * first handshake with a daemon just started, left as it is otherwise.
 * Returns 0, or -errno when there is no daemon and will be none (kvtierd not
 * found or not started, or gone: the caller fails open). */
int standalone_daemon(const char **ret_socket_path, int *ret_timeout_ms);

/* What the client's messages name: the daemon's socket, or the kvtierd
 * that could not be found or started. */
const char *standalone_where(void);

/* From the client's fork handler: a child connects to the parent's daemon,
 * if there is one, as a client of its own, but neither holds it up nor
 * reaps it. */
void standalone_atfork_child(void);
