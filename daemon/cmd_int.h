/*
 * cmd_int — what the command table's files share: argument checks, the
 * parsing of LOCK's options and the shapes of lock replies (cmd.c), and the
 * handlers that live in files of their own (cmd_multi.c).
 */
#ifndef DLOCKD_CMD_INT_H
#define DLOCKD_CMD_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "locktab.h"

struct session;
struct codec_frame;

/* A command's handler: it writes the reply, or asks the session to wait. */
typedef void cmd_fn(struct session *s, const struct codec_frame *f);

/* Parse argument i as a decimal integer in [min, max]. 0, or -1. */
int cmd_arg_int(const struct codec_frame *f, size_t i, long long min, long long max,
    long long *out);
/* Check the key argument i; replies and returns false when it is unusable. */
bool cmd_key_ok(struct session *s, const struct codec_frame *f, size_t i);
/*
 * Parse the options of LOCK, LOCKALL or CAMPAIGN (no SHARED or LIMIT) from
 * argument first into req, whose key, value and defaults are set; replies
 * (a syntax error names syntax, the command's usage) and returns false when
 * they are wrong.
 */
bool cmd_lock_options(struct session *s, const struct codec_frame *f, size_t first,
    bool campaign, const char *syntax, struct lt_lock_req *req);
/* Reply with the error for a lock-table status (by_token: the UNLOCK or
 * EXTEND named a token). */
void cmd_reply_lt_error(struct session *s, enum lt_status st, bool by_token);
/* Reply with a grant: [token, fence, ttl_ms]. */
void cmd_reply_grant(struct session *s, const struct lt_grant *g);

/* LOCKALL and UNLOCKALL (cmd_multi.c). */
cmd_fn cmd_lockall;
cmd_fn cmd_unlockall;
/* HELD (cmd_held.c). */
cmd_fn cmd_held;

#endif
