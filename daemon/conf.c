/*
 * conf — the YAML configuration file, command-line overrides, defaults.
 *
 * The file is read with libyaml's event parser (yaml_parser_parse), not its
 * document loader: the mappings are walked as events arrive, every key is
 * joined to its parents' into a dotted name ("limits.max_clients") and looked
 * up in conf_directives[], which says where the value goes, how to parse it,
 * its range and its default. A key that is the start of some directives'
 * names ("limits") is a section and must hold a mapping.
 *
 * Nothing stops at the first problem: each one becomes a line of c->errors
 * ("file:line:column: message", libyaml's 0-based marks plus one) and the walk
 * goes on with the next key, so one run of `dlockd -t` shows all of them. Only
 * a YAML syntax error ends the walk, as libyaml cannot go past it.
 *
 * struct conf is the public part of struct conf_priv, which also keeps, for
 * each directive, where its value came from (file position or command line)
 * so that conf_finish() can point at the right place.
 */
#include "conf.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <yaml.h>

#include "addr.h"
#include "log.h"

/* Bytes of a request that are not the key, at the least (frame headers,
 * the command name): max_key_bytes + CONF_REQUEST_OVERHEAD <= max_request_bytes. */
#define CONF_REQUEST_OVERHEAD	32
/* Largest password file read. */
#define CONF_PASSWORD_MAX	4096
/* Largest piece of a bad value quoted back in a message. */
#define CONF_QUOTE_MAX		48
/* What libyaml makes of "!!": the prefix of the standard tags. */
#define CONF_STD_TAG		"tag:yaml.org,2002:"
#define CONF_STD_TAG_LEN	(sizeof(CONF_STD_TAG) - 1)
/* Most directives conf_directives[] may have (sizes the arrays of struct
 * conf_priv, which must be known before the table). */
#define CONF_MAXDIRECTIVES	32
/* What a redis:// URL starts with, and the port it gives when none is written. */
#define CONF_REDIS_SCHEME	"redis://"
#define CONF_REDIS_PORT		6379

/* How a directive's value is parsed and stored. */
enum conf_type {
	CONF_T_INT,		/* decimal integer in [min, max]; long long */
	CONF_T_MODE,		/* octal permission bits in [min, max]; long long */
	CONF_T_STR,		/* any string, "" stored as NULL; char * */
	CONF_T_SHORTSTR,	/* a string of 1 to max bytes; char * */
	CONF_T_PASSFILE,	/* file name; the file is read now; char * */
	CONF_T_BACKEND,		/* one of conf_backends[]; char * */
	CONF_T_LEVEL,		/* a log level name (log_level_parse); char * */
	CONF_T_ADDRLIST,	/* list of addr_parse() addresses; char ** */
	CONF_T_SERVER,		/* "host:port" or "[v6]:port" to connect to; host in
				 * char * at off, port in long long at portoff */
};

/* Where a directive's value came from. */
enum conf_source { CONF_SRC_UNSET, CONF_SRC_FILE, CONF_SRC_CMDLINE };

/* A position in the file, counted from 1. */
struct conf_pos {
	size_t line;		/* line of the file */
	size_t col;		/* column (in characters) */
};

/* The config and what only this file needs to know about it. */
struct conf_priv {
	struct conf pub;			/* what the header shows; first */
	enum conf_source src[CONF_MAXDIRECTIVES]; /* who set each directive */
	struct conf_pos val[CONF_MAXDIRECTIVES]; /* where its value is, if in the file */
	char *secret[CONF_MAXDIRECTIVES];	/* CONF_T_PASSFILE: what its file held,
						 * until conf_finish() moves it */
	char *backend_password_file;		/* backend.password_file, resolved */
	bool nomem;				/* an allocation failed */
};

/* One key of the file. */
struct conf_directive {
	const char *name;	/* dotted path from the top level */
	enum conf_type type;	/* how the value is parsed */
	size_t off;		/* offsetof(struct conf_priv, field) */
	size_t portoff;		/* CONF_T_SERVER: offset of the port field */
	long long min;		/* CONF_T_INT, CONF_T_MODE: smallest value */
	long long max;		/* CONF_T_INT, CONF_T_MODE: largest value;
				 * CONF_T_SHORTSTR: most bytes */
	long long def;		/* CONF_T_INT, CONF_T_MODE: default */
	const char *defstr;	/* string types: default, NULL for none */
	const char *pair;	/* CONF_T_PASSFILE: the directive that gives the
				 * password itself, of which at most one is set */
	bool reloadable;	/* may change without a restart (on a reload) */
};

/* A field of the public struct conf, and one only this file sees. */
#define OFF(field)	offsetof(struct conf_priv, pub.field)
#define PRIV(field)	offsetof(struct conf_priv, field)

static const struct conf_directive conf_directives[] = {
	{ .name = "listen", .type = CONF_T_ADDRLIST, .off = OFF(listen),
	  .defstr = "127.0.0.1:7480" },
	{ .name = "unix_socket_mode", .type = CONF_T_MODE, .off = OFF(unix_socket_mode),
	  .min = 0, .max = 0777, .def = 0660 },
	{ .name = "auth.password", .type = CONF_T_STR, .off = OFF(password),
	  .reloadable = true },
	{ .name = "auth.password_file", .type = CONF_T_PASSFILE, .off = OFF(password_file),
	  .pair = "auth.password", .reloadable = true },
	{ .name = "backend.type", .type = CONF_T_BACKEND, .off = OFF(backend_type),
	  .defstr = "memory" },
	{ .name = "backend.address", .type = CONF_T_SERVER, .off = OFF(backend_host),
	  .portoff = OFF(backend_port), .defstr = "127.0.0.1:6379" },
	{ .name = "backend.password", .type = CONF_T_STR, .off = OFF(backend_password) },
	{ .name = "backend.password_file", .type = CONF_T_PASSFILE,
	  .off = PRIV(backend_password_file), .pair = "backend.password" },
	{ .name = "backend.db", .type = CONF_T_INT, .off = OFF(backend_db),
	  .min = 0, .max = 1000000, .def = 0 },
	{ .name = "backend.key_prefix", .type = CONF_T_SHORTSTR, .off = OFF(backend_prefix),
	  .max = 64, .defstr = "dlock:" },
	{ .name = "backend.connect_timeout_ms", .type = CONF_T_INT,
	  .off = OFF(backend_connect_timeout_ms), .min = 10, .max = 600000, .def = 2000 },
	{ .name = "backend.command_timeout_ms", .type = CONF_T_INT,
	  .off = OFF(backend_command_timeout_ms), .min = 10, .max = 600000, .def = 2000 },
	{ .name = "backend.handoff_limit", .type = CONF_T_INT,
	  .off = OFF(backend_handoff_limit), .min = 1, .max = 1000000, .def = 16 },
	{ .name = "locks.default_ttl_ms", .type = CONF_T_INT, .off = OFF(default_ttl_ms),
	  .min = 10, .max = 31536000000LL, .def = 30000, .reloadable = true },
	{ .name = "locks.max_ttl_ms", .type = CONF_T_INT, .off = OFF(max_ttl_ms),
	  .min = 10, .max = 31536000000LL, .def = 86400000, .reloadable = true },
	{ .name = "locks.margin_percent", .type = CONF_T_INT, .off = OFF(margin_percent),
	  .min = 1, .max = 50, .def = 10 },
	{ .name = "locks.lock_delay_ms", .type = CONF_T_INT, .off = OFF(lock_delay_ms),
	  .min = 0, .max = 3600000, .def = 0 },
	{ .name = "sessions.idle_timeout_ms", .type = CONF_T_INT, .off = OFF(idle_timeout_ms),
	  .min = 0, .max = 31536000000LL, .def = 0, .reloadable = true },
	{ .name = "sessions.tcp_keepalive_s", .type = CONF_T_INT, .off = OFF(tcp_keepalive_s),
	  .min = 0, .max = 32767, .def = 15 },
	{ .name = "sessions.tcp_keepalive_interval_s", .type = CONF_T_INT,
	  .off = OFF(tcp_keepalive_interval_s), .min = 1, .max = 32767, .def = 5 },
	{ .name = "sessions.tcp_keepalive_probes", .type = CONF_T_INT,
	  .off = OFF(tcp_keepalive_probes), .min = 1, .max = 127, .def = 3 },
	{ .name = "limits.max_clients", .type = CONF_T_INT, .off = OFF(max_clients),
	  .min = 1, .max = 1000000, .def = 10000, .reloadable = true },
	{ .name = "limits.max_key_bytes", .type = CONF_T_INT, .off = OFF(max_key_bytes),
	  .min = 1, .max = 536870912LL - CONF_REQUEST_OVERHEAD, .def = 1024,
	  .reloadable = true },
	{ .name = "limits.max_request_bytes", .type = CONF_T_INT, .off = OFF(max_request_bytes),
	  .min = 64, .max = 536870912LL, .def = 65536, .reloadable = true },
	{ .name = "limits.max_waiters_per_key", .type = CONF_T_INT,
	  .off = OFF(max_waiters_per_key), .min = 1, .max = INT_MAX, .def = 10000,
	  .reloadable = true },
	{ .name = "limits.max_locks_per_session", .type = CONF_T_INT,
	  .off = OFF(max_locks_per_session), .min = 1, .max = INT_MAX, .def = 10000,
	  .reloadable = true },
	{ .name = "log.level", .type = CONF_T_LEVEL, .off = OFF(log_level),
	  .defstr = "info", .reloadable = true },
	{ .name = "log.file", .type = CONF_T_STR, .off = OFF(log_file),
	  .reloadable = true },
};

