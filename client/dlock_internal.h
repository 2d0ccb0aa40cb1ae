/*
 * dlock_internal — libdlock's functions for its own tests, not part of its
 * interface: hidden from the shared library (it is built with
 * -fvisibility=hidden and they are not marked DLOCK_EXPORT), reachable only
 * by linking libdlock.a.
 */
#ifndef DLOCK_INTERNAL_H
#define DLOCK_INTERNAL_H

#include "dlock.h"

/*
 * A handle on fd, a socket already connected to something that speaks as
 * dlockd (a test's socketpair), which it takes over: with handshake, HELLO
 * and CLIENT LOSTPUSH ON are sent and their replies read as dlock_connect()
 * does (password as there); without, the handle is ready at once. NULL with
 * err set (fd closed) on failure.
 */
dlock_t *dlock_open_fd(int fd, int handshake, const char *password, char *err,
    size_t errlen);

#endif
