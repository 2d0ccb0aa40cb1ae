/*
 * notify — sd_notify(3) messages and socket activation (see notify.h).
 *
 * It owns nothing: libsystemd keeps no state between the calls. It must not
 * decide when to send what (main.c does); it only says it.
 */
#include "notify.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "log.h"

#define NOTIFY_STATUS_MAX 200	/* bytes of a STATUS= line */

#ifdef HAVE_LIBSYSTEMD

/* Send the message fmt makes; a failure is logged at debug (the manager
 * may be gone, and nothing depends on it). */
static void __attribute__((format(printf, 1, 2)))
notify_send(const char *fmt, ...)
{
	char msg[NOTIFY_STATUS_MAX + 64];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if ((rc = sd_notify(0, msg)) < 0)
		log_debug("sd_notify: %s", strerror(-rc));
}

void
notify_ready(const char *status)
{
	notify_send("READY=1\nSTATUS=%.*s", NOTIFY_STATUS_MAX, status);
}

void
notify_status(const char *status)
{
	notify_send("STATUS=%.*s", NOTIFY_STATUS_MAX, status);
}

void
notify_reloading(void)
{
	struct timespec ts;

	/* Type=notify-reload (systemd 253 on) wants the time of the reload */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	notify_send("RELOADING=1\nMONOTONIC_USEC=%llu",
	    (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000);
}

void
notify_stopping(void)
{
	notify_send("STOPPING=1");
}

void
notify_watchdog(void)
{
	notify_send("WATCHDOG=1");
}

uint64_t
notify_watchdog_usec(void)
{
	uint64_t usec = 0;

	return sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
}

int
notify_listen_fds(void)
{
	int n = sd_listen_fds(1);

	if (n < 0)
		log_warn("LISTEN_FDS: %s: no socket taken from the service manager",
		    strerror(-n));
	return n > 0 ? n : 0;
}

int
notify_is_listener(int fd)
{
	return sd_is_socket_inet(fd, AF_UNSPEC, SOCK_STREAM, 1, 0) > 0 ||
	    sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) > 0;
}

#else	/* without libsystemd: nothing to tell, nothing handed over */

void
notify_ready(const char *status)
{
	(void)status;
}

void
notify_status(const char *status)
{
	(void)status;
}

void
notify_reloading(void)
{
}

void
notify_stopping(void)
{
}

void
notify_watchdog(void)
{
}

uint64_t
notify_watchdog_usec(void)
{
	return 0;
}

int
notify_listen_fds(void)
{
	return 0;
}

int
notify_is_listener(int fd)
{
	(void)fd;
	return 0;
}

#endif
