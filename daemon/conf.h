/*
 * conf — the YAML configuration file, command-line overrides, defaults.
 *
 * Every setting is one row of a settings table (struct conf_setting): conf.c
 * has the table of struct conf, and each backend declares the table of its
 * own keys under "backend." (struct backend_ops in backend.h), with offsets
 * into a settings struct of its own that conf allocates and fills.
 *
 * conf_create() gives a struct whose fields are all unset; conf_load() reads
 * a file into it; conf_override_*() apply command-line options, which win
 * over the file whenever they are given; conf_finish() fills the defaults
 * and checks the rules between settings. Every problem is appended to
 * c->errors as "file:line:column: message" (or "command line: message") and
 * loading goes on, so that all of them can be reported before exit.
 */
#ifndef DLOCKD_CONF_H
#define DLOCKD_CONF_H

#include <stdbool.h>
#include <stddef.h>

#include "addr.h"

struct backend_ops;

#define CONF_UNSET (-1LL)	/* an integer setting not given (yet) */

/* How a setting is written in the file and stored in its field. */
enum conf_type {
	CONF_INT,		/* decimal integer in [min, max]; long long */
	CONF_MODE,		/* octal permission bits in [min, max]; long long */
	CONF_BOOL,		/* true or false (also yes/no, on/off); long long
				 * 1 or 0 */
	CONF_STR,		/* any string, "" for none (NULL); char * */
	CONF_SHORTSTR,		/* a string of 1 to max bytes; char * */
	CONF_SECRET,		/* as CONF_STR, wiped when freed; char * */
	CONF_SECRET_FILE,	/* a file holding the secret of the CONF_SECRET row
				 * .pair, read at load, relative to the config
				 * file's directory; its resolved name, char * */
	CONF_PATH,		/* a file's name, relative to the config file's
				 * directory; its resolved name, char * (NULL
				 * for none) */
	CONF_ENUM,		/* one of the names .choice gives; char * */
	CONF_GROUP,		/* a Unix group, by name or number, resolved to
				 * its gid when loaded; long long, CONF_UNSET
				 * for none */
	CONF_SERVER,		/* "host:port" or "[v6addr]:port" to connect to;
				 * struct addr (text "" while unset) */
	CONF_ADDRLIST,		/* list of addresses to listen on; char ** at off,
				 * their number (size_t) at .count */
	CONF_TCPLIST,		/* as CONF_ADDRLIST, TCP addresses only, and it
				 * may be empty (none: the default) */
	CONF_SERVERLIST,	/* list of servers to connect to, "host:port" or
				 * "[v6addr]:port", port .def if left out and
				 * .def > 0: a YAML list, or one string of them
				 * separated by commas (as a -b URL gives it).
				 * Stored as CONF_ADDRLIST, each "host:port" */
	CONF_NODELIST,		/* as CONF_SERVERLIST, but an item may also be a
				 * mapping: the server at "address", and what
				 * the node sets for itself: username, password
				 * or password_file, tls (enabled, ca_file,
				 * cert_file, key_file, server_name). Stored as
				 * a struct conf_node * at off (the nodes in
				 * order), their number (size_t) at .count */
};

/* A server of a CONF_NODELIST, with what it may set for itself. What it
 * leaves out (NULL, CONF_UNSET) is the backend's setting of that name. */
struct conf_node {
	char *server;		/* "host:port" or "[v6addr]:port", as
				 * CONF_SERVERLIST keeps it */
	char *username;		/* AUTH user; NULL: the backend's */
	char *password;		/* AUTH password (from password or password_file);
				 * NULL: the backend's; wiped when freed */
	char *password_file;	/* where password was read from, or NULL */
	long long tls;		/* 1 or 0: TLS or not; CONF_UNSET: the backend's */
	char *tls_ca_file;	/* resolved as CONF_PATH; NULL: the backend's */
	char *tls_cert_file;	/* client certificate, resolved; NULL: the backend's */
	char *tls_key_file;	/* its key, resolved; NULL: the backend's */
	char *tls_server_name;	/* name the certificate must carry; NULL: the
				 * backend's */
};