#define CONF_NDIRECTIVES (sizeof(conf_directives) / sizeof(conf_directives[0]))

_Static_assert(CONF_NDIRECTIVES <= CONF_MAXDIRECTIVES,
    "conf_directives[] is larger than CONF_MAXDIRECTIVES");

/* Backend types this build knows, NULL-terminated. */
static const char *const conf_backends[] = { "memory", "redis", NULL };

/* One conf_load() in progress. */
struct conf_parser {
	struct conf_priv *p;	/* the config being filled */
	const char *file;	/* the file name in messages */
	yaml_parser_t yp;	/* libyaml's state */
};

/* A key already seen in one mapping, to find duplicates. */
struct conf_seen {
	char *name;		/* the dotted name */
	size_t line;		/* its line, from 1 */
};

/* The whole of c, which conf_create() allocated as a struct conf_priv. */
static struct conf_priv *
conf_priv(struct conf *c)
{
	return (struct conf_priv *)c;
}

/* Append one already formatted line to c->errors; takes msg. */
static void
conf_add_error(struct conf_priv *p, char *msg)
{
	struct conf *c = &p->pub;
	char **errors;

	if (msg == NULL) {
		p->nomem = true;
		return;
	}
	errors = reallocarray(c->errors, c->nerrors + 1, sizeof(*errors));
	if (errors == NULL) {
		free(msg);
		p->nomem = true;
		return;
	}
	c->errors = errors;
	c->errors[c->nerrors++] = msg;
}

/* Append "prefix" followed by the formatted message to c->errors. */
static void __attribute__((format(printf, 3, 0)))
conf_verror(struct conf_priv *p, const char *prefix, const char *fmt, va_list ap)
{
	char *msg, *line;

	if (vasprintf(&msg, fmt, ap) < 0) {
		p->nomem = true;
		return;
	}
	if (asprintf(&line, "%s%s", prefix, msg) < 0)
		line = NULL;
	free(msg);
	conf_add_error(p, line);
}

/* An error about the file at libyaml's (0-based) mark m. */
static void __attribute__((format(printf, 3, 4)))
conf_error_at(struct conf_parser *ps, yaml_mark_t m, const char *fmt, ...)
{
	char prefix[PATH_MAX + 64];
	va_list ap;

	snprintf(prefix, sizeof(prefix), "%s:%zu:%zu: ", ps->file, m.line + 1, m.column + 1);
	va_start(ap, fmt);
	conf_verror(ps->p, prefix, fmt, ap);
	va_end(ap);
}

/* An error found after the file was read, at directive i's value if it came
 * from the file, else at the command line. */
static void __attribute__((format(printf, 3, 4)))
conf_error_dir(struct conf_priv *p, size_t i, const char *fmt, ...)
{
	char prefix[PATH_MAX + 64];
	va_list ap;

	if (p->src[i] == CONF_SRC_FILE && p->pub.path != NULL)
		snprintf(prefix, sizeof(prefix), "%s:%zu:%zu: ", p->pub.path,
		    p->val[i].line, p->val[i].col);
	else
		snprintf(prefix, sizeof(prefix), "command line: ");
	va_start(ap, fmt);
	conf_verror(p, prefix, fmt, ap);
	va_end(ap);
}

/* An error about a command-line option. */
static void __attribute__((format(printf, 2, 3)))
conf_error_cmdline(struct conf_priv *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	conf_verror(p, "command line: ", fmt, ap);
	va_end(ap);
}

/* An error about the file as a whole ("file: message"). */
static void __attribute__((format(printf, 3, 4)))
conf_error_file(struct conf_priv *p, const char *file, const char *fmt, ...)
{
	char prefix[PATH_MAX + 8];
	va_list ap;

	snprintf(prefix, sizeof(prefix), "%s: ", file);
	va_start(ap, fmt);
	conf_verror(p, prefix, fmt, ap);
	va_end(ap);
}

/* Copy at most CONF_QUOTE_MAX bytes of s (len bytes) into buf for a message,
 * control characters shown as '?', "..." when cut. Returns buf. */
static const char *
conf_quote(const char *s, size_t len, char *buf, size_t size)
{
	size_t n = len > CONF_QUOTE_MAX ? CONF_QUOTE_MAX : len;

	if (n + 4 > size)
		n = size - 4;
	/* do not cut a UTF-8 sequence in two */
	if (n < len)
		while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
			n--;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		buf[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
	}
	if (n < len) {
		memcpy(buf + n, "...", 4);
	} else
		buf[n] = '\0';
	return buf;
}

/* The text of a scalar event. */
static const char *
conf_text(const yaml_event_t *ev)
{
	return (const char *)ev->data.scalar.value;
}

/* Whether ev is a scalar meaning "no value": empty, "~" or "null", unquoted. */
static bool
conf_is_null(const yaml_event_t *ev)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };

	if (ev->type != YAML_SCALAR_EVENT ||
	    ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	for (size_t i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++)
		if (strcmp(conf_text(ev), nulls[i]) == 0)
			return true;
	return false;
}

/* Describe the node starting with ev for "..., not <what>" messages; may use
 * buf. */
static const char *
conf_what(const yaml_event_t *ev, char *buf, size_t size)
{
	char q[CONF_QUOTE_MAX + 4];

	switch (ev->type) {
	case YAML_MAPPING_START_EVENT:
		return "a mapping";
	case YAML_SEQUENCE_START_EVENT:
		return "a list";
	case YAML_ALIAS_EVENT:
		return "an alias";
	case YAML_SCALAR_EVENT:
		if (conf_is_null(ev))
			return "an empty value";
		snprintf(buf, size, "'%s'", conf_quote(conf_text(ev),
		    ev->data.scalar.length, q, sizeof(q)));
		return buf;
	default:
		return "nothing";
	}
}

