/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The SSD tier's store: the files under [ssd] dir, the quotas per client and
 * per uid, the blocks of every spill with their checksums, and one thread per
 * client connection that serves its requests (SSD_OPEN, _WRITE, _READ,
 * _DROP) between the client's staging memfd and its book (ssd-book.h: a
 * data file and an index), and answers each with SSD_REPLY.
 *
 * Spills outlive the daemon, not their client: a session whose client
 * ends (its connection closes while kvtierd runs) deletes its files; a
 * daemon that stops (ssd_store_stop()) or dies leaves them, and the next
 * one's sweep at start deletes those of processes that ended meanwhile and
 * keeps the others for [ssd] reattach_grace seconds.  A client that
 * reconnects with the token SSD_WELCOME gave it, from the uid and pid that
 * made the spills, gets them back under the same handles.
 *
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
 * (0700) where missing, then swept (files an earlier kvtierd left: deleted
 * or kept, processes read under proc_root, "/proc").  A directory that
 * cannot be used leaves the tier off (logged once): sessions then answer
 * -ENOSYS.  Returns 0 or -ENOMEM. */
int ssd_store_new(const struct conf *conf, const char *proc_root, struct ssd_store **ret);

/* The daemon stops: sessions freed from now on, whose clients are still
 * connected, keep their files for the next kvtierd.  Accepts NULL. */
void ssd_store_stop(struct ssd_store *s);

/* Deletes the kept books whose grace ended by now (CLOCK_MONOTONIC ns).
 * Returns when the next one ends, or 0 for none left. */
uint64_t ssd_store_expire(struct ssd_store *s, uint64_t now);

/* Frees the store; kept books not re-attached stay on disk.  Accepts NULL;
 * returns NULL.  Every session must be freed first. */
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
 * quota and deletes its files, unless the store is stopping and the
 * client still there (then they stay).  Accepts NULL. */
void ssd_session_free(struct ssd_session *ss);
