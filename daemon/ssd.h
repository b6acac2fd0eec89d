/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The SSD tier's store: the files under [ssd] dir, the quotas per client and
 * per uid, the blocks of every spill with their checksums, and one thread per
 * client connection that serves its requests (SSD_OPEN, _WRITE, _READ,
 * _DROP) between the client's staging memfd and its file, and answers each
 * with SSD_REPLY.  A client's file is unlinked from the start and closed
 * when its connection ends, however it ends: nothing of a dead client stays.
 * The event loop only hands the connection over and frees the session
 * once its done_fd is readable.
 */

#include <stdint.h>
#include <sys/types.h>

#include "conf.h"
#include "protocol.h"

struct ssd_store;
struct ssd_session;

/* Opens the store with conf's [ssd] settings: the directory is created
 * (0700) where missing.  A directory that cannot be used leaves the tier off
 * (logged once): sessions then answer -ENOSYS.  Returns 0 or -ENOMEM. */
int ssd_store_new(const struct conf *conf, struct ssd_store **ret);

/* Ends every session (their threads are joined by ssd_session_free()).
 * Accepts NULL; returns NULL.  Every session must be freed first. */
struct ssd_store *ssd_store_free(struct ssd_store *s);

/* The status document's "ssd" object (a json_object *, the caller's). */
void *ssd_store_json(const void *store);

/* Starts serving a connection whose first message was SSD_HELLO: sock is
 * the connection (duplicated here; the caller keeps its own), staging_fd the
 * memfd that came with it (taken, closed on every path).  Returns 0, or
 * -EINVAL (a staging buffer that is not a sealed memfd of the size said),
 * -ENOMEM, -errno. */
int ssd_session_new(struct ssd_store *s, pid_t pid, uint32_t uid, int sock, int staging_fd,
                    const struct kvt_ssd_hello *h, struct ssd_session **ret);

/* Readable once the session's thread has ended (the client left or broke
 * the protocol); then ssd_session_free() does not wait. */
int ssd_session_done_fd(const struct ssd_session *ss);

/* Stops the session (waiting for the request in progress), releases its
 * file and quota.  Accepts NULL. */
void ssd_session_free(struct ssd_session *ss);
