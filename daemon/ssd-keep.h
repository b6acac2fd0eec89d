/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The books (ssd-book.h) an earlier kvtierd left in [ssd] dir whose
 * processes still run, waiting for them to reconnect: the sweep at start
 * fills the list (and deletes the books of processes that ended: a pid
 * gone, or reused since, by its start time), a client that presents a
 * book's token from the uid and pid that made it takes the book back, and
 * those not taken within [ssd] reattach_grace are deleted.  A kept book's
 * bytes count against its uid's quota: the store is told of every change
 * through the count callback.  Not thread-safe: the store calls it under
 * its lock.
 */

#include <json-c/json.h>
#include <stdint.h>
#include <sys/types.h>

#include "protocol.h"
#include "ssd-book.h"

struct ssd_keep;

/* The store's quota books: bytes (negative: given back) of uid. */
typedef void (*ssd_keep_count_fn)(void *ctx, uint32_t uid, int64_t bytes);

/* An empty list whose books wait grace_s seconds.  Returns 0 or -ENOMEM. */
int ssd_keep_new(unsigned grace_s, ssd_keep_count_fn count, void *ctx, struct ssd_keep **ret);

/* Frees the list; its books stay on disk for the next kvtierd.  Accepts NULL. */
void ssd_keep_free(struct ssd_keep *k);

/* Runs over the directory (dir_fd, named dir in logs) once, at start, at
 * now (CLOCK_MONOTONIC ns), processes read under proc_root: books of
 * processes that ended are deleted, those of live ones loaded and kept;
 * data files and half-written compactions without an index are removed;
 * books another kvtierd holds and files named otherwise are left alone. */
void ssd_keep_sweep(struct ssd_keep *k, int dir_fd, const char *dir, const char *proc_root, uint64_t now);

/* The kept book of token for the peer pid, uid (SO_PEERCRED): only when
 * both are what the book recorded, taken off the list (its bytes stay
 * counted).  NULL, logged for a token that is not all zero: a new session. */
struct ssd_book *ssd_keep_take(struct ssd_keep *k, pid_t pid, uint32_t uid, const uint8_t *token);

/* Puts a book taken back on the list (its session could not start), with
 * a new grace.  Returns 0 or -ENOMEM. */
int ssd_keep_put(struct ssd_keep *k, struct ssd_book *b, uint64_t now);

/* Deletes the books whose grace ended by now.  Returns when the next one
 * ends, 0 for none. */
uint64_t ssd_keep_expire(struct ssd_keep *k, uint64_t now);

/* The kept books for status: an array of {pid, uid, live_spills, bytes,
 * expires_in_ms}. */
json_object *ssd_keep_json(const struct ssd_keep *k, uint64_t now);
