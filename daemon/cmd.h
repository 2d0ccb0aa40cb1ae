/*
 * cmd — the command table: names, arity, who may run them, handlers, and
 * the shapes of their replies.
 *
 * It validates a request's arguments, runs it against the lock table and
 * writes its reply to the session. It owns no state of its own: a session's
 * state is the session's, locks are the lock table's. It must not read from
 * or write to a socket, nor decide when a session runs (session.c).
 */
#ifndef DLOCKD_CMD_H
#define DLOCKD_CMD_H

#include <stddef.h>

struct session;
struct codec_frame;

/* Validate and run one request (a session_dispatch_fn). The handler writes
 * the reply, or asks the session to wait (session_wait) and replies later. */
void cmd_dispatch(struct session *s, const struct codec_frame *f);

#endif
