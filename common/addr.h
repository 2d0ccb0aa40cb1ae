/*
 * addr — the one parser of the addresses dlockd, libdlock and dlock accept:
 * "host:port", "[v6addr]:port" and "unix:/path".
 *
 * It owns nothing and never resolves a name or touches a socket: it only
 * takes the text apart, so that the daemon's listeners, its backend servers
 * and the client library agree on one syntax and one set of messages.
 */
#ifndef DLOCK_ADDR_H
#define DLOCK_ADDR_H

#define ADDR_PORT_REQUIRED (-1)	/* addr_parse(): no default port */

enum addr_kind { ADDR_TCP, ADDR_UNIX };

/* One parsed address. */
struct addr {
	enum addr_kind kind;
	char text[256];		/* as written, for logs */
	char host[128];		/* TCP: host name or IP, without brackets */
	int port;		/* TCP: 0..65535 (0: any free port) */
	char path[108];		/* UNIX: the socket's path (fits sun_path) */
};

/*
 * Parse s. A TCP address without ":port" takes default_port, or is refused
 * when that is ADDR_PORT_REQUIRED. 0, or -1 with *why set to a static
 * sentence.
 */
int addr_parse(const char *s, int default_port, struct addr *out, const char **why)
	__attribute__((warn_unused_result));

#endif