/* Read the next event into ev. On a YAML error, report it and return -1 (ev
 * then holds nothing to delete). */
static int
conf_next(struct conf_parser *ps, yaml_event_t *ev)
{
	yaml_parser_t *yp = &ps->yp;

	if (yaml_parser_parse(yp, ev))
		return 0;
	switch (yp->error) {
	case YAML_MEMORY_ERROR:
		ps->p->nomem = true;
		conf_error_file(ps->p, ps->file, "out of memory");
		break;
	case YAML_READER_ERROR:
		if (yp->problem_value != -1)
			conf_error_file(ps->p, ps->file, "%s (0x%02X at byte offset %zu)",
			    yp->problem, (unsigned)yp->problem_value, yp->problem_offset);
		else
			conf_error_file(ps->p, ps->file, "%s (at byte offset %zu)", yp->problem,
			    yp->problem_offset);
		break;
	case YAML_SCANNER_ERROR:
	case YAML_PARSER_ERROR:
		if (yp->context != NULL)
			conf_error_at(ps, yp->problem_mark,
			    "syntax error: %s (%s at line %zu, column %zu)", yp->problem,
			    yp->context, yp->context_mark.line + 1,
			    yp->context_mark.column + 1);
		else
			conf_error_at(ps, yp->problem_mark, "syntax error: %s", yp->problem);
		break;
	default:
		conf_error_file(ps->p, ps->file, "cannot parse the file");
		break;
	}
	return -1;
}

/* Report what YAML allows on a node but the config does not use: anchors
 * and tags other than the standard str, int, seq and map. */
static void
conf_check_props(struct conf_parser *ps, const yaml_event_t *ev)
{
	static const char *const allowed[] = { "str", "int", "seq", "map" };
	const yaml_char_t *anchor, *tag;
	const char *t;

	switch (ev->type) {
	case YAML_SCALAR_EVENT:
		anchor = ev->data.scalar.anchor;
		tag = ev->data.scalar.tag;
		break;
	case YAML_SEQUENCE_START_EVENT:
		anchor = ev->data.sequence_start.anchor;
		tag = ev->data.sequence_start.tag;
		break;
	case YAML_MAPPING_START_EVENT:
		anchor = ev->data.mapping_start.anchor;
		tag = ev->data.mapping_start.tag;
		break;
	default:
		return;
	}
	if (anchor != NULL)
		conf_error_at(ps, ev->start_mark, "anchors are not supported (&%s)",
		    (const char *)anchor);
	if (tag == NULL)
		return;
	t = (const char *)tag;
	if (strncmp(t, CONF_STD_TAG, CONF_STD_TAG_LEN) == 0) {
		for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
			if (strcmp(t + CONF_STD_TAG_LEN, allowed[i]) == 0)
				return;
		conf_error_at(ps, ev->start_mark, "tag '!!%s' is not supported",
		    t + CONF_STD_TAG_LEN);
		return;
	}
	conf_error_at(ps, ev->start_mark, "tag '%s' is not supported", t);
}

/* Whether scalar ev carries the tag !!name. */
static bool
conf_has_tag(const yaml_event_t *ev, const char *name)
{
	const char *t = (const char *)ev->data.scalar.tag;

	return t != NULL && strncmp(t, CONF_STD_TAG, CONF_STD_TAG_LEN) == 0 &&
	    strcmp(t + CONF_STD_TAG_LEN, name) == 0;
}

/* Consume the rest of the node whose first event is ev (already read). */
static int
conf_skip(struct conf_parser *ps, const yaml_event_t *ev)
{
	yaml_event_t e;
	int depth;

	if (ev->type != YAML_SEQUENCE_START_EVENT && ev->type != YAML_MAPPING_START_EVENT)
		return 0;
	for (depth = 1; depth > 0;) {
		if (conf_next(ps, &e) < 0)
			return -1;
		if (e.type == YAML_SEQUENCE_START_EVENT || e.type == YAML_MAPPING_START_EVENT)
			depth++;
		else if (e.type == YAML_SEQUENCE_END_EVENT || e.type == YAML_MAPPING_END_EVENT)
			depth--;
		yaml_event_delete(&e);
	}
	return 0;
}

/* The directive called name, or NULL. */
static const struct conf_directive *
conf_find(const char *name)
{
	for (size_t i = 0; i < CONF_NDIRECTIVES; i++)
		if (strcmp(conf_directives[i].name, name) == 0)
			return &conf_directives[i];
	return NULL;
}

/* Whether name is a section: the start of some directive names. */
static bool
conf_is_section(const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < CONF_NDIRECTIVES; i++)
		if (strncmp(conf_directives[i].name, name, n) == 0 &&
		    conf_directives[i].name[n] == '.')
			return true;
	return false;
}

/* The long long field of directive d in p. */
static long long *
conf_ll(struct conf_priv *p, const struct conf_directive *d)
{
	return (long long *)(void *)((char *)p + d->off);
}

/* The string field of directive d in p. */
static char **
conf_str(struct conf_priv *p, const struct conf_directive *d)
{
	return (char **)(void *)((char *)p + d->off);
}

/* The port field of CONF_T_SERVER directive d in p. */
static long long *
conf_port(struct conf_priv *p, const struct conf_directive *d)
{
	return (long long *)(void *)((char *)p + d->portoff);
}

/* Free a secret string after wiping it; *s becomes NULL. */
static void
conf_free_secret(char **s)
{
	if (*s != NULL)
		explicit_bzero(*s, strlen(*s));
	free(*s);
	*s = NULL;
}

/* Parse a decimal integer: optional sign, digits, no leading zero. 0, -1 if
 * it is not one, -2 if it does not fit a long long. */
static int
conf_parse_ll(const char *s, long long *out)
{
	bool neg = false;
	long long v = 0;
	const char *d;

	if (*s == '-' || *s == '+')
		neg = *s++ == '-';
	if (!isdigit((unsigned char)*s) || (s[0] == '0' && s[1] != '\0'))
		return -1;
	for (d = s; isdigit((unsigned char)*d); d++)
		;
	if (*d != '\0')
		return -1;
	for (; *s != '\0'; s++) {
		int digit = *s - '0';
		if (v > (LLONG_MAX - digit) / 10)
			return -2;
		v = v * 10 + digit;
	}
	*out = neg ? -v : v;
	return 0;
}

/* Parse octal permission bits ("0660", "660"). 0, -1 if not octal, -2 if
 * too large to be a mode. */
static int
conf_parse_mode(const char *s, long long *out)
{
	long long v = 0;

	if (*s == '\0')
		return -1;
	for (const char *d = s; *d != '\0'; d++)
		if (*d < '0' || *d > '7')
			return -1;
	for (; *s != '\0'; s++) {
		v = v * 8 + (*s - '0');
		if (v > 07777777)
			return -2;
	}
	*out = v;
	return 0;
}

/* Resolve a file name given in the config: relative ones are taken from the
 * directory of the config file. Returns a string the caller frees, or NULL. */
static char *
conf_resolve(const char *conffile, const char *name)
{
	const char *slash = strrchr(conffile, '/');
	char *out;

	if (name[0] == '/' || slash == NULL)
		return strdup(name);
	if (asprintf(&out, "%.*s/%s", (int)(slash - conffile), conffile, name) < 0)
		return NULL;
	return out;
}