/* One row of a settings table. */
struct conf_setting {
	const char *name;	/* dotted key; a backend's rows leave out "backend." */
	enum conf_type type;	/* how the value is parsed and stored */
	size_t off;		/* offsetof() its field in the table's struct */
	long long min;		/* CONF_INT, CONF_MODE: smallest value */
	long long max;		/* CONF_INT, CONF_MODE: largest value;
				 * CONF_SHORTSTR: most bytes */
	long long def;		/* CONF_INT, CONF_MODE: default;
				 * CONF_SERVERLIST, CONF_NODELIST: port of a
				 * server without one (0: a port is required) */
	const char *defstr;	/* other types: default as written, NULL for none */
	const char *pair;	/* CONF_SECRET_FILE: name of the secret's row */
	size_t count;		/* CONF_ADDRLIST, CONF_TCPLIST, CONF_SERVERLIST,
				 * CONF_NODELIST: offsetof() the count */
	const char *(*choice)(size_t i); /* CONF_ENUM: the i-th allowed name,
				 * NULL past the last */
	int optional;		/* CONF_SERVERLIST, CONF_NODELIST: may be empty
				 * (none: the default) */
	int reloadable;		/* may change on a reload (SIGHUP) without a
				 * restart: conf_reload() moves it into the
				 * config in force */
};

/* The settings of conf.c's own table. */
struct conf {
	char *path;			/* the file loaded, or NULL */

	char **listen;			/* listener addresses as written */
	size_t nlisten;			/* how many */
	long long unix_socket_mode;	/* permission bits of Unix sockets */
	long long unix_socket_gid;	/* group of Unix sockets; CONF_UNSET: the
					 * daemon's own */
	long long protected_mode;	/* 1: refuse to listen beyond loopback
					 * without a password */
	struct addr metrics;		/* the metrics HTTP listener; text "" when off */

	char *password;			/* required password, NULL for none */
	char *password_file;		/* where password was read from, or NULL */
	char *admin_password;		/* password of AUTH admin, NULL for none */
	char *admin_password_file;	/* where admin_password was read from, or NULL */
	long long admin_gid;		/* Unix socket peers in this group are
					 * admins; CONF_UNSET for none */

	char *backend_type;		/* a registered backend's name */
	void *backend_settings;		/* that backend's settings struct (its
					 * ops->settings_size bytes) once
					 * conf_finish() is done; NULL if it has none */

	long long default_ttl_ms;	/* LOCK TTL when none is given */
	long long max_ttl_ms;		/* largest TTL a LOCK or EXTEND may ask */
	long long margin_percent;	/* safety margin of a lease, percent of its TTL */
	long long lock_delay_ms;	/* a lost lock's key stays taken this long
					 * past its lease's end */

	long long idle_timeout_ms;	/* close a session silent this long; 0: never */
	long long request_timeout_ms;	/* a request begun must be complete within */
	long long login_timeout_ms;	/* with a password: authenticate within */
	long long output_timeout_ms;	/* a peer that does not read its replies is
					 * closed after this long */
	long long tcp_keepalive_s;	/* TCP keepalive idle time; 0: off */
	long long tcp_keepalive_interval_s; /* between keepalive probes */
	long long tcp_keepalive_probes;	/* unanswered probes that drop the peer */

	long long max_clients;		/* connections at once */
	long long max_key_bytes;	/* bytes in a key */
	long long max_request_bytes;	/* bytes in one request frame */
	long long max_waiters_per_key;	/* queued LOCKs per key */
	long long max_locks_per_session; /* held and queued locks per connection */
	long long max_lockall_keys;	/* keys in one LOCKALL or UNLOCKALL */
	long long max_keys;		/* keys with holders or waiters, in all */
	long long max_output_bytes;	/* unsent reply bytes that close a session */

	char **tls_listen;		/* TLS listener addresses as written */
	size_t ntls_listen;		/* how many (0: no TLS) */
	char *tls_cert_file;		/* PEM certificate (chain), resolved, or NULL */
	char *tls_key_file;		/* PEM private key, resolved, or NULL */
	char *tls_ca_file;		/* CA that client certificates must be signed
					 * by, resolved; NULL: none asked for */
	char *tls_min_version;		/* "TLSv1.2" or "TLSv1.3" */
	long long tls_handshake_timeout_ms; /* a TLS handshake must end within this */

	char *log_level;		/* debug, info, warn, error */
	char *log_file;			/* NULL for stderr */

