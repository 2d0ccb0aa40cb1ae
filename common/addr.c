/*
 * addr — "host:port", "[v6addr]:port" and "unix:/path" (see addr.h). It
 * owns nothing; it must not resolve names or open sockets.
 */
#include "addr.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdbool.h>
#include <string.h>
#include <sys/un.h>

#include "num.h"

/* Whether the n bytes at s can be a host name or IPv4 address: letters,
 * digits, '.', '-', '_'. */
static bool
host_chars(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '-' && s[i] != '_')
			return false;
	return true;
}

/* "unix:/path". */
static int
parse_unix(const char *s, struct addr *out, const char **why)
{
	const char *path = s + 5;
	if (*path == '\0') {
		*why = "the socket path is empty (expected unix:/path)";
		return -1;
	}
	if (*path != '/') {
		*why = "the socket path must be absolute (expected unix:/path)";
		return -1;
	}
	if (strlen(path) >= sizeof(out->path) ||
	    strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		*why = "the socket path is too long";
		return -1;
	}
	out->kind = ADDR_UNIX;
	strcpy(out->path, path);
	return 0;
}

/* The host part of s: "[v6]" or a name; *rest is what follows it. */
static int
parse_host(const char *s, struct addr *out, const char **rest, const char **why)
{
	bool v6 = *s == '[';
	const char *host = v6 ? s + 1 : s, *end;
	if (v6) {
		if ((end = strchr(s, ']')) == NULL) {
			*why = "missing ']' after the IPv6 address";
			return -1;
		}
		*rest = end + 1;
		if (**rest != ':' && **rest != '\0') {
			*why = "missing ':port' after ']' (expected [v6addr]:port)";
			return -1;
		}
	} else {
		if ((end = strrchr(s, ':')) == NULL)
			end = s + strlen(s);
		else if (memchr(s, ':', (size_t)(end - s)) != NULL) {
			*why = "an IPv6 address must be in brackets, as in [::1]:7480";
			return -1;
		}
		*rest = end;
	}
	size_t n = (size_t)(end - host);
	if (n == 0) {
		*why = "the host is empty";
		return -1;
	}
	if (n >= sizeof(out->host)) {
		*why = "the host is too long";
		return -1;
	}
	memcpy(out->host, host, n);
	out->host[n] = '\0';
	if (v6) {
		/* an IPv6 address, with maybe a zone: fe80::1%eth0 */
		char ip[sizeof(out->host)];
		struct in6_addr in6;
		memcpy(ip, out->host, n + 1);
		ip[strcspn(ip, "%")] = '\0';
		if (inet_pton(AF_INET6, ip, &in6) != 1) {
			*why = "not an IPv6 address between the brackets";
			return -1;
		}
	} else if (!host_chars(host, n)) {
		*why = "the host has characters a host name cannot have";
		return -1;
	}
	return 0;
}

int
addr_parse(const char *s, int default_port, struct addr *out, const char **why)
{
	const char *rest;
	long long port;

	memset(out, 0, sizeof(*out));
	if (*s == '\0') {
		*why = "the address is empty";
		return -1;
	}
	if (strlen(s) >= sizeof(out->text)) {
		*why = "the address is too long";
		return -1;
	}
	strcpy(out->text, s);
	if (strncmp(s, "unix:", 5) == 0)
		return parse_unix(s, out, why);
	if (parse_host(s, out, &rest, why) != 0)
		return -1;
	out->kind = ADDR_TCP;
	if (*rest == '\0') {
		if (default_port == ADDR_PORT_REQUIRED) {
			*why = *s == '[' ? "missing ':port' after ']' (expected [v6addr]:port)" :
			    "missing port (expected host:port, [v6addr]:port or unix:/path)";
			return -1;
		}
		out->port = default_port;
		return 0;
	}
	rest++;	/* the ':' */
	if (*rest == '\0') {
		*why = "the port is missing";
		return -1;
	}
	switch (num_parse(rest, strlen(rest), 0, 65535, &port)) {
	case NUM_OK:
		out->port = (int)port;
		return 0;
	case NUM_RANGE:
		if (*rest != '-') {
			*why = "the port is out of range (0..65535)";
			return -1;
		}
		/* FALLTHROUGH */
	case NUM_SYNTAX:
	default:
		*why = "the port is not a number";
		return -1;
	}
}