/* Read the password in file: its whole content without the line end(s) at the
 * end. Returns a string the caller frees, or NULL with why set to a
 * static sentence (or to "" with errno set for a system error). */
static char *
conf_read_password(const char *file, const char **why)
{
	char buf[CONF_PASSWORD_MAX + 1];
	char *pw = NULL;
	FILE *fp;
	size_t n;
	bool big;
	int err;

	*why = "";
	if ((fp = fopen(file, "re")) == NULL)
		return NULL;
	n = fread(buf, 1, sizeof(buf), fp);
	err = ferror(fp) ? errno : 0;
	fclose(fp);
	big = n > CONF_PASSWORD_MAX;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	if (err != 0)
		*why = "";	/* errno says why */
	else if (big)
		*why = "is larger than 4096 bytes";
	else if (n == 0)
		*why = "is empty";
	else if (memchr(buf, '\0', n) != NULL)
		*why = "contains a NUL byte";
	else if ((pw = strndup(buf, n)) == NULL)
		*why = "cannot be read: out of memory";
	explicit_bzero(buf, sizeof(buf));
	errno = err;
	return pw;
}

/* Parse the address of a server to connect to: "host:port" or "[v6]:port",
 * port 1 to 65535. 0, or -1 with why set to a static sentence. */
static int
conf_parse_server(const char *s, struct addr *out, const char **why)
{
	if (strncmp(s, "unix:", 5) == 0) {
		*why = "a Unix socket is not supported here (expected host:port or [v6addr]:port)";
		return -1;
	}
	if (*s != '\0' && *s != '[' && strchr(s, ':') == NULL) {
		*why = "missing port (expected host:port or [v6addr]:port)";
		return -1;
	}
	if (addr_parse(s, ADDR_PORT_REQUIRED, out, why) < 0)
		return -1;
	if (out->port == 0) {
		*why = "the port must be between 1 and 65535";
		return -1;
	}
	return 0;
}

/* Whether the addresses a and b would be the same listener (port 0 picks a
 * new port each time, so those never clash). */
static bool
conf_addr_same(const struct addr *a, const struct addr *b)
{
	if (a->kind != b->kind)
		return false;
	if (a->kind == ADDR_UNIX)
		return strcmp(a->path, b->path) == 0;
	return a->port != 0 && a->port == b->port && strcasecmp(a->host, b->host) == 0;
}

/* Whether addr is already one of list's n addresses. */
static bool
conf_addr_listed(char **list, size_t n, const struct addr *addr)
{
	struct addr other;
	const char *why;

	for (size_t i = 0; i < n; i++)
		if (addr_parse(list[i], ADDR_PORT_REQUIRED, &other, &why) == 0 && conf_addr_same(&other, addr))
			return true;
	return false;
}

/* Free a list of n strings and the list. */
static void
conf_free_list(char **list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

/* Append a copy of s to *list (n entries). 0, or -1 out of memory. */
static int
conf_list_add(char ***list, size_t *n, const char *s)
{
	char **l = reallocarray(*list, *n + 1, sizeof(*l));

	if (l == NULL)
		return -1;
	*list = l;
	if ((l[*n] = strdup(s)) == NULL)
		return -1;
	(*n)++;
	return 0;
}

/* Record that directive d was set by the file, its value at mark m (unless
 * the command line set it, which wins). */
static void
conf_mark_set(struct conf_parser *ps, const struct conf_directive *d, yaml_mark_t m)
{
	size_t i = (size_t)(d - conf_directives);

	if (ps->p->src[i] == CONF_SRC_CMDLINE)
		return;
	ps->p->src[i] = CONF_SRC_FILE;
	ps->p->val[i].line = m.line + 1;
	ps->p->val[i].col = m.column + 1;
}

/* Whether the command line already set d, so the file's value only gets
 * checked. */
static bool
conf_by_cmdline(struct conf_parser *ps, const struct conf_directive *d)
{
	return ps->p->src[d - conf_directives] == CONF_SRC_CMDLINE;
}

/* The list value of "listen" (ev is its first event): check every address
 * and keep the list if all of them are good, unless the command line gave
 * listeners. */
static int
conf_set_addrlist(struct conf_parser *ps, const struct conf_directive *d, const yaml_event_t *ev)
{
	char what[CONF_QUOTE_MAX + 8], q[CONF_QUOTE_MAX + 4];
	char **list = NULL;
	size_t n = 0;
	yaml_event_t e;
	bool bad = false;
	int rc = 0;

	if (ev->type != YAML_SEQUENCE_START_EVENT) {
		conf_error_at(ps, ev->start_mark, "'%s' must be a list of addresses, not %s",
		    d->name, conf_what(ev, what, sizeof(what)));
		return conf_skip(ps, ev);
	}
	for (;;) {
		struct addr addr;
		const char *why;

		if (conf_next(ps, &e) < 0) {
			rc = -1;
			break;
		}
		if (e.type == YAML_SEQUENCE_END_EVENT) {
			yaml_event_delete(&e);
			break;
		}
		conf_check_props(ps, &e);
		bad = true;
		if (e.type == YAML_ALIAS_EVENT) {
			conf_error_at(ps, e.start_mark, "aliases are not supported (*%s)",
			    (const char *)e.data.alias.anchor);
		} else if (e.type != YAML_SCALAR_EVENT || conf_is_null(&e)) {
			conf_error_at(ps, e.start_mark, "'%s' entries must be addresses, not %s",
			    d->name, conf_what(&e, what, sizeof(what)));
			if (conf_skip(ps, &e) < 0) {
				yaml_event_delete(&e);
				rc = -1;
				break;
			}
		} else if (strlen(conf_text(&e)) != e.data.scalar.length ||
		    addr_parse(conf_text(&e), ADDR_PORT_REQUIRED, &addr, &why) < 0) {
			if (strlen(conf_text(&e)) != e.data.scalar.length)
				why = "it contains a NUL character";
			conf_error_at(ps, e.start_mark, "bad listen address %s: %s",
			    conf_what(&e, what, sizeof(what)), why);
		} else if (conf_addr_listed(list, n, &addr)) {
			conf_error_at(ps, e.start_mark, "duplicate listen address '%s'",
			    conf_quote(addr.text, strlen(addr.text), q, sizeof(q)));
		} else if (conf_list_add(&list, &n, conf_text(&e)) < 0) {
			ps->p->nomem = true;
		} else
			bad = false;
		yaml_event_delete(&e);
	}
	if (rc == 0 && !bad && !conf_by_cmdline(ps, d)) {
		struct conf *c = &ps->p->pub;
		conf_free_list(c->listen, c->nlisten);
		c->listen = list;
		c->nlisten = n;
		conf_mark_set(ps, d, ev->start_mark);
	} else
		conf_free_list(list, n);
	return rc;
}

/* A number (CONF_T_INT or CONF_T_MODE) in scalar ev for directive d. */
static void
conf_set_number(struct conf_parser *ps, const struct conf_directive *d, const yaml_event_t *ev)
{
	char what[CONF_QUOTE_MAX + 8];
	const char *text = conf_text(ev);
	long long v = 0;
	int rc;

	if (d->type == CONF_T_INT) {
		if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE && !conf_has_tag(ev, "int")) {
			conf_error_at(ps, ev->start_mark,
			    "'%s' must be a decimal integer, not a quoted string", d->name);
			return;
		}
		if (conf_has_tag(ev, "str")) {
			conf_error_at(ps, ev->start_mark,
			    "'%s' must be a decimal integer, not a string", d->name);
			return;
		}
		rc = conf_is_null(ev) ? -1 : conf_parse_ll(text, &v);
	} else
		rc = conf_is_null(ev) ? -1 : conf_parse_mode(text, &v);
	if (rc == 0 && strlen(text) != ev->data.scalar.length)
		rc = -1;
	if (rc == -1) {
		conf_error_at(ps, ev->start_mark, "'%s' must be %s, not %s", d->name,
		    d->type == CONF_T_INT ? "a decimal integer" : "an octal mode such as 0660",
		    conf_what(ev, what, sizeof(what)));
		return;
	}
	if (rc == -2 || v < d->min || v > d->max) {
		conf_quote(text, strlen(text), what, sizeof(what));
		if (d->type == CONF_T_INT)
			conf_error_at(ps, ev->start_mark, "'%s' must be between %lld and %lld, not %s",
			    d->name, d->min, d->max, what);
		else
			conf_error_at(ps, ev->start_mark, "'%s' must be between %#llo and %#llo, not %s",
			    d->name, d->min, d->max, what);
		return;
	}
	if (!conf_by_cmdline(ps, d))
		*conf_ll(ps->p, d) = v;
	conf_mark_set(ps, d, ev->start_mark);
}

