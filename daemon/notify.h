/*
 * notify — what the daemon tells its service manager, and the listening
 * sockets the manager may hand it (systemd's sd_notify(3) and
 * sd_listen_fds(3)).
 *
 * Built with libsystemd (HAVE_LIBSYSTEMD), the messages go to the socket
 * NOTIFY_SOCKET names, when it is set; built without, every call does
 * nothing and no socket is handed over. The rest of the daemon calls these
 * functions the same way either way.
 */
#ifndef DLOCKD_NOTIFY_H
#define DLOCKD_NOTIFY_H

#include <stdint.h>

/* READY=1: start-up (or a reload) is done; status says how it stands. */
void notify_ready(const char *status);
/* STATUS=status. */
void notify_status(const char *status);
/* RELOADING=1 (with MONOTONIC_USEC): a configuration reload begins. */
void notify_reloading(void);
/* STOPPING=1: shutdown begins. */
void notify_stopping(void);
/* WATCHDOG=1: the event loop is alive. */
void notify_watchdog(void);
/* The watchdog interval the manager asks pings within, in microseconds; 0
 * when there is no watchdog for this process. */
uint64_t notify_watchdog_usec(void);

/* How many listening sockets the manager passed (LISTEN_FDS, for this
 * process), from descriptor NOTIFY_FD_FIRST on; the variables are removed
 * from the environment. 0 when none, or without libsystemd. */
int notify_listen_fds(void);
#define NOTIFY_FD_FIRST 3

/* Whether descriptor fd is a listening stream socket, TCP (IPv4 or IPv6) or
 * Unix: 1, else 0. */
int notify_is_listener(int fd);

#endif
