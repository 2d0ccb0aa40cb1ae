/*
 * conf — the YAML configuration file, command-line overrides, defaults.
 *
 * conf_create() gives a struct whose fields are all UNSET; conf_load() parses
 * a file into it through a directive table (name, type, offset, reloadable);
 * conf_override_*() apply command-line options; conf_finish() fills the
 * defaults and validates. Every problem is appended to c->errors as
 * "file:line:column: message" (or "command line: message") and loading goes
 * on, so all of them can be reported before exit.
 */
#ifndef DLOCKD_CONF_H
#define DLOCKD_CONF_H

#include <stddef.h>
#include <sys/socket.h>

#define CONF_UNSET (-1LL)

struct conf {
	char *path;			/* the file loaded, or NULL */

	char **listen;			/* listener addresses as written */
	size_t nlisten;
	long long unix_socket_mode;	/* permission bits of Unix sockets */

	char *password;			/* required password, NULL for none */
	char *password_file;		/* where password was read from, or NULL */

	char *backend_type;		/* "memory" or "redis" */
	char *backend_host;		/* redis: server host or IP */
	long long backend_port;		/* redis: server port */
	char *backend_password;		/* redis: AUTH password, NULL for none */
	long long backend_db;		/* redis: SELECT db */
	char *backend_prefix;		/* redis: prefix of every key dlockd uses */
	long long backend_connect_timeout_ms; /* redis: connect (and AUTH) timeout */
	long long backend_command_timeout_ms; /* redis: a reply later than this
					 * drops the connection */
	long long backend_handoff_limit; /* consecutive local handoffs of a key
					 * before it is released to all daemons */

	long long default_ttl_ms;	/* LOCK TTL when none is given */
	long long max_ttl_ms;		/* largest TTL a LOCK or EXTEND may ask */
	long long margin_percent;	/* safety margin of a lease, percent of its TTL */
	long long lock_delay_ms;	/* a lost lock's key stays taken this long
					 * past its lease's end */

	long long idle_timeout_ms;	/* close a session silent this long; 0: never */
	long long tcp_keepalive_s;	/* TCP keepalive idle time; 0: off */
	long long tcp_keepalive_interval_s; /* between keepalive probes */
	long long tcp_keepalive_probes;	/* unanswered probes that drop the peer */

	long long max_clients;		/* connections at once */
	long long max_key_bytes;	/* bytes in a key */
	long long max_request_bytes;	/* bytes in one request frame */
	long long max_waiters_per_key;	/* queued LOCKs per key */
	long long max_locks_per_session; /* held and queued locks per connection */

	char *log_level;		/* debug, info, warn, error */
	char *log_file;			/* NULL or "" for stderr */

	char **errors;			/* every problem found, in order */
	size_t nerrors;
};

/* A config with every field unset; NULL when out of memory. */
struct conf *conf_create(void);
void conf_destroy(struct conf *c);

/* Parse path into c. 0 if no error was found, else -1 (see c->errors). */
int conf_load(struct conf *c, const char *path);

/* -l ADDR: the first call drops the listeners of the file; later ones add. */
int conf_override_listen(struct conf *c, const char *addr);
/* -b URL: "memory" or "redis://[:password@]host:port[/db]" (later
 * redlock://, etcd://). */
int conf_override_backend(struct conf *c, const char *url);

/* Fill defaults for what is unset and validate. 0, or -1 (see c->errors). */
int conf_finish(struct conf *c);

#endif