/* Replace the string of directive d with a copy of s ("" stores NULL). */
static void
conf_store_str(struct conf_priv *p, const struct conf_directive *d, const char *s)
{
	char **field = conf_str(p, d);
	char *copy = NULL;

	if (*s != '\0' && (copy = strdup(s)) == NULL) {
		p->nomem = true;
		return;
	}
	free(*field);
	*field = copy;
}

/* Store server address a as the value of CONF_T_SERVER directive d. */
static void
conf_store_server(struct conf_priv *p, const struct conf_directive *d,
    const struct addr *a)
{
	conf_store_str(p, d, a->host);
	*conf_port(p, d) = a->port;
}

/* A string (CONF_T_STR, CONF_T_SHORTSTR, CONF_T_PASSFILE, CONF_T_BACKEND,
 * CONF_T_LEVEL, CONF_T_SERVER) in scalar ev for directive d. */
static void
conf_set_string(struct conf_parser *ps, const struct conf_directive *d, const yaml_event_t *ev)
{
	char q[CONF_QUOTE_MAX + 4];
	const char *text = conf_is_null(ev) ? "" : conf_text(ev);
	struct conf_priv *p = ps->p;

	if (strlen(conf_text(ev)) != ev->data.scalar.length) {
		conf_error_at(ps, ev->start_mark, "'%s' must not contain a NUL character", d->name);
		return;
	}
	switch (d->type) {
	case CONF_T_BACKEND: {
		size_t i;
		for (i = 0; conf_backends[i] != NULL; i++)
			if (strcmp(text, conf_backends[i]) == 0)
				break;
		if (conf_backends[i] == NULL) {
			char names[128] = "";
			size_t len = 0;
			for (i = 0; conf_backends[i] != NULL && len < sizeof(names); i++)
				len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%s",
				    i == 0 ? "" : conf_backends[i + 1] != NULL ? ", " : " or ",
				    conf_backends[i]);
			conf_error_at(ps, ev->start_mark, "unknown backend type '%s' (expected %s)",
			    conf_quote(text, strlen(text), q, sizeof(q)), names);
			return;
		}
		break;
	}
	case CONF_T_LEVEL:
		if (log_level_parse(text) < 0) {
			conf_error_at(ps, ev->start_mark,
			    "unknown log level '%s' (expected %s, %s, %s or %s)",
			    conf_quote(text, strlen(text), q, sizeof(q)),
			    log_level_name(LOG_LEVEL_DEBUG), log_level_name(LOG_LEVEL_INFO),
			    log_level_name(LOG_LEVEL_WARN), log_level_name(LOG_LEVEL_ERROR));
			return;
		}
		break;
	case CONF_T_PASSFILE:
		if (*text != '\0') {
			const char *why;
			char *file = conf_resolve(p->pub.path, text);
			char *pw = file != NULL ? conf_read_password(file, &why) : NULL;

			if (file == NULL) {
				p->nomem = true;
				return;
			}
			if (pw == NULL) {
				if (*why == '\0')
					conf_error_at(ps, ev->start_mark,
					    "cannot read password file '%s': %s",
					    conf_quote(file, strlen(file), q, sizeof(q)),
					    strerror(errno));
				else
					conf_error_at(ps, ev->start_mark, "password file '%s' %s",
					    conf_quote(file, strlen(file), q, sizeof(q)), why);
				free(file);
				return;
			}
			if (conf_by_cmdline(ps, d)) {	/* checked, not used */
				conf_free_secret(&pw);
				free(file);
				return;
			}
			conf_free_secret(&p->secret[d - conf_directives]);
			p->secret[d - conf_directives] = pw;
			free(*conf_str(p, d));
			*conf_str(p, d) = file;
			conf_mark_set(ps, d, ev->start_mark);
			return;
		}
		if (!conf_by_cmdline(ps, d))
			conf_free_secret(&p->secret[d - conf_directives]);
		break;
	case CONF_T_SHORTSTR:
		if (*text == '\0') {
			conf_error_at(ps, ev->start_mark, "'%s' must not be empty", d->name);
			return;
		}
		if (strlen(text) > (size_t)d->max) {
			conf_error_at(ps, ev->start_mark, "'%s' must be at most %lld bytes, not %zu",
			    d->name, d->max, strlen(text));
			return;
		}
		break;
	case CONF_T_SERVER: {
		struct addr a;
		const char *why;

		if (conf_parse_server(text, &a, &why) < 0) {
			conf_error_at(ps, ev->start_mark, "bad backend address '%s': %s",
			    conf_quote(text, strlen(text), q, sizeof(q)), why);
			return;
		}
		if (!conf_by_cmdline(ps, d))
			conf_store_server(p, d, &a);
		conf_mark_set(ps, d, ev->start_mark);
		return;
	}
	default:
		break;
	}
	if (!conf_by_cmdline(ps, d))
		conf_store_str(p, d, text);
	conf_mark_set(ps, d, ev->start_mark);
}

/* The value of directive d (ev is its first event). */
static int
conf_set(struct conf_parser *ps, const struct conf_directive *d, const yaml_event_t *ev)
{
	char what[CONF_QUOTE_MAX + 8];
	const char *want;

	if (d->type == CONF_T_ADDRLIST)
		return conf_set_addrlist(ps, d, ev);
	if (ev->type == YAML_SCALAR_EVENT) {
		if (d->type == CONF_T_INT || d->type == CONF_T_MODE)
			conf_set_number(ps, d, ev);
		else
			conf_set_string(ps, d, ev);
		return 0;
	}
	switch (d->type) {
	case CONF_T_INT:
		want = "a decimal integer";
		break;
	case CONF_T_MODE:
		want = "an octal mode such as 0660";
		break;
	default:
		want = "a string";
		break;
	}
	conf_error_at(ps, ev->start_mark, "'%s' must be %s, not %s", d->name, want,
	    conf_what(ev, what, sizeof(what)));
	return conf_skip(ps, ev);
}

static int conf_parse_mapping(struct conf_parser *, const char *);

/* The value (first event ev) of the key called name (event key). Problems
 * are reported in the order of their positions: the key's, then the value's. */