	char **errors;			/* every problem found, in order */
	size_t nerrors;			/* how many */
	char **warnings;		/* what may be wrong but does not stop the
					 * daemon ("file:line:column: warning: ...") */
	size_t nwarnings;		/* how many */
};

/* A config with every field unset. The caller owns it (conf_destroy). */
struct conf *conf_create(void);
void conf_destroy(struct conf *c);

/* Parse path into c. 0 if no error was found, else -1 (see c->errors). */
int conf_load(struct conf *c, const char *path);

/* -l ADDR: the first call replaces the file's listeners; later ones add. */
int conf_override_listen(struct conf *c, const char *addr);
/* -b URL: the name of a backend that takes no URL ("memory"), or a URL
 * that a backend's parse_url takes ("redis://..."). */
int conf_override_backend(struct conf *c, const char *url);

/* Add an error about the setting called name (dotted, "backend." included)
 * at the place it was given: its line in the file, or the command line.
 * Returns -1. */
int conf_setting_error(struct conf *c, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* As conf_setting_error, but a warning (c->warnings): dlockd -t prints it,
 * and the file is still valid. */
void conf_setting_warning(struct conf *c, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Fill defaults for what is unset and check the rules between settings.
 * 0, or -1 if c->errors holds any error (see c->errors). */
int conf_finish(struct conf *c);
/* dlockd -t, after conf_finish(): what only the world can say about c's
 * backend settings (names that do not resolve, certificate files that
 * cannot be used: its ops->check with deep), added to c's errors. May block. */
void conf_check_deep(struct conf *c);

/*
 * A reload: live is the config in force, next a finished one without errors
 * read from the same file with the same command line. Every reloadable
 * setting whose value next changed is moved into live in place (so that
 * pointers to live and to its backend settings stay good) and logged at
 * info; every other setting that changed is logged at warn and keeps its
 * value. Settings of backends not in use are not looked at. Returns how many
 * settings changed in live. next then holds the values replaced: the caller
 * destroys it, so a string read from live must not be kept across a reload.
 */
int conf_reload(struct conf *live, struct conf *next);

/* The field of the setting called name (without "backend.") of the backend
 * c->backend_type names; NULL if that backend has no such setting. */
const void *conf_backend_value(const struct conf *c, const char *name);

/* Parse the address of a server to connect to: "host:port" or
 * "[v6addr]:port", port 1 to 65535; without ":port" the port is
 * default_port, or the address is refused if that is ADDR_PORT_REQUIRED.
 * 0, or -1 with *why set to a static sentence. */
int conf_server_parse(const char *s, int default_port, struct addr *out, const char **why)
	__attribute__((warn_unused_result));

/* Whether the listen address text is TCP beyond loopback (as written: a
 * host name other than localhost counts as beyond). */
bool conf_addr_exposed(const char *text);
/* Decode the n bytes at s, a part of a URL with %XX escapes (either case),
 * into a new string the caller wipes (explicit_bzero) and frees: it may be
 * a password. NULL for a bad escape or an escaped NUL (%00). */
char *conf_url_decode(const char *s, size_t n);
/* The userinfo of a URL whose authority starts at s (just after "scheme://"):
 * everything before the last '@' of s, "user[:password]", %XX-decoded (the
 * first ':' ends the user name: a ':' in it is written %3A).
 * *user and *password get allocated strings (NULL when absent: no '@', or no
 * ':' for the password; "" when written empty), *rest points after the '@' (s
 * when there is none). 0, or -1 with *why one of "bad %-escape in the user
 * name", "bad %-escape in the password", "the password contains a NUL byte",
 * "the user name contains a NUL byte" (nothing allocated then). Never puts the
 * password into *why. The caller frees both (wipe the password with explicit_bzero first). */
int conf_url_userinfo(const char *s, char **user, char **password, const char **rest,
    const char **why) __attribute__((warn_unused_result));

/* For unit tests (DLOCKD_TEST_HOOKS builds only): from the next
 * conf_create() on, know the backends that at gives (as backend_at() does:
 * the i-th, NULL past the last) instead of the registered ones; NULL goes
 * back to those. */
void conf_use_backends(const struct backend_ops *(*at)(size_t i));

#endif