static int
conf_parse_value(struct conf_parser *ps, const char *name, const yaml_event_t *key,
    const yaml_event_t *ev)
{
	char what[CONF_QUOTE_MAX + 8], q[CONF_QUOTE_MAX + 4];
	bool dotted = strchr(conf_text(key), '.') != NULL;
	const struct conf_directive *d = dotted ? NULL : conf_find(name);
	bool section = !dotted && d == NULL && conf_is_section(name);

	if (d == NULL && !section) {
		if (dotted && (conf_find(name) != NULL || conf_is_section(name)))
			conf_error_at(ps, key->start_mark,
			    "unknown key '%s' (a dot does not nest keys: write a mapping)",
			    conf_quote(name, strlen(name), q, sizeof(q)));
		else
			conf_error_at(ps, key->start_mark, "unknown key '%s'",
			    conf_quote(name, strlen(name), q, sizeof(q)));
	}
	conf_check_props(ps, ev);
	if (ev->type == YAML_ALIAS_EVENT) {
		conf_error_at(ps, ev->start_mark, "aliases are not supported (*%s)",
		    (const char *)ev->data.alias.anchor);
		return 0;
	}
	if (d == NULL && !section)
		return conf_skip(ps, ev);
	if (d != NULL)
		return conf_set(ps, d, ev);
	/* a section: a mapping, or nothing at all */
	if (ev->type == YAML_MAPPING_START_EVENT)
		return conf_parse_mapping(ps, name);
	if (conf_is_null(ev))
		return 0;
	conf_error_at(ps, ev->start_mark, "'%s' must be a mapping, not %s", name,
	    conf_what(ev, what, sizeof(what)));
	return conf_skip(ps, ev);
}

/* The keys and values of a mapping whose start event was read, up to its
 * end; prefix is the dotted name of the mapping ("" at the top). */
static int
conf_parse_mapping(struct conf_parser *ps, const char *prefix)
{
	char what[CONF_QUOTE_MAX + 8];
	struct conf_seen *seen = NULL, *s;
	size_t nseen = 0;
	yaml_event_t key, val;
	char *name;
	int rc = 0;

	for (;;) {
		if (conf_next(ps, &key) < 0) {
			rc = -1;
			break;
		}
		if (key.type == YAML_MAPPING_END_EVENT) {
			yaml_event_delete(&key);
			break;
		}
		conf_check_props(ps, &key);
		name = NULL;
		if (key.type == YAML_ALIAS_EVENT) {
			conf_error_at(ps, key.start_mark, "aliases are not supported (*%s)",
			    (const char *)key.data.alias.anchor);
		} else if (key.type != YAML_SCALAR_EVENT) {
			conf_error_at(ps, key.start_mark, "a key must be a scalar, not %s",
			    conf_what(&key, what, sizeof(what)));
			if (conf_skip(ps, &key) < 0) {
				yaml_event_delete(&key);
				rc = -1;
				break;
			}
		} else if (asprintf(&name, "%s%s%s", prefix, *prefix != '\0' ? "." : "",
		    conf_text(&key)) < 0) {
			name = NULL;
			ps->p->nomem = true;
		}
		if (conf_next(ps, &val) < 0) {
			yaml_event_delete(&key);
			free(name);
			rc = -1;
			break;
		}
		s = NULL;
		for (size_t i = 0; name != NULL && i < nseen; i++)
			if (strcmp(seen[i].name, name) == 0)
				s = &seen[i];
		if (name == NULL) {
			conf_check_props(ps, &val);
			rc = conf_skip(ps, &val);
		} else if (s != NULL) {
			char q[CONF_QUOTE_MAX + 4];
			conf_error_at(ps, key.start_mark, "duplicate key '%s' (first at line %zu)",
			    conf_quote(name, strlen(name), q, sizeof(q)), s->line);
			conf_check_props(ps, &val);
			rc = conf_skip(ps, &val);
		} else {
			s = reallocarray(seen, nseen + 1, sizeof(*seen));
			if (s != NULL) {
				seen = s;
				seen[nseen].name = name;
				seen[nseen++].line = key.start_mark.line + 1;
			} else
				ps->p->nomem = true;
			rc = conf_parse_value(ps, name, &key, &val);
			if (s != NULL)
				name = NULL;	/* now owned by seen[] */
		}
		free(name);
		yaml_event_delete(&key);
		yaml_event_delete(&val);
		if (rc < 0)
			break;
	}
	for (size_t i = 0; i < nseen; i++)
		free(seen[i].name);
	free(seen);
	return rc;
}

/* The whole stream: nothing, or one document whose top is a mapping. */
static void
conf_parse_stream(struct conf_parser *ps)
{
	char what[CONF_QUOTE_MAX + 8];
	yaml_event_t ev;

	if (conf_next(ps, &ev) < 0)		/* stream start */
		return;
	yaml_event_delete(&ev);
	if (conf_next(ps, &ev) < 0)
		return;
	if (ev.type == YAML_STREAM_END_EVENT) {	/* an empty file */
		yaml_event_delete(&ev);
		return;
	}
	yaml_event_delete(&ev);			/* document start */
	if (conf_next(ps, &ev) < 0)
		return;
	conf_check_props(ps, &ev);
	if (ev.type == YAML_MAPPING_START_EVENT) {
		if (conf_parse_mapping(ps, "") < 0) {
			yaml_event_delete(&ev);
			return;
		}
	} else if (ev.type == YAML_ALIAS_EVENT) {
		conf_error_at(ps, ev.start_mark, "aliases are not supported (*%s)",
		    (const char *)ev.data.alias.anchor);
	} else if (!conf_is_null(&ev)) {
		conf_error_at(ps, ev.start_mark, "the top level must be a mapping, not %s",
		    conf_what(&ev, what, sizeof(what)));
		if (conf_skip(ps, &ev) < 0) {
			yaml_event_delete(&ev);
			return;
		}
	}
	yaml_event_delete(&ev);
	if (conf_next(ps, &ev) < 0)		/* document end */
		return;
	yaml_event_delete(&ev);
	if (conf_next(ps, &ev) < 0)
		return;
	if (ev.type == YAML_DOCUMENT_START_EVENT)
		conf_error_at(ps, ev.start_mark, "several documents in one file are not supported");
	yaml_event_delete(&ev);
}

struct conf *
conf_create(void)
{
	struct conf_priv *p = calloc(1, sizeof(*p));

	if (p == NULL)
		return NULL;
	for (size_t i = 0; i < CONF_NDIRECTIVES; i++) {
		const struct conf_directive *d = &conf_directives[i];
		if (d->type == CONF_T_INT || d->type == CONF_T_MODE)
			*conf_ll(p, d) = CONF_UNSET;
		else if (d->type == CONF_T_SERVER)
			*conf_port(p, d) = CONF_UNSET;
	}
	return &p->pub;
}

void
conf_destroy(struct conf *c)
{
	struct conf_priv *p;

	if (c == NULL)
		return;
	p = conf_priv(c);
	free(c->path);
	conf_free_list(c->listen, c->nlisten);
	conf_free_secret(&c->password);
	free(c->password_file);
	for (size_t i = 0; i < CONF_NDIRECTIVES; i++)
		conf_free_secret(&p->secret[i]);
	free(c->backend_type);
	free(c->backend_host);
	conf_free_secret(&c->backend_password);
	free(p->backend_password_file);
	free(c->backend_prefix);
	free(c->log_level);
	free(c->log_file);
	conf_free_list(c->errors, c->nerrors);
	free(p);
}

/* Parse path into c; see the header. A file name that cannot be opened or is
 * not a regular file is reported as "file: message". */
int
conf_load(struct conf *c, const char *path)
{
	struct conf_priv *p = conf_priv(c);
	struct conf_parser ps;
	size_t before = c->nerrors;
	struct stat st;
	FILE *fp;

	free(c->path);
	if ((c->path = strdup(path)) == NULL) {
		p->nomem = true;
		return -1;
	}
	if ((fp = fopen(path, "re")) == NULL) {
		conf_error_file(p, path, "cannot open the file: %s", strerror(errno));
		return -1;
	}
	if (fstat(fileno(fp), &st) < 0 || !S_ISREG(st.st_mode)) {
		conf_error_file(p, path, "not a regular file");
		fclose(fp);
		return -1;
	}
	memset(&ps, 0, sizeof(ps));
	ps.p = p;
	ps.file = c->path;
	if (!yaml_parser_initialize(&ps.yp)) {
		p->nomem = true;
		fclose(fp);
		return -1;
	}
	yaml_parser_set_input_file(&ps.yp, fp);
	conf_parse_stream(&ps);
	yaml_parser_delete(&ps.yp);
	fclose(fp);
	return c->nerrors > before || p->nomem ? -1 : 0;
}

int
conf_override_listen(struct conf *c, const char *addr)
{
	struct conf_priv *p = conf_priv(c);
	size_t i = (size_t)(conf_find("listen") - conf_directives);
	char q[CONF_QUOTE_MAX + 4];
	struct addr a;
	const char *why;

	if (addr_parse(addr, ADDR_PORT_REQUIRED, &a, &why) < 0) {
		conf_error_cmdline(p, "bad listen address '%s': %s",
		    conf_quote(addr, strlen(addr), q, sizeof(q)), why);
		return -1;
	}
	if (p->src[i] != CONF_SRC_CMDLINE) {
		conf_free_list(c->listen, c->nlisten);
		c->listen = NULL;
		c->nlisten = 0;
		p->src[i] = CONF_SRC_CMDLINE;
	}
	if (conf_addr_listed(c->listen, c->nlisten, &a)) {
		conf_error_cmdline(p, "duplicate listen address '%s'",
		    conf_quote(addr, strlen(addr), q, sizeof(q)));
		return -1;
	}
	if (conf_list_add(&c->listen, &c->nlisten, addr) < 0) {
		p->nomem = true;
		return -1;
	}
	return 0;
}

/* Index of the directive called name, which exists. */
static size_t
conf_index(const char *name)
{
	return (size_t)(conf_find(name) - conf_directives);
}

/* Copy url into buf for a message, with the user and password (what is
 * between "://" and the last '@') hidden: "redis://:***@host:6379". A user ""
 * or "default" is kept, as it tells nothing secret. Returns buf. */
static const char *
conf_url_mask(const char *url, char *buf, size_t size)
{
	const char *sep = strstr(url, "://");
	const char *info = sep != NULL ? sep + 3 : url;
	const char *at = strrchr(info, '@');
	size_t infolen, userlen;

	if (at == NULL) {
		snprintf(buf, size, "%s", url);
		return buf;
	}
	infolen = (size_t)(at - info);
	userlen = strcspn(info, ":");
	if (userlen > infolen)
		userlen = infolen;
	if (userlen == 0 || (userlen == 7 && strncmp(info, "default", 7) == 0))
		snprintf(buf, size, "%.*s%s%s", (int)(info + userlen - url), url,
		    userlen < infolen ? ":***" : "", at);
	else
		snprintf(buf, size, "%.*s***%s", (int)(info - url), url, at);
	return buf;
}

/* Decode the n bytes at s, a part of a URL with %XX escapes. 0 with *out a
 * string the caller frees (wiping it if secret), -1 for a bad escape, -2 for
 * an escaped NUL byte, -3 out of memory. */
static int
conf_url_decode(const char *s, size_t n, char **out)
{
	char *d = malloc(n + 1);
	size_t j = 0;

	*out = NULL;
	if (d == NULL)
		return -3;
	for (size_t i = 0; i < n; i++) {
		int hi, lo;

		if (s[i] != '%') {
			d[j++] = s[i];
			continue;
		}
		if (n - i < 3 || !isxdigit((unsigned char)s[i + 1]) ||
		    !isxdigit((unsigned char)s[i + 2])) {
			explicit_bzero(d, n + 1);
			free(d);
			return -1;
		}
		hi = isdigit((unsigned char)s[i + 1]) ? s[i + 1] - '0' :
		    tolower((unsigned char)s[i + 1]) - 'a' + 10;
		lo = isdigit((unsigned char)s[i + 2]) ? s[i + 2] - '0' :
		    tolower((unsigned char)s[i + 2]) - 'a' + 10;
		if (hi == 0 && lo == 0) {
			explicit_bzero(d, n + 1);
			free(d);
			return -2;
		}
		d[j++] = (char)(hi * 16 + lo);
		i += 2;
	}
	d[j] = '\0';
	*out = d;
	return 0;
}

/* A redis:// URL taken apart by conf_parse_redis_url(). */
struct conf_url {
	struct addr addr;	/* the server */
	char *password;		/* AUTH password, NULL for none; the caller wipes
				 * and frees it */
	long long db;		/* SELECT db */
};

/* Parse "redis://[[default]:password@]host[:port][/db]" (the scheme already
 * checked, in any case). The user, if given, must be "default"; user and
 * password may hold %XX escapes; the port defaults to 6379 and db to 0.
 * 0, or -1 with why set to a static sentence that never holds the password. */
static int
conf_parse_redis_url(const char *url, struct conf_url *out, const char **why)
{
	const struct conf_directive *dbdir = &conf_directives[conf_index("backend.db")];
	const char *s = url + strlen(CONF_REDIS_SCHEME);
	char hostport[sizeof(out->addr.text)];
	const char *at, *slash, *rb;
	bool hasport;
	size_t n;

	memset(out, 0, sizeof(*out));
	if ((at = strrchr(s, '@')) != NULL) {
		const char *colon = memchr(s, ':', (size_t)(at - s));
		size_t ulen = colon != NULL ? (size_t)(colon - s) : (size_t)(at - s);
		char *user;
		bool known;
		int rc;

		if ((rc = conf_url_decode(s, ulen, &user)) < 0) {
			*why = rc == -3 ? "out of memory" : "bad %-escape in the user name";
			return -1;
		}
		known = *user == '\0' || strcmp(user, "default") == 0;
		free(user);
		if (!known) {
			*why = colon != NULL ? "only the user 'default' is supported" :
			    "only the user 'default' is supported (a password goes after a "
			    "colon: redis://:password@host:port)";
			return -1;
		}
		if (colon != NULL) {
			rc = conf_url_decode(colon + 1, (size_t)(at - colon - 1), &out->password);
			if (rc < 0) {
				*why = rc == -3 ? "out of memory" : rc == -2 ?
				    "the password contains a NUL byte" :
				    "bad %-escape in the password";
				return -1;
			}
			if (*out->password == '\0')
				conf_free_secret(&out->password);
		}
		s = at + 1;
	}
	if (strpbrk(s, "?#") != NULL) {
		*why = "query parameters are not supported";
		goto fail;
	}
	slash = strchr(s, '/');
	n = slash != NULL ? (size_t)(slash - s) : strlen(s);
	if (n == 0) {
		*why = "the host is missing";
		goto fail;
	}
	if (n + sizeof(":65535") > sizeof(hostport)) {
		*why = "the address is too long";
		goto fail;
	}
	memcpy(hostport, s, n);
	hostport[n] = '\0';
	if (hostport[0] == '[')
		hasport = (rb = strchr(hostport, ']')) != NULL && rb[1] != '\0';
	else
		hasport = strchr(hostport, ':') != NULL;
	if (!hasport)
		snprintf(hostport + n, sizeof(hostport) - n, ":%d", CONF_REDIS_PORT);
	if (conf_parse_server(hostport, &out->addr, why) < 0)
		goto fail;
	if (slash != NULL && slash[1] != '\0') {
		int rc = -1;

		if (isdigit((unsigned char)slash[1]))
			rc = conf_parse_ll(slash + 1, &out->db);
		if (rc == -1) {
			*why = "the database is not a number (expected /0, /1, ...)";
			goto fail;
		}
		if (rc == -2 || out->db < dbdir->min || out->db > dbdir->max) {
			*why = "the database number is out of range (0..1000000)";
			goto fail;
		}
	}
	return 0;
fail:
	conf_free_secret(&out->password);
	return -1;
}

/* -b URL; see the header. A redis:// URL sets the backend type, address,
 * password (none if the URL has none, whatever the file says) and db. */
int
conf_override_backend(struct conf *c, const char *url)
{
	static const char *const keys[] = {
		"backend.type", "backend.address", "backend.password",
		"backend.password_file", "backend.db",
	};
	struct conf_priv *p = conf_priv(c);
	const struct conf_directive *type = conf_find("backend.type");
	char masked[512], q[CONF_QUOTE_MAX + 4];
	struct conf_url u;
	const char *why;

	if (strcmp(url, "memory") == 0) {
		conf_store_str(p, type, "memory");
		p->src[type - conf_directives] = CONF_SRC_CMDLINE;
		return p->nomem ? -1 : 0;
	}
	conf_url_mask(url, masked, sizeof(masked));
	conf_quote(masked, strlen(masked), q, sizeof(q));
	if (strncasecmp(url, "rediss://", 9) == 0) {
		conf_error_cmdline(p, "bad redis URL '%s': TLS (rediss://) is not supported", q);
		return -1;
	}
	if (strncasecmp(url, CONF_REDIS_SCHEME, strlen(CONF_REDIS_SCHEME)) != 0) {
		conf_error_cmdline(p, "unknown backend URL '%s' (expected memory or "
		    "redis://host:port)", q);
		return -1;
	}
	if (conf_parse_redis_url(url, &u, &why) < 0) {
		conf_error_cmdline(p, "bad redis URL '%s': %s", q, why);
		return -1;
	}
	conf_store_str(p, type, "redis");
	conf_store_server(p, &conf_directives[conf_index("backend.address")], &u.addr);
	conf_free_secret(&c->backend_password);
	c->backend_password = u.password;
	free(p->backend_password_file);
	p->backend_password_file = NULL;
	conf_free_secret(&p->secret[conf_index("backend.password_file")]);
	c->backend_db = u.db;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		p->src[conf_index(keys[i])] = CONF_SRC_CMDLINE;
	return p->nomem ? -1 : 0;
}

/* Whether directive a was set at a later place of the file than b. */
static bool
conf_later(const struct conf_priv *p, size_t a, size_t b)
{
	return p->val[a].line > p->val[b].line ||
	    (p->val[a].line == p->val[b].line && p->val[a].col > p->val[b].col);
}

/* Give every unset directive its default. */
static void
conf_fill_defaults(struct conf_priv *p)
{
	struct conf *c = &p->pub;

	for (size_t i = 0; i < CONF_NDIRECTIVES; i++) {
		const struct conf_directive *d = &conf_directives[i];
		switch (d->type) {
		case CONF_T_INT:
		case CONF_T_MODE:
			if (*conf_ll(p, d) == CONF_UNSET)
				*conf_ll(p, d) = d->def;
			break;
		case CONF_T_ADDRLIST:
			if (p->src[i] == CONF_SRC_UNSET && c->nlisten == 0 &&
			    conf_list_add(&c->listen, &c->nlisten, d->defstr) < 0)
				p->nomem = true;
			break;
		case CONF_T_SERVER:
			if (*conf_str(p, d) == NULL && d->defstr != NULL) {
				struct addr a;
				const char *why;

				if (conf_parse_server(d->defstr, &a, &why) == 0)
					conf_store_server(p, d, &a);
			}
			break;
		default:
			if (*conf_str(p, d) == NULL && d->defstr != NULL)
				conf_store_str(p, d, d->defstr);
			break;
		}
	}
}

/* Fill the defaults, then check the rules between directives. Returns -1 if
 * c->errors holds any error (from this call or an earlier conf_load() or
 * override) or memory ran out, else 0. */
int
conf_finish(struct conf *c)
{
	struct conf_priv *p = conf_priv(c);
	size_t cmdto = conf_index("backend.command_timeout_ms");
	size_t defttl = conf_index("locks.default_ttl_ms");
	size_t maxttl = conf_index("locks.max_ttl_ms");
	size_t keyb = conf_index("limits.max_key_bytes");
	size_t reqb = conf_index("limits.max_request_bytes");

	conf_fill_defaults(p);

	if (c->nlisten == 0)
		conf_error_dir(p, conf_index("listen"), "'listen' must have at least one address");

	/* a password, or a file holding it; the file's is used from now on */
	for (size_t i = 0; i < CONF_NDIRECTIVES; i++) {
		const struct conf_directive *d = &conf_directives[i];
		size_t j;
		char **pw;

		if (d->type != CONF_T_PASSFILE)
			continue;
		j = conf_index(d->pair);
		pw = conf_str(p, &conf_directives[j]);
		if (*pw != NULL && *conf_str(p, d) != NULL) {
			conf_error_dir(p, conf_later(p, i, j) ? i : j,
			    "'%s' and '%s' cannot both be set", d->pair, d->name);
		} else if (p->secret[i] != NULL) {
			*pw = p->secret[i];
			p->secret[i] = NULL;
		}
	}

	if (c->default_ttl_ms > c->max_ttl_ms)
		conf_error_dir(p, p->src[defttl] == CONF_SRC_FILE ? defttl : maxttl,
		    "'locks.default_ttl_ms' (%lld) must not be greater than "
		    "'locks.max_ttl_ms' (%lld)", c->default_ttl_ms, c->max_ttl_ms);

	if (c->max_key_bytes > c->max_request_bytes - CONF_REQUEST_OVERHEAD)
		conf_error_dir(p, p->src[keyb] == CONF_SRC_FILE ? keyb : reqb,
		    "'limits.max_key_bytes' (%lld) must be at most 'limits.max_request_bytes' "
		    "- %d (%lld)", c->max_key_bytes, CONF_REQUEST_OVERHEAD,
		    c->max_request_bytes - CONF_REQUEST_OVERHEAD);

	/* a lease is renewed every third of its TTL: a renewal that gets no
	 * reply must time out, and be retried, before the lease ends */
	if (c->backend_type != NULL && strcmp(c->backend_type, "redis") == 0 &&
	    c->default_ttl_ms < 3 * c->backend_command_timeout_ms)
		conf_error_dir(p, p->src[cmdto] != CONF_SRC_FILE &&
		    p->src[defttl] == CONF_SRC_FILE ? defttl : cmdto,
		    "'locks.default_ttl_ms' (%lld) must be at least three times "
		    "'backend.command_timeout_ms' (3 x %lld = %lld): a lock is renewed every "
		    "third of its TTL, and a renewal must be able to time out and be retried "
		    "before the lease ends", c->default_ttl_ms, c->backend_command_timeout_ms,
		    3 * c->backend_command_timeout_ms);

	return c->nerrors > 0 || p->nomem ? -1 : 0;
}
