/*
 * conf — the configuration: the YAML file, command-line options, defaults.
 *
 * It owns struct conf, every registered backend's settings struct, the
 * command line's entries and the errors. Every setting is a row of a table
 * (struct conf_setting): conf_table[] here, each backend's ops->settings for
 * its keys under "backend.". It must not know any backend's keys, URL or
 * rules, resolve a name, or stop at the first error.
 *
 * A load reads the file's YAML events, walks them into entries (dotted name,
 * value, position) while reporting what the file's shape gets wrong, then
 * applies each entry through the rows of its name. Command-line options are
 * entries too, applied when given and again after any file, so they win. A
 * row keeps where its value was last given, for the rules between settings.
 * Errors read "file:line:column: message", "command line: message" or
 * "file: message"; a load's errors are sorted by position. A reload is a
 * whole new load; conf_reload() then moves the values of the rows marked
 * reloadable into the config in force, by type and offset, so that what
 * holds pointers into it keeps them.
 */
#include "conf.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <arpa/inet.h>

#include <yaml.h>

#include "backend.h"
#include "log.h"
#include "num.h"
#include "xmalloc.h"

#define CONF_REQUEST_OVERHEAD 32	/* least bytes of a request that are not the key */
#define CONF_SECRET_MAX 4096		/* largest password file */
#define CONF_QUOTE_MAX 48		/* most bytes of a value quoted in a message */
#define CONF_STD_TAG "tag:yaml.org,2002:" /* what libyaml makes of "!!" */
#define CONF_CMDLINE 0			/* the line of the command line, or of nowhere */
#define CONF_WHOLE_FILE SIZE_MAX	/* the line of an error about the whole file */
#define AT_CMDLINE ((struct conf_pos){ CONF_CMDLINE, 0 })
#define AT_MARK(m) ((struct conf_pos){ (m).line + 1, (m).column + 1 })
#define FIELD(base, off) ((void *)((char *)(base) + (off)))

/* The i-th backend conf knows, from 0, NULL past the last: backend_at(),
 * unless a unit test gave its own list to conf_use_backends(). */
static const struct backend_ops *(*conf_backend_at)(size_t) = backend_at;

/* The i-th log level's name, for log.level. */
static const char *
conf_level_choice(size_t i)
{
	return i <= LOG_LEVEL_ERROR ? log_level_name((enum log_level)i) : NULL;
}

/* The i-th TLS version, for tls.min_version. */
static const char *
conf_tls_choice(size_t i)
{
	static const char *const versions[] = { "TLSv1.2", "TLSv1.3" };

	return i < sizeof(versions) / sizeof(versions[0]) ? versions[i] : NULL;
}

/* The i-th registered backend's name, for backend.type. */
static const char *
conf_backend_choice(size_t i)
{
	return conf_backend_at(i) != NULL ? conf_backend_at(i)->name : NULL;
}

/* The i-th form -b takes: a backend's name, or its URL if it takes one. */
static const char *
conf_url_choice(size_t i)
{
	const struct backend_ops *ops = conf_backend_at(i);

	return ops == NULL ? NULL : ops->parse_url != NULL ? ops->url_form : ops->name;
}

#define OFF(field) offsetof(struct conf, field)
#define INT(n, field, lo, hi, d, reload) { .name = n, .type = CONF_INT, .off = OFF(field), \
	.min = lo, .max = hi, .def = d, .reloadable = reload }

static const struct conf_setting conf_table[] = {
	{ .name = "listen", .type = CONF_ADDRLIST, .off = OFF(listen), .count = OFF(nlisten),
	  .defstr = "127.0.0.1:7480" },
	{ .name = "unix_socket_mode", .type = CONF_MODE, .off = OFF(unix_socket_mode), .max = 0777,
	  .def = 0660 },
	{ .name = "unix_socket_group", .type = CONF_GROUP, .off = OFF(unix_socket_gid), .min = 0,
	  .max = 4294967294LL },
	{ .name = "protected_mode", .type = CONF_BOOL, .off = OFF(protected_mode), .min = 0,
	  .max = 1, .def = 1, .reloadable = 1 },
	{ .name = "metrics", .type = CONF_SERVER, .off = OFF(metrics) },
	{ .name = "auth.password", .type = CONF_SECRET, .off = OFF(password), .reloadable = 1 },
	{ .name = "auth.password_file", .type = CONF_SECRET_FILE, .off = OFF(password_file),
	  .pair = "auth.password", .reloadable = 1 },
	{ .name = "auth.admin_password", .type = CONF_SECRET, .off = OFF(admin_password),
	  .reloadable = 1 },
	{ .name = "auth.admin_password_file", .type = CONF_SECRET_FILE,
	  .off = OFF(admin_password_file), .pair = "auth.admin_password", .reloadable = 1 },
	{ .name = "auth.admin_group", .type = CONF_GROUP, .off = OFF(admin_gid), .min = 0,
	  .max = 4294967294LL, .reloadable = 1 },
	{ .name = "backend.type", .type = CONF_ENUM, .off = OFF(backend_type),
	  .choice = conf_backend_choice, .defstr = "memory" },
	INT("locks.default_ttl_ms", default_ttl_ms, 10, 31536000000LL, 30000, 1),
	INT("locks.max_ttl_ms", max_ttl_ms, 10, 31536000000LL, 86400000, 1),
	INT("locks.margin_percent", margin_percent, 1, 50, 10, 1),
	INT("locks.lock_delay_ms", lock_delay_ms, 0, 3600000, 0, 1),
	INT("sessions.idle_timeout_ms", idle_timeout_ms, 0, 31536000000LL, 0, 1),
	INT("sessions.request_timeout_ms", request_timeout_ms, 100, 3600000, 30000, 1),
	INT("sessions.login_timeout_ms", login_timeout_ms, 100, 3600000, 10000, 1),
	INT("sessions.output_timeout_ms", output_timeout_ms, 100, 3600000, 30000, 1),
	INT("sessions.tcp_keepalive_s", tcp_keepalive_s, 0, 32767, 15, 1),
	INT("sessions.tcp_keepalive_interval_s", tcp_keepalive_interval_s, 1, 32767, 5, 1),
	INT("sessions.tcp_keepalive_probes", tcp_keepalive_probes, 1, 127, 3, 1),
	INT("limits.max_clients", max_clients, 1, 1000000, 10000, 1),
	INT("limits.max_key_bytes", max_key_bytes, 1, 536870912LL - CONF_REQUEST_OVERHEAD, 1024, 1),
	INT("limits.max_request_bytes", max_request_bytes, 64, 536870912LL, 65536, 1),
	INT("limits.max_waiters_per_key", max_waiters_per_key, 1, 2147483647, 10000, 1),
	INT("limits.max_locks_per_session", max_locks_per_session, 1, 2147483647, 10000, 1),
	INT("limits.max_keys", max_keys, 1, 2147483647, 1000000, 1),
	INT("limits.max_lockall_keys", max_lockall_keys, 1, 1000, 64, 1),
	INT("limits.max_output_bytes", max_output_bytes, 65536, 2147483647, 33554432, 1),
	{ .name = "tls.listen", .type = CONF_TCPLIST, .off = OFF(tls_listen),
	  .count = OFF(ntls_listen) },
	{ .name = "tls.cert_file", .type = CONF_PATH, .off = OFF(tls_cert_file), .reloadable = 1 },
	{ .name = "tls.key_file", .type = CONF_PATH, .off = OFF(tls_key_file), .reloadable = 1 },
	{ .name = "tls.ca_file", .type = CONF_PATH, .off = OFF(tls_ca_file), .reloadable = 1 },
	{ .name = "tls.min_version", .type = CONF_ENUM, .off = OFF(tls_min_version),
	  .choice = conf_tls_choice, .defstr = "TLSv1.2", .reloadable = 1 },
	INT("tls.handshake_timeout_ms", tls_handshake_timeout_ms, 100, 3600000, 10000, 1),
	{ .name = "log.level", .type = CONF_ENUM, .off = OFF(log_level),
	  .choice = conf_level_choice, .defstr = "info", .reloadable = 1 },
	{ .name = "log.file", .type = CONF_STR, .off = OFF(log_file), .reloadable = 1 },
};

#define NODE(field) offsetof(struct conf_node, field)

/* The keys of a CONF_NODELIST item written as a mapping. */
enum conf_node_key {
	NK_ADDRESS, NK_USERNAME, NK_PASSWORD, NK_PASSWORD_FILE, NK_TLS, NK_TLS_CA_FILE,
	NK_TLS_CERT_FILE, NK_TLS_KEY_FILE, NK_TLS_SERVER_NAME, NK_COUNT
};

/* Their rows, into struct conf_node. The address is parsed as the list's
 * servers are, and password_file reads into password (conf_apply_node). */
static const struct conf_setting conf_node_keys[NK_COUNT] = {
	[NK_ADDRESS] = { .name = "address", .type = CONF_STR, .off = NODE(server) },
	[NK_USERNAME] = { .name = "username", .type = CONF_STR, .off = NODE(username) },
	[NK_PASSWORD] = { .name = "password", .type = CONF_SECRET, .off = NODE(password) },
	[NK_PASSWORD_FILE] = { .name = "password_file", .type = CONF_SECRET_FILE,
	  .off = NODE(password_file) },
	[NK_TLS] = { .name = "tls.enabled", .type = CONF_BOOL, .off = NODE(tls) },
	[NK_TLS_CA_FILE] = { .name = "tls.ca_file", .type = CONF_PATH, .off = NODE(tls_ca_file) },
	[NK_TLS_CERT_FILE] = { .name = "tls.cert_file", .type = CONF_PATH,
	  .off = NODE(tls_cert_file) },
	[NK_TLS_KEY_FILE] = { .name = "tls.key_file", .type = CONF_PATH,
	  .off = NODE(tls_key_file) },
	[NK_TLS_SERVER_NAME] = { .name = "tls.server_name", .type = CONF_STR,
	  .off = NODE(tls_server_name) },
};

/* A place in the file, from 1; or line CONF_CMDLINE, CONF_WHOLE_FILE. */
struct conf_pos {
	size_t line;		/* line */
	size_t col;		/* column, in characters */
};

/* What a value was written as. */
enum conf_shape {
	SH_PLAIN,		/* a scalar without quotes (or from the command line) */
	SH_QUOTED,		/* a quoted scalar */
	SH_STR,			/* a scalar tagged !!str */
	SH_INT,			/* a scalar tagged !!int */
	SH_EMPTY,		/* nothing, ~ or null, without quotes */
	SH_MAPPING,		/* a mapping (kept only as a list's item: see
				 * fields) */
	SH_LIST,		/* a sequence (see the entry's items) */
	SH_BAD			/* an alias or a bad tag, already reported */
};

struct conf_entry;

/* A list of entries. */
struct conf_entries {
	struct conf_entry *v;	/* the entries, in order */
	size_t n;		/* how many */
};

/* One value, or one item of a list. */
struct conf_value {
	enum conf_shape shape;	/* what it was written as */
	char *text;		/* a scalar's text, NUL-terminated; wiped when freed */
	size_t len;		/* its length (a NUL inside makes strlen() shorter) */
	struct conf_pos pos;	/* where it starts */
	struct conf_entries fields; /* a list's item that is a mapping: its
				 * keys in order, dotted names from the item
				 * ("tls", then "tls.enabled", ...), with their
				 * values */
};

/* A key of the file (or a section, to find duplicates), a setting given on
 * the command line, or a key of a list item that is a mapping. */
struct conf_entry {
	char *name;		/* the dotted name */
	struct conf_value v;	/* its value */
	struct conf_value *items; /* SH_LIST: the items */
	size_t nitems;		/* how many */
	struct conf_pos key;	/* where its key is (duplicates name its line) */
	bool dotted;		/* a list item's key that has a dot itself */
};

/* A row of any table, under its full name. */
struct conf_row {
	char *name;		/* full dotted name ("backend." + a backend's row's) */
	const struct conf_setting *s; /* the row */
	size_t table;		/* 0: conf_table[]; i + 1: conf_backend_at(i)'s */
	struct conf_pos pos;	/* where its value was last given (AT_CMDLINE:
				 * on the command line, or nowhere) */
	char *secret;		/* CONF_SECRET_FILE: what the file held, until
				 * conf_finish() moves it to the secret's field */
};

/* The config and what only this file sees of it. */
struct conf_priv {
	struct conf pub;		/* what the header shows; first */
	struct conf_row *rows;		/* every table's rows */
	size_t nrows;			/* how many */
	void **tables;			/* the struct each table fills: &pub, then
					 * each backend's settings (NULL for none) */
	size_t ntables;			/* how many */
	struct conf_entries cmdline;	/* the entries of the command line */
	struct conf_pos *errpos;	/* the position of each error */
};

/* One conf_load() in progress. */
struct conf_parser {
	struct conf_priv *p;		/* the config being filled */
	yaml_event_t *ev;		/* the file's events, up to its end, a second
					 * document or a YAML error */
	size_t nev;			/* how many */
	struct conf_entries file;	/* the entries of the file */
};

/* "file:line:column: msg" (or "command line: msg", "file: msg") for a
 * problem at pos; the caller frees it. */
static char *
conf_where(const struct conf *c, struct conf_pos pos, const char *msg)
{
	return pos.line == CONF_CMDLINE ? xasprintf("command line: %s", msg) :
	    pos.line == CONF_WHOLE_FILE ? xasprintf("%s: %s", c->path, msg) :
	    xasprintf("%s:%zu:%zu: %s", c->path, pos.line, pos.col, msg);
}

/* Append "where: message" to c->errors, pos saying where. Returns -1. */
static int __attribute__((format(printf, 3, 0)))
conf_verror(struct conf_priv *p, struct conf_pos pos, const char *fmt, va_list ap)
{
	struct conf *c = &p->pub;
	char msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	c->errors = xreallocarray(c->errors, c->nerrors + 1, sizeof(*c->errors));
	p->errpos = xreallocarray(p->errpos, c->nerrors + 1, sizeof(*p->errpos));
	p->errpos[c->nerrors] = pos;
	c->errors[c->nerrors++] = conf_where(c, pos, msg);
	return -1;
}

/* conf_verror() with the arguments of fmt. Returns -1. */
static int __attribute__((format(printf, 3, 4)))
conf_error(struct conf_priv *p, struct conf_pos pos, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	(void)conf_verror(p, pos, fmt, ap);
	va_end(ap);
	return -1;
}

/* Sort the errors from the first-th on by position, keeping the order of
 * those at one place. */
static void
conf_sort_errors(struct conf_priv *p, size_t first)
{
	for (size_t i = first + 1; i < p->pub.nerrors; i++)
		for (size_t j = i; j > first; j--) {
			struct conf_pos a = p->errpos[j - 1], b = p->errpos[j];
			char *e = p->pub.errors[j];

			if (a.line < b.line || (a.line == b.line && a.col <= b.col))
				break;
			p->errpos[j - 1] = b;
			p->errpos[j] = a;
			p->pub.errors[j] = p->pub.errors[j - 1];
			p->pub.errors[j - 1] = e;
		}
}

/* Copy at most CONF_QUOTE_MAX bytes of s (len bytes) into buf for a message,
 * control characters as '?', "..." when cut (not inside a UTF-8 sequence). */
static const char *
conf_quote(const char *s, size_t len, char *buf, size_t size)
{
	size_t n = len > CONF_QUOTE_MAX ? CONF_QUOTE_MAX : len;

	if (n + 4 > size)
		n = size - 4;
	while (n > 0 && n < len && ((unsigned char)s[n] & 0xc0) == 0x80)
		n--;
	for (size_t i = 0; i < n; i++)
		buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	memcpy(buf + n, n < len ? "..." : "", n < len ? 4 : 1);
	return buf;
}

/* Describe v for "..., not <what>" messages, into buf. */
static const char *
conf_what(const struct conf_value *v, char *buf, size_t size)
{
	char q[CONF_QUOTE_MAX + 4];

	if (v->shape == SH_MAPPING || v->shape == SH_LIST || v->shape == SH_EMPTY)
		snprintf(buf, size, "%s", v->shape == SH_MAPPING ? "a mapping" :
		    v->shape == SH_LIST ? "a list" : "an empty value");
	else
		snprintf(buf, size, "'%s'", conf_quote(v->text, v->len, q, sizeof(q)));
	return buf;
}

/* Join choice(0), choice(1), ... as "a, b or c" into buf. */
static const char *
conf_join(const char *(*choice)(size_t), char *buf, size_t size)
{
	size_t len = 0;

	buf[0] = '\0';
	for (size_t i = 0; choice(i) != NULL && len < size; i++)
		len += (size_t)snprintf(buf + len, size - len, "%s%s", i == 0 ? "" :
		    choice(i + 1) != NULL ? ", " : " or ", choice(i));
	return buf;
}

/* Whether row s holds a list: an array at .off (char **, or struct
 * conf_node * for a CONF_NODELIST), its count at .count. */
static bool
conf_is_list(const struct conf_setting *s)
{
	return s->type == CONF_ADDRLIST || s->type == CONF_TCPLIST ||
	    s->type == CONF_SERVERLIST || s->type == CONF_NODELIST;
}

/* Whether row s holds a long long (CONF_UNSET while unset). */
static bool
conf_is_number(const struct conf_setting *s)
{
	return s->type == CONF_INT || s->type == CONF_MODE || s->type == CONF_GROUP ||
	    s->type == CONF_BOOL;
}

/* Replace the string in field with a copy of s (NULL for none), the old one
 * wiped first: it may be a secret. */
static void
conf_set_str(char **field, const char *s)
{
	if (*field != NULL)
		explicit_bzero(*field, strlen(*field));
	free(*field);
	*field = s != NULL ? xstrdup(s) : NULL;
}

static void conf_node_clear(struct conf_node *);

/* Free the value of row s in base, its strings wiped (they may be secrets):
 * none is left, a list empty. */
static void
conf_value_free(const struct conf_setting *s, void *base)
{
	void *field = FIELD(base, s->off);
	size_t *count = conf_is_list(s) ? FIELD(base, s->count) : NULL;

	if (count == NULL) {
		if (!conf_is_number(s) && s->type != CONF_SERVER)
			conf_set_str(field, NULL);
		return;
	}
	for (; *count > 0; --*count)
		if (s->type == CONF_NODELIST)
			conf_node_clear(&(*(struct conf_node **)field)[*count - 1]);
		else
			free((*(char ***)field)[*count - 1]);
	free(*(void **)field);
	*(void **)field = NULL;
}

/* Free what node nd holds, leaving none of its fields set. */
static void
conf_node_clear(struct conf_node *nd)
{
	for (size_t k = 0; k < NK_COUNT; k++)
		conf_value_free(&conf_node_keys[k], nd);
	nd->tls = CONF_UNSET;
}

static void conf_free_entry(struct conf_entry *);

/* Free what v holds, its texts wiped (they may be secrets). */
static void
conf_free_value(struct conf_value *v)
{
	if (v->text != NULL)
		explicit_bzero(v->text, v->len);
	free(v->text);
	for (size_t i = 0; i < v->fields.n; i++)
		conf_free_entry(&v->fields.v[i]);
	free(v->fields.v);
}

/* Free what e holds, its texts wiped (they may be secrets). */
static void
conf_free_entry(struct conf_entry *e)
{
	free(e->name);
	conf_free_value(&e->v);
	for (size_t i = 0; i < e->nitems; i++)
		conf_free_value(&e->items[i]);
	free(e->items);
}

/* A new, zeroed entry at the end of l (valid until l grows). */
static struct conf_entry *
conf_push(struct conf_entries *l)
{
	l->v = xreallocarray(l->v, l->n + 1, sizeof(*l->v));
	memset(&l->v[l->n], 0, sizeof(l->v[0]));
	return &l->v[l->n++];
}

/* The row called name; with section, whether name is a section instead
 * (some rows' names start with name + "."). */
static struct conf_row *
conf_find(const struct conf_priv *p, const char *name, bool section)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < p->nrows; i++)
		if (section ? strncmp(p->rows[i].name, name, n) == 0 && p->rows[i].name[n] == '.' :
		    strcmp(p->rows[i].name, name) == 0)
			return &p->rows[i];
	return NULL;
}

/* ---- the YAML file into entries ------------------------------------------- */

/* The index just past the node that starts at event i (ps->nev if the
 * events end first). */
static size_t
conf_end(const struct conf_parser *ps, size_t i)
{
	size_t depth = 0;

	do {
		yaml_event_type_t t = ps->ev[i].type;

		depth += t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT;
		depth -= t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT;
	} while (++i < ps->nev && depth > 0);
	return i;
}

/* The shape of the node that starts with ev, after reporting what it may not
 * have: an anchor (the node is still used); an alias, or a tag other than
 * !!str and !!int on a scalar, !!seq on a list, !!map on a mapping (SH_BAD). */
static enum conf_shape
conf_shape(struct conf_parser *ps, const yaml_event_t *ev)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };
	/* scalar, sequence_start and mapping_start all begin with anchor, tag */
	const char *anchor = (const char *)ev->data.scalar.anchor;
	const char *tag = (const char *)ev->data.scalar.tag, *own;
	struct conf_pos at = AT_MARK(ev->start_mark);
	enum conf_shape shape = ev->type == YAML_SEQUENCE_START_EVENT ? SH_LIST :
	    ev->type == YAML_MAPPING_START_EVENT ? SH_MAPPING : SH_PLAIN;

	if (ev->type == YAML_ALIAS_EVENT) {
		conf_error(ps->p, at, "aliases are not supported (*%s)", ev->data.alias.anchor);
		return SH_BAD;
	}
	if (ev->type == YAML_SCALAR_EVENT && ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		shape = SH_QUOTED;
	for (size_t i = 0; ev->type == YAML_SCALAR_EVENT && i < 5; i++)
		if (shape == SH_PLAIN && strcmp((const char *)ev->data.scalar.value, nulls[i]) == 0)
			shape = SH_EMPTY;
	if (anchor != NULL)
		conf_error(ps->p, at, "anchors are not supported (&%s)", anchor);
	if (tag == NULL)
		return shape;
	if (strncmp(tag, CONF_STD_TAG, strlen(CONF_STD_TAG)) != 0) {
		conf_error(ps->p, at, "tag '%s' is not supported", tag);
		return SH_BAD;
	}
	tag += strlen(CONF_STD_TAG);
	own = shape == SH_LIST ? "seq" : shape == SH_MAPPING ? "map" : "str";
	if (strcmp(tag, own) == 0)
		return shape == SH_LIST || shape == SH_MAPPING ? shape : SH_STR;
	if (strcmp(tag, "int") == 0 && shape != SH_LIST && shape != SH_MAPPING)
		return SH_INT;
	conf_error(ps->p, at, "tag '!!%s' is not supported", tag);
	return SH_BAD;
}

static size_t conf_walk_mapping(struct conf_parser *, const char *, size_t,
    struct conf_value *);

/* Read the node at event i into v (zeroed): a scalar's text; with items, a
 * list's items too (each a scalar, a mapping with its fields, or a list
 * skipped). Returns the index past the node; with v NULL, the node is only
 * checked. */
static size_t
conf_read(struct conf_parser *ps, size_t i, struct conf_value *v, struct conf_entry *items)
{
	const yaml_event_t *ev = &ps->ev[i];
	struct conf_value skip = { .shape = SH_BAD }, *item;
	size_t next;

	if (v == NULL)
		v = &skip;
	v->shape = conf_shape(ps, ev);
	v->pos = AT_MARK(ev->start_mark);
	if (ev->type == YAML_SCALAR_EVENT && v != &skip) {
		v->len = ev->data.scalar.length;
		v->text = xmemdup(ev->data.scalar.value, v->len);
	}
	if (ev->type != YAML_SEQUENCE_START_EVENT || items == NULL)
		return conf_end(ps, i);
	for (i++; i < ps->nev && ps->ev[i].type != YAML_SEQUENCE_END_EVENT;) {
		items->items = xreallocarray(items->items, items->nitems + 1, sizeof(*items->items));
		item = &items->items[items->nitems++];
		memset(item, 0, sizeof(*item));
		next = conf_read(ps, i, item, NULL);
		i = item->shape == SH_MAPPING ? conf_walk_mapping(ps, "", i + 1, item) : next;
	}
	return i < ps->nev ? i + 1 : i;
}

/* The node at event i, the value of the section name ("" for the top level):
 * a mapping to walk, or nothing. Returns the index past it. */
static size_t
conf_walk_section(struct conf_parser *ps, const char *name, size_t i)
{
	struct conf_entry e = { .name = NULL };
	char what[CONF_QUOTE_MAX + 8];

	if (ps->ev[i].type == YAML_MAPPING_START_EVENT)
		return conf_shape(ps, &ps->ev[i]) == SH_MAPPING ?
		    conf_walk_mapping(ps, name, i + 1, NULL) : conf_end(ps, i);
	i = conf_read(ps, i, &e.v, NULL);
	conf_what(&e.v, what, sizeof(what));
	if (e.v.shape != SH_EMPTY && e.v.shape != SH_BAD && *name != '\0')
		conf_error(ps->p, e.v.pos, "'%s' must be a mapping, not %s", name, what);
	else if (e.v.shape != SH_EMPTY && e.v.shape != SH_BAD)
		conf_error(ps->p, e.v.pos, "the top level must be a mapping, not %s", what);
	conf_free_entry(&e);
	return i;
}

/* The value at event i of key k of the section prefix: a setting's becomes
 * an entry, a section's is walked, anything else reported. Returns the index
 * past the value. */
static size_t
conf_walk_key(struct conf_parser *ps, const char *prefix, const struct conf_value *k, size_t i)
{
	struct conf_priv *p = ps->p;
	char q[CONF_QUOTE_MAX + 4], *name;
	struct conf_entry *e = NULL;
	bool section, known, dotted;

	name = *prefix != '\0' ? xasprintf("%s.%s", prefix, k->text) : xstrdup(k->text);
	section = conf_find(p, name, true) != NULL;
	known = section || conf_find(p, name, false) != NULL;
	dotted = strchr(k->text, '.') != NULL;
	for (size_t j = 0; j < ps->file.n && e == NULL; j++)
		if (strcmp(ps->file.v[j].name, name) == 0)
			e = &ps->file.v[j];
	conf_quote(name, strlen(name), q, sizeof(q));
	if (dotted || !known)
		conf_error(p, k->pos, dotted && known ?
		    "unknown key '%s' (a dot does not nest keys: write a mapping)" :
		    "unknown key '%s'", q);
	else if (e != NULL)
		conf_error(p, k->pos, "duplicate key '%s' (first at line %zu)", q, e->key.line);
	else {
		e = conf_push(&ps->file);
		e->name = name;
		e->key = k->pos;
		return section ? conf_walk_section(ps, name, i) : conf_read(ps, i, &e->v, e);
	}
	free(name);
	return conf_read(ps, i, NULL, NULL);
}

/* The value at event i of key k of a mapping inside the list item item
 * (prefix: its dotted name from the item, "" at the item's top): a field of
 * item, followed by the fields of its keys if it is a mapping. Which keys
 * are known is for the row that takes the list to say. Returns the index
 * past the value. */
static size_t
conf_walk_field(struct conf_parser *ps, const char *prefix, const struct conf_value *k,
    size_t i, struct conf_value *item)
{
	struct conf_entry *f = conf_push(&item->fields);
	const char *name;
	size_t next;

	f->name = *prefix != '\0' ? xasprintf("%s.%s", prefix, k->text) : xstrdup(k->text);
	f->key = k->pos;
	f->dotted = strchr(k->text, '.') != NULL;
	name = f->name;
	next = conf_read(ps, i, &f->v, NULL);
	return f->v.shape == SH_MAPPING ? conf_walk_mapping(ps, name, i + 1, item) : next;
}

/* The keys and values of the mapping whose first key is event i, up to its
 * end; prefix is its dotted name ("" at the top). They become the file's
 * entries, or with item the fields of that list item. Returns the index past
 * the mapping. */
static size_t
conf_walk_mapping(struct conf_parser *ps, const char *prefix, size_t i, struct conf_value *item)
{
	char what[CONF_QUOTE_MAX + 8];

	while (i < ps->nev && ps->ev[i].type != YAML_MAPPING_END_EVENT) {
		struct conf_entry k = { .name = NULL };

		i = conf_read(ps, i, &k.v, NULL);
		if (i < ps->nev && k.v.text == NULL) {		/* a collection or an alias */
			if (k.v.shape != SH_BAD)
				conf_error(ps->p, k.v.pos, "a key must be a scalar, not %s",
				    conf_what(&k.v, what, sizeof(what)));
			i = conf_read(ps, i, NULL, NULL);
		} else if (i < ps->nev)
			i = item != NULL ? conf_walk_field(ps, prefix, &k.v, i, item) :
			    conf_walk_key(ps, prefix, &k.v, i);
		conf_free_entry(&k);
	}
	return i < ps->nev ? i + 1 : i;
}

/* The line and column (in characters, from 1) of byte offset off of the
 * file fp, which is read again from its start; the whole file if it cannot
 * be. A reader error (bad UTF-8) has only its offset. */
static struct conf_pos
conf_offset_pos(FILE *fp, size_t off)
{
	struct conf_pos pos = { 1, 1 };
	int ch;

	if (fp == NULL || fseek(fp, 0, SEEK_SET) != 0)
		return (struct conf_pos){ CONF_WHOLE_FILE, 0 };
	for (size_t i = 0; i < off && (ch = getc(fp)) != EOF; i++) {
		if (ch == '\n') {
			pos.line++;
			pos.col = 1;
		} else if ((ch & 0xc0) != 0x80) {
			pos.col++;	/* not a UTF-8 continuation byte */
		}
	}
	return pos;
}

/* Report the YAML error that stopped the parser. */
static void
conf_yaml_error(struct conf_priv *p, const yaml_parser_t *yp)
{
	char ctx[128] = "", val[16] = "";

	if (yp->error == YAML_MEMORY_ERROR)
		log_fatal("out of memory reading %s", p->pub.path);
	if (yp->error == YAML_READER_ERROR) {
		if (yp->problem_value != -1)
			snprintf(val, sizeof(val), "0x%02X ", (unsigned)yp->problem_value);
		conf_error(p, conf_offset_pos(yp->input.file, yp->problem_offset),
		    "%s (%sat byte offset %zu)", yp->problem, val, yp->problem_offset);
		return;
	}
	if (yp->context != NULL)
		snprintf(ctx, sizeof(ctx), " (%s at line %zu, column %zu)", yp->context,
		    yp->context_mark.line + 1, yp->context_mark.column + 1);
	conf_error(p, AT_MARK(yp->problem_mark), "syntax error: %s%s",
	    yp->problem != NULL ? yp->problem : "cannot parse the file", ctx);
}

/* Read the events of the file up to its end, a second document or a YAML
 * error, walk them into ps->file (nothing, or one document whose top is a
 * mapping), then report what ended the reading early. */
static void
conf_walk(struct conf_parser *ps, yaml_parser_t *yp)
{
	yaml_event_t *ev;
	size_t docs = 0;
	bool ok;

	do {
		ps->ev = xreallocarray(ps->ev, ps->nev + 1, sizeof(*ps->ev));
		ev = &ps->ev[ps->nev];
		if (!(ok = yaml_parser_parse(yp, ev)))
			break;
		ps->nev++;
		docs += ev->type == YAML_DOCUMENT_START_EVENT;
	} while (ev->type != YAML_STREAM_END_EVENT && docs < 2);
	if (ps->nev > 2 && ps->ev[1].type == YAML_DOCUMENT_START_EVENT)
		conf_walk_section(ps, "", 2);
	if (!ok)
		conf_yaml_error(ps->p, yp);
	else if (docs == 2)
		conf_error(ps->p, AT_MARK(ev->start_mark),
		    "several documents in one file are not supported");
	for (size_t i = 0; i < ps->nev; i++)
		yaml_event_delete(&ps->ev[i]);
	free(ps->ev);
}

/* ---- entries into the settings -------------------------------------------- */

/* Parse text as the value of row s: CONF_INT an optional sign and decimal
 * digits without a leading zero, CONF_MODE octal digits. */
static enum num_status
conf_number(const struct conf_setting *s, const char *text, long long *out)
{
	const char *d = text + (*text == '+' || *text == '-');

	if (s->type == CONF_MODE) {
		if (*text == '\0' || text[strspn(text, "01234567")] != '\0')
			return NUM_SYNTAX;
		*out = strtoll(text, NULL, 8);	/* LLONG_MAX if too long */
		return *out < s->min || *out > s->max ? NUM_RANGE : NUM_OK;
	}
	if (!isdigit((unsigned char)*d) || (d[0] == '0' && d[1] != '\0'))
		return NUM_SYNTAX;
	text += *text == '+';
	return num_parse(text, strlen(text), s->min, s->max, out);
}

/* The file called text: itself if absolute or no file is loaded, else
 * relative to the config file's directory. The caller frees it. */
static char *
conf_resolve(const struct conf_priv *p, const char *text)
{
	const char *slash = p->pub.path != NULL ? strrchr(p->pub.path, '/') : NULL;

	return text[0] == '/' || slash == NULL ? xstrdup(text) :
	    xasprintf("%.*s/%s", (int)(slash - p->pub.path), p->pub.path, text);
}

/* Read the password file named text (relative to the config file's
 * directory) into *secret and its resolved name into field; v is where the
 * name was given. A file that cannot be used leaves *secret as it was. */
static int
conf_apply_secret_file(struct conf_priv *p, const struct conf_value *v, char **secret,
    char **field, const char *text)
{
	const char *why;
	char buf[CONF_SECRET_MAX + 1], q[CONF_QUOTE_MAX + 4], *file;
	size_t n = 0;
	int err = 0;
	FILE *fp;

	conf_set_str(field, NULL);
	if (*text == '\0') {
		conf_set_str(secret, NULL);
		return 0;
	}
	file = conf_resolve(p, text);
	if ((fp = fopen(file, "re")) == NULL)
		err = errno;
	else {
		n = fread(buf, 1, sizeof(buf), fp);
		err = ferror(fp) ? errno : 0;
		fclose(fp);
	}
	while (n > 0 && n <= CONF_SECRET_MAX && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	why = err != 0 ? strerror(err) : n > CONF_SECRET_MAX ? "is larger than 4096 bytes" :
	    n == 0 ? "is empty" : memchr(buf, '\0', n) != NULL ? "contains a NUL byte" : NULL;
	if (why != NULL)
		conf_error(p, v->pos, err != 0 ? "cannot read password file '%s': %s" :
		    "password file '%s' %s", conf_quote(file, strlen(file), q, sizeof(q)), why);
	else {
		conf_set_str(secret, NULL);
		*secret = xmemdup(buf, n);
		*field = file;
		file = NULL;
	}
	explicit_bzero(buf, sizeof(buf));
	free(file);
	return why != NULL ? -1 : 0;
}

/* Whether addresses a and b would be one listener (port 0 picks a new port
 * each time, so those never clash). */
static bool
conf_addr_same(const struct addr *a, const struct addr *b)
{
	if (a->kind != b->kind || a->kind == ADDR_UNIX)
		return a->kind == b->kind && strcmp(a->path, b->path) == 0;
	return a->port != 0 && a->port == b->port && strcasecmp(a->host, b->host) == 0;
}

/* The items of v, a scalar that lists them separated by commas, into l's
 * items, each at v's place, without the spaces and tabs around it. Nothing,
 * or only blanks, lists none; an empty item is kept, to be refused. */
static void
conf_split(const struct conf_value *v, struct conf_entry *l)
{
	const char *end = v->text + (v->shape == SH_EMPTY ? 0 : v->len), *b, *e;
	const char *next = v->text + strspn(v->text, " \t");	/* the next item */

	if (next >= end)
		return;
	do {
		b = next;
		e = memchr(b, ',', (size_t)(end - b));
		next = e != NULL ? e + 1 : NULL;
		if (e == NULL)
			e = end;
		while (b < e && (*b == ' ' || *b == '\t'))
			b++;
		while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		l->items = xreallocarray(l->items, l->nitems + 1, sizeof(*l->items));
		l->items[l->nitems++] = (struct conf_value){ .shape = SH_PLAIN,
		    .text = xmemdup(b, (size_t)(e - b)), .len = (size_t)(e - b), .pos = v->pos };
	} while (next != NULL);
}

/* Parse text, an item of the list row s, into *a: for CONF_ADDRLIST an
 * address to listen on, kept as written (CONF_TCPLIST: a TCP one, port 1
 * and up); for CONF_SERVERLIST and CONF_NODELIST a server to connect to
 * (port s->def if left out and s->def is above 0), kept as "host:port" or
 * "[v6addr]:port". 0, or -1 with *why set. */
static int
conf_list_item(const struct conf_setting *s, const char *text, struct addr *a, const char **why)
{
	if (s->type == CONF_ADDRLIST)
		return addr_parse(text, ADDR_PORT_REQUIRED, a, why);
	if (s->type == CONF_TCPLIST)
		return conf_server_parse(text, ADDR_PORT_REQUIRED, a, why);
	if (conf_server_parse(text, s->def > 0 ? (int)s->def : ADDR_PORT_REQUIRED, a, why) < 0)
		return -1;
	snprintf(a->text, sizeof(a->text), strchr(a->host, ':') != NULL ? "[%s]:%d" : "%s:%d",
	    a->host, a->port);
	return 0;
}

static int conf_apply_node(struct conf_priv *, const char *, const struct conf_value *,
    struct conf_node *, const struct conf_value **);

/* Apply entry e to the list row s of base: it replaces the list if each
 * item is good and listed once. A CONF_SERVERLIST or CONF_NODELIST also
 * takes one scalar listing its servers with commas; a CONF_NODELIST's item
 * may be a mapping (conf_apply_node), whose address is checked as a
 * server written alone is. */
static int
conf_apply_list(struct conf_priv *p, const struct conf_entry *e, const struct conf_setting *s,
    void *base)
{
	bool nodes = s->type == CONF_NODELIST, servers = nodes || s->type == CONF_SERVERLIST;
	const char *noun = servers ? "server" : "address", *nouns = nodes ? "nodes" :
	    servers ? "servers" : "addresses", *why;
	char what[CONF_QUOTE_MAX + 8];
	void *field = FIELD(base, s->off);
	size_t *count = FIELD(base, s->count), n = 0;
	struct conf_entry split = { .name = NULL };
	const struct conf_entry *l = e;
	struct conf_node *nd = NULL;
	struct addr *a;
	bool bad = false;

	if (servers && e->v.shape != SH_LIST && e->v.shape != SH_MAPPING) {
		conf_split(&e->v, &split);
		l = &split;
	} else if (e->v.shape != SH_LIST)
		return conf_error(p, e->v.pos, "'%s' must be a list of %s, not %s", e->name, nouns,
		    conf_what(&e->v, what, sizeof(what)));
	a = xcalloc(l->nitems + 1, sizeof(*a));
	if (nodes)
		nd = xcalloc(l->nitems + 1, sizeof(*nd));
	for (size_t i = 0; nodes && i <= l->nitems; i++)
		nd[i].tls = CONF_UNSET;
	for (size_t i = 0; i < l->nitems; i++) {
		const struct conf_value *item = &l->items[i], *v = item;
		size_t j = 0;

		if (nodes && item->shape == SH_MAPPING &&
		    conf_apply_node(p, e->name, item, &nd[n], &v) < 0)
			bad = true;	/* its address is still checked */
		if (v != NULL)
			conf_what(v, what, sizeof(what));
		why = v != NULL && v->text != NULL && strlen(v->text) != v->len ?
		    "it contains a NUL character" : NULL;
		if (v == NULL || v->shape == SH_BAD)
			bad = true;
		else if ((v->shape == SH_MAPPING || v->shape == SH_LIST || v->shape == SH_EMPTY) &&
		    v != item)
			bad = conf_error(p, v->pos, "'address' in a node of '%s' must be a server, "
			    "not %s", e->name, what);
		else if (v->shape == SH_MAPPING || v->shape == SH_LIST || v->shape == SH_EMPTY)
			bad = conf_error(p, v->pos, "'%s' entries must be %s, not %s", e->name, nouns,
			    what);
		else if (why != NULL || conf_list_item(s, v->text, &a[n], &why) < 0)
			bad = conf_error(p, v->pos, "bad %s %s %s: %s", e->name, noun, what, why);
		else {
			while (j < n && !conf_addr_same(&a[j], &a[n]))
				j++;
			if (j == n) {
				n++;
				continue;
			}
			bad = conf_error(p, v->pos, "duplicate %s %s '%s'", e->name, noun,
			    conf_quote(a[n].text, strlen(a[n].text), what, sizeof(what)));
		}
		if (nodes)
			conf_node_clear(&nd[n]);	/* the slot is for the next item */
	}
	conf_free_entry(&split);
	if (!bad) {
		conf_value_free(s, base);
		if (!nodes)
			*(char ***)field = xcalloc(n + 1, sizeof(char *));
		else
			*(struct conf_node **)field = nd;
		for (; *count < n; (*count)++)
			if (nodes)
				nd[*count].server = xstrdup(a[*count].text);
			else
				(*(char ***)field)[*count] = xstrdup(a[*count].text);
		nd = NULL;
	}
	for (size_t i = 0; nd != NULL && i < n; i++)
		conf_node_clear(&nd[i]);
	free(nd);
	free(a);
	return bad ? -1 : 0;
}

/* Resolve a group given by name or number (in [s->min, s->max]; "" for
 * none), the value v of the setting subject names, into the long long at
 * field. 0, or -1 after reporting why. A name is looked up now, once per
 * load, not when it is used. */
static int
conf_apply_group(struct conf_priv *p, const struct conf_value *v, const char *subject,
    const struct conf_setting *s, void *field, const char *text)
{
	char q[CONF_QUOTE_MAX + 4], buf[4096];
	struct group gr, *found = NULL;
	long long n;

	conf_quote(text, strlen(text), q, sizeof(q));
	if (*text == '\0') {
		*(long long *)field = CONF_UNSET;	/* "" is none, as for strings */
		return 0;
	}
	if (isdigit((unsigned char)*text)) {
		if (num_parse(text, strlen(text), s->min, s->max, &n) != NUM_OK)
			return conf_error(p, v->pos, "%s must be a group number from %lld to "
			    "%lld, not %s", subject, s->min, s->max, q);
		*(long long *)field = n;
		return 0;
	}
	int err = getgrnam_r(text, &gr, buf, sizeof(buf), &found);
	if (found == NULL)
		return conf_error(p, v->pos, "%s: unknown group '%s'%s%s", subject, q,
		    err != 0 ? ": " : "", err != 0 ? strerror(err) : "");
	*(long long *)field = (long long)gr.gr_gid;
	return 0;
}

/* The YAML 1.1 words for true (1) and false (0), as YAML writers spell
 * them; -1 for anything else. */
static long long
conf_bool(const char *text)
{
	static const char *const words[] = { "false", "true", "no", "yes", "off", "on" };

	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strcasecmp(text, words[i]) == 0)
			return (long long)(i % 2);
	return -1;
}

/* Apply the value of entry e to row s (not a list) of base; subject names
 * it in messages ("'log.level'", "'tls.enabled' in a node of
 * 'backend.nodes'"), and a CONF_SECRET_FILE reads its secret into *secret.
 * 0, or -1 after reporting why. */
static int
conf_apply_value(struct conf_priv *p, const struct conf_entry *e, const struct conf_setting *s,
    void *base, char **secret, const char *subject)
{
	char what[CONF_QUOTE_MAX + 8], q[CONF_QUOTE_MAX + 4], names[128];
	const char *want = s->type == CONF_INT ? "a decimal integer" : s->type == CONF_MODE ?
	    "an octal mode such as 0660" : "a string", *text, *why, *name = NULL;
	const struct conf_value *v = &e->v;
	void *field = FIELD(base, s->off);
	struct addr a;
	long long n;

	if (v->shape == SH_BAD)
		return -1;
	conf_what(v, what, sizeof(what));
	if (v->shape == SH_MAPPING || v->shape == SH_LIST)
		return conf_error(p, v->pos, "%s must be %s, not %s", subject, want, what);
	if (strlen(v->text) != v->len)
		return conf_error(p, v->pos, "%s must not contain a NUL character", subject);
	text = v->shape == SH_EMPTY ? "" : v->text;
	conf_quote(text, strlen(text), q, sizeof(q));
	switch (s->type) {
	case CONF_INT:
	case CONF_MODE:
		if (s->type == CONF_INT && (v->shape == SH_QUOTED || v->shape == SH_STR))
			return conf_error(p, v->pos, "%s must be a decimal integer, not %s",
			    subject, v->shape == SH_STR ? "a string" : "a quoted string");
		switch (conf_number(s, text, &n)) {
		case NUM_OK:
			*(long long *)field = n;
			return 0;
		case NUM_RANGE:
			return conf_error(p, v->pos, s->type == CONF_MODE ?
			    "%s must be between %#llo and %#llo, not %s" :
			    "%s must be between %lld and %lld, not %s", subject, s->min, s->max, q);
		default:
			return conf_error(p, v->pos, "%s must be %s, not %s", subject, want, what);
		}
	case CONF_BOOL:
		if ((n = conf_bool(text)) < 0)
			return conf_error(p, v->pos, "%s must be true or false, not %s", subject,
			    what);
		*(long long *)field = n;
		return 0;
	case CONF_ENUM:
		for (size_t i = 0; (name = s->choice(i)) != NULL && strcmp(name, text) != 0; i++)
			;
		if (name == NULL)
			return conf_error(p, v->pos, "%s must be %s, not %s", subject,
			    conf_join(s->choice, names, sizeof(names)), what);
		break;
	case CONF_SHORTSTR:
		if (*text == '\0')
			return conf_error(p, v->pos, "%s must not be empty", subject);
		if (strlen(text) > (size_t)s->max)
			return conf_error(p, v->pos, "%s must be at most %lld bytes, not %zu",
			    subject, s->max, strlen(text));
		break;
	case CONF_SERVER:
		if (conf_server_parse(text, ADDR_PORT_REQUIRED, &a, &why) < 0)
			return conf_error(p, v->pos, "bad %s '%s': %s", e->name, q, why);
		*(struct addr *)field = a;
		return 0;
	case CONF_SECRET_FILE:
		return conf_apply_secret_file(p, v, secret, field, text);
	case CONF_GROUP:
		return conf_apply_group(p, v, subject, s, field, text);
	case CONF_PATH:
		conf_set_str(field, NULL);
		if (*text != '\0')
			*(char **)field = conf_resolve(p, text);
		return 0;
	default:
		break;
	}
	conf_set_str(field, *text != '\0' ? text : NULL);
	return 0;
}

/* Apply entry e to row r. 0, or -1 after reporting why. */
static int
conf_apply_row(struct conf_priv *p, const struct conf_entry *e, struct conf_row *r)
{
	char subject[128];

	if (e->v.shape == SH_BAD)
		return -1;
	if (conf_is_list(r->s))
		return conf_apply_list(p, e, r->s, p->tables[r->table]);
	snprintf(subject, sizeof(subject), "'%s'", e->name);
	return conf_apply_value(p, e, r->s, p->tables[r->table], &r->secret, subject);
}

/* A secret and the file it may be read from (*file) must not both be set
 * (what names them in the error, at at); else what the file held (*from)
 * becomes the secret. 0 or -1. */
static int
conf_pair_secret(struct conf_priv *p, struct conf_pos at, const char *what, char **secret,
    char *const *file, char **from)
{
	if (*secret != NULL && *file != NULL)
		return conf_error(p, at, "%s cannot both be set", what);
	if (*from != NULL) {
		conf_set_str(secret, NULL);
		*secret = *from;
		*from = NULL;
	}
	return 0;
}

/* Whether name is a section of a node's keys ("tls"). */
static bool
conf_node_section(const char *name)
{
	size_t n = strlen(name);

	for (size_t k = 0; k < NK_COUNT; k++)
		if (strncmp(conf_node_keys[k].name, name, n) == 0 &&
		    conf_node_keys[k].name[n] == '.')
			return true;
	return false;
}

/*
 * Apply the fields of v, an item of the CONF_NODELIST called list written as
 * a mapping, to *nd (nothing set yet): each key known and given once, of its
 * shape; not both password and password_file; tls.cert_file with
 * tls.key_file. Every problem is reported. *address gets the value of its
 * address for the caller to parse as a server, NULL if it has none (then
 * reported). 0, or -1 if the node is refused.
 */
static int
conf_apply_node(struct conf_priv *p, const char *list, const struct conf_value *v,
    struct conf_node *nd, const struct conf_value **address)
{
	const struct conf_entry *given[NK_COUNT] = { NULL };
	char q[CONF_QUOTE_MAX + 4], subject[2 * CONF_QUOTE_MAX + 32], what[CONF_QUOTE_MAX + 8];
	char *secret = NULL;
	int rc = 0;

	for (size_t i = 0; i < v->fields.n; i++) {
		const struct conf_entry *f = &v->fields.v[i], *first = NULL;
		size_t k = 0, len = strlen(f->name);
		bool section = !f->dotted && conf_node_section(f->name);

		while (k < NK_COUNT && strcmp(conf_node_keys[k].name, f->name) != 0)
			k++;
		for (size_t j = 0; j < i && first == NULL; j++)
			if (!v->fields.v[j].dotted && strcmp(v->fields.v[j].name, f->name) == 0)
				first = &v->fields.v[j];
		conf_quote(f->name, len, q, sizeof(q));
		snprintf(subject, sizeof(subject), "'%s' in a node of '%s'", q, list);
		if (f->dotted || (k == NK_COUNT && !section))
			rc = conf_error(p, f->key, "unknown key %s%s", subject,
			    f->dotted && (k < NK_COUNT || section) ?
			    " (a dot does not nest keys: write a mapping)" : "");
		else if (first != NULL)
			rc = conf_error(p, f->key, "duplicate key %s (first at line %zu)", subject,
			    first->key.line);
		else if (section) {
			if (f->v.shape != SH_MAPPING && f->v.shape != SH_EMPTY)
				rc = f->v.shape == SH_BAD ? -1 : conf_error(p, f->v.pos,
				    "%s must be a mapping, not %s", subject,
				    conf_what(&f->v, what, sizeof(what)));
			continue;	/* its keys follow */
		} else {
			given[k] = f;
			if (k != NK_ADDRESS &&
			    conf_apply_value(p, f, &conf_node_keys[k], nd, &secret, subject) < 0)
				rc = -1;
		}
		/* the keys inside a value that is no section are not looked at */
		while (i + 1 < v->fields.n && strncmp(v->fields.v[i + 1].name, f->name, len) == 0 &&
		    v->fields.v[i + 1].name[len] == '.')
			i++;
	}
	snprintf(subject, sizeof(subject), "'password' and 'password_file' in a node of '%s'",
	    list);
	if (rc == 0 && conf_pair_secret(p, given[NK_PASSWORD] != NULL ?
	    given[NK_PASSWORD]->v.pos : v->pos, subject, &nd->password, &nd->password_file,
	    &secret) < 0)
		rc = -1;
	conf_set_str(&secret, NULL);
	if (rc == 0 && (nd->tls_cert_file == NULL) != (nd->tls_key_file == NULL))
		rc = conf_error(p, given[nd->tls_cert_file != NULL ? NK_TLS_CERT_FILE :
		    NK_TLS_KEY_FILE]->v.pos, "'%s' without '%s' in a node of '%s': a client "
		    "certificate goes with its key", nd->tls_cert_file != NULL ? "tls.cert_file" :
		    "tls.key_file", nd->tls_cert_file != NULL ? "tls.key_file" : "tls.cert_file",
		    list);
	*address = given[NK_ADDRESS] != NULL ? &given[NK_ADDRESS]->v : NULL;
	if (*address == NULL)
		rc = conf_error(p, v->pos, "a node of '%s' has no 'address'", list);
	return rc;
}

/* Apply entry e through every row of its name (conf_table[]'s, or each
 * backend's for a "backend." key), stopping at the first refusal; each row
 * that takes it keeps where it was given. 0 or -1. */
static int
conf_apply(struct conf_priv *p, const struct conf_entry *e)
{
	for (size_t i = 0; i < p->nrows; i++)
		if (strcmp(p->rows[i].name, e->name) == 0) {
			if (conf_apply_row(p, e, &p->rows[i]) < 0)
				return -1;
			p->rows[i].pos = e->v.pos;
		}
	return 0;
}

/* ---- the command line ----------------------------------------------------- */

/* Apply e, given on the command line, and keep it to apply again after any
 * file loaded later; e is freed if refused. 0 or -1. */
static int
conf_cmdline(struct conf_priv *p, struct conf_entry e)
{
	if (conf_apply(p, &e) < 0) {
		conf_free_entry(&e);
		return -1;
	}
	*conf_push(&p->cmdline) = e;
	return 0;
}

/* A value given on the command line, as the file would write it. */
static struct conf_value
conf_cmdline_value(const char *s)
{
	return (struct conf_value){ .shape = SH_PLAIN, .text = xstrdup(s), .len = strlen(s),
	    .pos = AT_CMDLINE };
}

/* -l ADDR: one list of every -l so far, which replaces the file's. */
int
conf_override_listen(struct conf *c, const char *addr)
{
	struct conf_priv *p = (struct conf_priv *)c;
	struct conf_entry e = { .name = xstrdup("listen"), .v = conf_cmdline_value("") };
	const struct conf_entry *prev = NULL;

	for (size_t i = 0; i < p->cmdline.n; i++)
		if (strcmp(p->cmdline.v[i].name, "listen") == 0)
			prev = &p->cmdline.v[i];
	e.v.shape = SH_LIST;
	e.nitems = (prev != NULL ? prev->nitems : 0) + 1;
	e.items = xcalloc(e.nitems, sizeof(*e.items));
	for (size_t i = 0; i < e.nitems; i++)
		e.items[i] = conf_cmdline_value(i + 1 < e.nitems ? prev->items[i].text : addr);
	return conf_cmdline(p, e);
}

/* Copy url into buf for a message, the user and password (between "://" and
 * the last '@') hidden: "scheme://:***@host". A user "" or "default" is
 * kept, as it tells nothing secret. */
static const char *
conf_url_mask(const char *url, char *buf, size_t size)
{
	const char *sep = strstr(url, "://"), *info = sep != NULL ? sep + 3 : url;
	const char *at = strrchr(info, '@');
	size_t infolen = at != NULL ? (size_t)(at - info) : 0, user = strcspn(info, ":");

	if (user > infolen)
		user = infolen;
	if (at == NULL)
		snprintf(buf, size, "%s", url);
	else if (user == 0 || (user == 7 && strncmp(info, "default", 7) == 0))
		snprintf(buf, size, "%.*s%s%s", (int)(info + user - url), url,
		    user < infolen ? ":***" : "", at);
	else
		snprintf(buf, size, "%.*s***%s", (int)(info - url), url, at);
	return buf;
}

/* Decode the n bytes at s (see conf_url_decode); NULL for a bad escape, or
 * for an escaped NUL with *nul set. */
static char *
conf_url_unescape(const char *s, size_t n, bool *nul)
{
	char *d = xmalloc(n + 1);
	size_t j = 0;

	*nul = false;
	for (size_t i = 0; i < n; i++) {
		int hi = n - i >= 3 ? num_hex_digit((unsigned char)s[i + 1]) : -1;
		int lo = n - i >= 3 ? num_hex_digit((unsigned char)s[i + 2]) : -1;

		if (s[i] != '%')
			d[j++] = s[i];
		else if (hi >= 0 && lo >= 0 && hi + lo > 0) {
			d[j++] = (char)(hi * 16 + lo);
			i += 2;
		} else {
			*nul = hi == 0 && lo == 0;
			explicit_bzero(d, n + 1);
			free(d);
			return NULL;
		}
	}
	d[j] = '\0';
	return d;
}

/* Decode the n bytes at s; see the header. */
char *
conf_url_decode(const char *s, size_t n)
{
	bool nul;

	return conf_url_unescape(s, n, &nul);
}

/* Split the userinfo off the authority s; see the header. */
int
conf_url_userinfo(const char *s, char **user, char **password, const char **rest,
    const char **why)
{
	const char *at = strrchr(s, '@'), *colon;
	bool nul;

	*user = NULL;
	*password = NULL;
	*rest = s;
	if (at == NULL)
		return 0;
	colon = memchr(s, ':', (size_t)(at - s));
	if ((*user = conf_url_unescape(s, (size_t)((colon != NULL ? colon : at) - s), &nul)) ==
	    NULL) {
		*why = nul ? "the user name contains a NUL byte" : "bad %-escape in the user name";
		return -1;
	}
	if (colon != NULL &&
	    (*password = conf_url_unescape(colon + 1, (size_t)(at - colon - 1), &nul)) == NULL) {
		*why = nul ? "the password contains a NUL byte" : "bad %-escape in the password";
		free(*user);
		*user = NULL;
		return -1;
	}
	*rest = at + 1;
	return 0;
}

/* backend_url_set of conf_override_backend(): collect "backend." + name. */
static void
conf_url_set(void *arg, const char *name, const char *value)
{
	struct conf_entry *e = conf_push(arg);

	e->name = xasprintf("backend.%s", name);
	e->v = conf_cmdline_value(value);
}

/* -b URL: the type, then what the backend's parse_url gives. */
int
conf_override_backend(struct conf *c, const char *url)
{
	struct conf_priv *p = (struct conf_priv *)c;
	char masked[512], q[CONF_QUOTE_MAX + 4], names[256];
	struct conf_entries got = { NULL, 0 };
	const struct backend_ops *ops;
	const char *why = "";
	int rc = 1;

	for (size_t i = 0; rc == 1 && (ops = conf_backend_at(i)) != NULL; i++)
		if (ops->parse_url != NULL)
			rc = ops->parse_url(url, conf_url_set, &got, &why);
		else if (strcmp(url, ops->name) == 0)
			rc = 0;
	conf_url_mask(url, masked, sizeof(masked));
	conf_quote(masked, strlen(masked), q, sizeof(q));
	if (rc == 1)
		conf_error(p, AT_CMDLINE, "unknown backend URL '%s' (expected %s)", q,
		    conf_join(conf_url_choice, names, sizeof(names)));
	else if (rc < 0)
		conf_error(p, AT_CMDLINE, "bad %s URL '%s': %s", ops->name, q, why);
	else
		rc = conf_cmdline(p, (struct conf_entry){ .name = xstrdup("backend.type"),
		    .v = conf_cmdline_value(ops->name) });
	for (size_t i = 0; i < got.n; i++)
		if (rc == 0)
			rc = conf_cmdline(p, got.v[i]);
		else
			conf_free_entry(&got.v[i]);
	free(got.v);
	return rc == 0 ? 0 : -1;
}

/* ---- the whole config ----------------------------------------------------- */

struct conf *
conf_create(void)
{
	struct conf_priv *p = xcalloc(1, sizeof(*p));
	size_t ntables = 1;

	while (conf_backend_at(ntables - 1) != NULL)
		ntables++;
	p->tables = xcalloc(ntables, sizeof(*p->tables));
	p->ntables = ntables;
	p->tables[0] = &p->pub;
	for (size_t t = 0; t < ntables; t++) {
		const struct backend_ops *ops = t > 0 ? conf_backend_at(t - 1) : NULL;
		const struct conf_setting *rows = ops != NULL ? ops->settings : conf_table;
		size_t n = ops != NULL ? ops->nsettings : sizeof(conf_table) / sizeof(conf_table[0]);

		if (ops != NULL && ops->settings_size > 0)
			p->tables[t] = xcalloc(1, ops->settings_size);
		p->rows = xreallocarray(p->rows, p->nrows + n, sizeof(*p->rows));
		for (size_t i = 0; i < n; i++) {
			p->rows[p->nrows++] = (struct conf_row){ .name = xasprintf("%s%s",
			    ops != NULL ? "backend." : "", rows[i].name), .s = &rows[i], .table = t };
			if (conf_is_number(&rows[i]))
				*(long long *)FIELD(p->tables[t], rows[i].off) = CONF_UNSET;
		}
	}
	return &p->pub;
}

void
conf_destroy(struct conf *c)
{
	struct conf_priv *p = (struct conf_priv *)c;

	if (c == NULL)
		return;
	for (size_t i = 0; i < p->nrows; i++) {
		conf_value_free(p->rows[i].s, p->tables[p->rows[i].table]);
		conf_set_str(&p->rows[i].secret, NULL);
		free(p->rows[i].name);
	}
	for (size_t t = 1; t < p->ntables; t++)
		free(p->tables[t]);
	for (size_t i = 0; i < p->cmdline.n; i++)
		conf_free_entry(&p->cmdline.v[i]);
	for (size_t i = 0; i < c->nerrors; i++)
		free(c->errors[i]);
	free(p->cmdline.v);
	free(c->errors);
	for (size_t i = 0; i < c->nwarnings; i++)
		free(c->warnings[i]);
	free(c->warnings);
	free(c->path);
	free(p->errpos);
	free(p->tables);
	free(p->rows);
	free(p);
}

/* Parse path into c; see the header. */
int
conf_load(struct conf *c, const char *path)
{
	struct conf_priv *p = (struct conf_priv *)c;
	struct conf_parser ps = { .p = p };
	struct conf_pos whole = { CONF_WHOLE_FILE, 0 };
	size_t before = c->nerrors;
	yaml_parser_t yp;
	struct stat st;
	FILE *fp;

	free(c->path);
	c->path = xstrdup(path);
	if ((fp = fopen(path, "re")) == NULL)
		return conf_error(p, whole, "cannot open the file: %s", strerror(errno));
	if (fstat(fileno(fp), &st) < 0 || !S_ISREG(st.st_mode)) {
		fclose(fp);
		return conf_error(p, whole, "not a regular file");
	}
	if (!yaml_parser_initialize(&yp))
		log_fatal("out of memory reading %s", path);
	yaml_parser_set_input_file(&yp, fp);
	conf_walk(&ps, &yp);
	yaml_parser_delete(&yp);
	fclose(fp);
	for (size_t i = 0; i < ps.file.n; i++) {
		(void)conf_apply(p, &ps.file.v[i]);
		conf_free_entry(&ps.file.v[i]);
	}
	free(ps.file.v);
	for (size_t i = 0; i < p->cmdline.n; i++)	/* the command line still wins */
		(void)conf_apply(p, &p->cmdline.v[i]);
	conf_sort_errors(p, before);
	return c->nerrors > before ? -1 : 0;
}

/* Give the list row r the list its .defstr writes, as if it were given
 * (a CONF_SERVERLIST's may name several servers, with commas). */
static void
conf_default_list(struct conf_priv *p, const struct conf_row *r)
{
	struct conf_value v = conf_cmdline_value(r->s->defstr);
	struct conf_entry e = { .name = r->name, .v = v, .items = &v, .nitems = 1 };

	if (r->s->type == CONF_ADDRLIST)
		e.v.shape = SH_LIST;
	if (conf_apply_list(p, &e, r->s, p->tables[r->table]) < 0)
		log_fatal("%s: bad default: %s", r->name, p->pub.errors[p->pub.nerrors - 1]);
	conf_set_str(&v.text, NULL);
}

/* Give the field of row r its default if it is unset. */
static void
conf_default(struct conf_priv *p, const struct conf_row *r)
{
	const struct conf_setting *s = r->s;
	void *base = p->tables[r->table], *field = FIELD(base, s->off);
	const char *why;

	switch (s->type) {
	case CONF_INT:
	case CONF_MODE:
	case CONF_BOOL:
		if (*(long long *)field == CONF_UNSET)
			*(long long *)field = s->def;
		break;
	case CONF_GROUP:
		break;	/* unset is none */
	case CONF_SERVER:
		if (s->defstr != NULL && ((struct addr *)field)->text[0] == '\0' &&
		    conf_server_parse(s->defstr, ADDR_PORT_REQUIRED, field, &why) < 0)
			log_fatal("%s: bad default: %s", s->name, why);
		break;
	case CONF_ADDRLIST:
	case CONF_TCPLIST:
	case CONF_SERVERLIST:
	case CONF_NODELIST:
		if (s->defstr != NULL && *(void **)field == NULL)
			conf_default_list(p, r);
		break;
	default:
		if (s->defstr != NULL && *(char **)field == NULL)
			*(char **)field = xstrdup(s->defstr);
		break;
	}
}

/* Where a rule between the settings called a and b is reported: at a's place
 * in the file if it has one, else at b's, else on the command line. */
static struct conf_pos
conf_rule(const struct conf_priv *p, const char *a, const char *b)
{
	struct conf_pos at = conf_find(p, a, false)->pos;

	return at.line != CONF_CMDLINE ? at : conf_find(p, b, false)->pos;
}

/* Check row r alone: a list must not be empty; a secret and its file must
 * not both be set, and the file's secret becomes the secret. */
static void
conf_check(struct conf_priv *p, struct conf_row *r)
{
	void *base = p->tables[r->table];
	const struct conf_row *pair;
	char what[256];

	if (conf_is_list(r->s) && r->s->type != CONF_TCPLIST && !r->s->optional &&
	    *(size_t *)FIELD(base, r->s->count) == 0)
		/* a backend's list left out: where the backend was chosen */
		conf_error(p, strncmp(r->name, "backend.", 8) == 0 ? conf_rule(p, r->name,
		    "backend.type") : r->pos, "'%s' must have at least one %s", r->name,
		    r->s->type == CONF_NODELIST ? "node" : r->s->type == CONF_SERVERLIST ?
		    "server" : "address");
	if (r->s->type != CONF_SECRET_FILE)
		return;
	for (pair = p->rows; pair < p->rows + p->nrows; pair++)
		if (pair->table == r->table && strcmp(pair->s->name, r->s->pair) == 0)
			break;
	if (pair == p->rows + p->nrows)
		log_fatal("%s: no setting %s", r->name, r->s->pair);
	snprintf(what, sizeof(what), "'%s' and '%s'", pair->name, r->name);
	(void)conf_pair_secret(p, conf_rule(p, pair->name, r->name), what,
	    FIELD(base, pair->s->off), FIELD(base, r->s->off), &r->secret);
}

/* Whether the host of a TCP listener is on loopback by what it says, with
 * no lookup: "localhost", 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104. */
static bool
conf_host_loopback(const char *host)
{
	struct in6_addr a6;
	struct in_addr a4;

	if (strcasecmp(host, "localhost") == 0)
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) != 1)
		return false;
	if (IN6_IS_ADDR_LOOPBACK(&a6))
		return true;
	return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}

bool
conf_addr_exposed(const char *text)
{
	struct addr a;
	const char *why;

	if (addr_parse(text, ADDR_PORT_REQUIRED, &a, &why) != 0)
		return false;	/* reported where the list was read */
	return a.kind == ADDR_TCP && !conf_host_loopback(a.host);
}

/* protected_mode: the listeners of the list row name (n addresses) must
 * stay on loopback or Unix sockets unless clients must authenticate. */
static void
conf_protect(struct conf_priv *p, const char *name, char *const *list, size_t n)
{
	const struct conf *c = &p->pub;

	if (!c->protected_mode || c->password != NULL)
		return;
	for (size_t i = 0; i < n; i++)
		if (conf_addr_exposed(list[i]))
			conf_error(p, conf_find(p, name, false)->pos, "'%s' has %s, which is not "
			    "a loopback address, and no 'auth.password' is set: anyone who can "
			    "reach it could take or break any lock. Set 'auth.password' (or "
			    "'auth.password_file'), listen on loopback or a Unix socket, or set "
			    "'protected_mode: false'", name, list[i]);
}

/* The rules of the tls section: TLS listeners need a certificate and its
 * key, a key goes with a certificate, and a TLS listener is not also a
 * plain one. The files themselves are tls_create()'s to check. */
static void
conf_finish_tls(struct conf_priv *p)
{
	struct conf *c = &p->pub;
	struct addr a, b;
	const char *why;

	if (c->ntls_listen > 0 && (c->tls_cert_file == NULL || c->tls_key_file == NULL))
		conf_error(p, conf_find(p, "tls.listen", false)->pos, "'tls.listen' needs "
		    "'tls.cert_file' and 'tls.key_file'");
	else if ((c->tls_cert_file == NULL) != (c->tls_key_file == NULL))
		conf_error(p, conf_rule(p, c->tls_cert_file != NULL ? "tls.cert_file" :
		    "tls.key_file", "tls.listen"), "'tls.cert_file' and 'tls.key_file' go "
		    "together: set both or neither");
	for (size_t i = 0; i < c->ntls_listen; i++)
		for (size_t j = 0; j < c->nlisten; j++)
			if (addr_parse(c->tls_listen[i], ADDR_PORT_REQUIRED, &a, &why) == 0 &&
			    addr_parse(c->listen[j], ADDR_PORT_REQUIRED, &b, &why) == 0 &&
			    conf_addr_same(&a, &b))
				conf_error(p, conf_rule(p, "tls.listen", "listen"), "'%s' is in both "
				    "'listen' and 'tls.listen'", c->tls_listen[i]);
}

void
conf_setting_warning(struct conf *c, const char *name, const char *fmt, ...)
{
	struct conf_priv *p = (struct conf_priv *)c;
	const struct conf_row *r = conf_find(p, name, false);
	char msg[1024], warn[1040];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(warn, sizeof(warn), "warning: %s", msg);
	c->warnings = xreallocarray(c->warnings, c->nwarnings + 1, sizeof(*c->warnings));
	c->warnings[c->nwarnings++] = conf_where(c, r != NULL ? r->pos : AT_CMDLINE, warn);
}

int
conf_setting_error(struct conf *c, const char *name, const char *fmt, ...)
{
	struct conf_priv *p = (struct conf_priv *)c;
	const struct conf_row *r = conf_find(p, name, false);
	va_list ap;

	va_start(ap, fmt);
	(void)conf_verror(p, r != NULL ? r->pos : AT_CMDLINE, fmt, ap);
	va_end(ap);
	return -1;
}

/* Fill the defaults, then check the settings of conf_table[] and of the
 * chosen backend, and the rules between settings. */
int
conf_finish(struct conf *c)
{
	struct conf_priv *p = (struct conf_priv *)c;
	const struct backend_ops *ops;
	size_t t;

	for (size_t i = 0; i < p->nrows; i++)
		conf_default(p, &p->rows[i]);
	for (t = 1; (ops = conf_backend_at(t - 1)) != NULL &&
	    strcmp(ops->name, c->backend_type) != 0; t++)
		;
	c->backend_settings = ops != NULL ? p->tables[t] : NULL;
	for (size_t i = 0; i < p->nrows; i++)
		if (p->rows[i].table == 0 || p->rows[i].table == t)
			conf_check(p, &p->rows[i]);
	if (c->default_ttl_ms > c->max_ttl_ms)
		conf_error(p, conf_rule(p, "locks.default_ttl_ms", "locks.max_ttl_ms"),
		    "'locks.default_ttl_ms' (%lld) must not be greater than "
		    "'locks.max_ttl_ms' (%lld)", c->default_ttl_ms, c->max_ttl_ms);
	if (c->max_key_bytes > c->max_request_bytes - CONF_REQUEST_OVERHEAD)
		conf_error(p, conf_rule(p, "limits.max_key_bytes", "limits.max_request_bytes"),
		    "'limits.max_key_bytes' (%lld) must be at most 'limits.max_request_bytes' "
		    "- %d (%lld)", c->max_key_bytes, CONF_REQUEST_OVERHEAD,
		    c->max_request_bytes - CONF_REQUEST_OVERHEAD);
	conf_protect(p, "listen", c->listen, c->nlisten);
	if (c->tls_ca_file == NULL)	/* else a client certificate is the login */
		conf_protect(p, "tls.listen", c->tls_listen, c->ntls_listen);
	conf_finish_tls(p);
	if (ops != NULL && ops->check != NULL)
		ops->check(c, c->backend_settings, 0);
	if (ops != NULL && ops->min_lease_ms != NULL &&
	    (uint64_t)c->default_ttl_ms < ops->min_lease_ms(c->backend_settings))
		conf_error(p, conf_rule(p, "locks.default_ttl_ms", "backend.type"),
		    "'locks.default_ttl_ms' (%lld) must be at least the %s backend's shortest "
		    "lease (%llu ms: %s)", c->default_ttl_ms, ops->name,
		    (unsigned long long)ops->min_lease_ms(c->backend_settings),
		    ops->min_lease_rule != NULL ? ops->min_lease_rule : "its settings");
	return c->nerrors > 0 ? -1 : 0;
}

void
conf_check_deep(struct conf *c)
{
	const struct backend_ops *ops;

	for (size_t i = 0; (ops = conf_backend_at(i)) != NULL; i++)
		if (strcmp(ops->name, c->backend_type) == 0) {
			if (ops->check != NULL)
				ops->check(c, c->backend_settings, 1);
			return;
		}
}

/* Write the value of row s in base into buf as a message shows it: a secret
 * as "(hidden)", nothing as "(none)", a list as "a, b". */
static const char *
conf_value_text(const struct conf_setting *s, const void *base, char *buf, size_t size)
{
	const void *field = FIELD(base, s->off);
	const char *str = NULL;
	size_t len = 0;

	switch (s->type) {
	case CONF_INT:
		snprintf(buf, size, "%lld", *(const long long *)field);
		return buf;
	case CONF_MODE:
		snprintf(buf, size, "%#llo", *(const long long *)field);
		return buf;
	case CONF_BOOL:
		return *(const long long *)field ? "true" : "false";
	case CONF_GROUP:
		if (*(const long long *)field == CONF_UNSET)
			break;
		snprintf(buf, size, "gid %lld", *(const long long *)field);
		return buf;
	case CONF_SECRET:
		str = *(char *const *)field != NULL ? "(hidden)" : NULL;
		break;
	case CONF_STR:
	case CONF_SHORTSTR:
	case CONF_SECRET_FILE:
	case CONF_PATH:
	case CONF_ENUM:
		str = *(char *const *)field;
		break;
	case CONF_SERVER:
		str = ((const struct addr *)field)->text[0] != '\0' ?
		    ((const struct addr *)field)->text : NULL;
		break;
	case CONF_ADDRLIST:
	case CONF_TCPLIST:
	case CONF_SERVERLIST:
	case CONF_NODELIST:	/* the servers only */
		buf[0] = '\0';
		for (size_t i = 0; i < *(const size_t *)FIELD(base, s->count) && len < size; i++)
			len += (size_t)snprintf(buf + len, size - len, "%s%s", i > 0 ? ", " : "",
			    s->type == CONF_NODELIST ? (*(struct conf_node *const *)field)[i].server :
			    (*(char **const *)field)[i]);
		return len > 0 ? buf : "(none)";
	}
	snprintf(buf, size, "%s", str != NULL ? str : "(none)");
	return buf;
}

/* Whether row s has one value in bases a and b. */
static bool
conf_value_same(const struct conf_setting *s, const void *a, const void *b)
{
	const void *fa = FIELD(a, s->off), *fb = FIELD(b, s->off);
	const char *sa, *sb;
	size_t n;

	switch (s->type) {
	case CONF_INT:
	case CONF_MODE:
	case CONF_BOOL:
	case CONF_GROUP:
		return *(const long long *)fa == *(const long long *)fb;
	case CONF_SERVER:
		return strcmp(((const struct addr *)fa)->text, ((const struct addr *)fb)->text) == 0;
	case CONF_ADDRLIST:
	case CONF_TCPLIST:
	case CONF_SERVERLIST:
		n = *(const size_t *)FIELD(a, s->count);
		if (n != *(const size_t *)FIELD(b, s->count))
			return false;
		for (size_t i = 0; i < n; i++)
			if (strcmp((*(char **const *)fa)[i], (*(char **const *)fb)[i]) != 0)
				return false;
		return true;
	case CONF_NODELIST:	/* every field of every node */
		n = *(const size_t *)FIELD(a, s->count);
		if (n != *(const size_t *)FIELD(b, s->count))
			return false;
		for (size_t i = 0; i < n; i++)
			for (size_t k = 0; k < NK_COUNT; k++)
				if (!conf_value_same(&conf_node_keys[k],
				    &(*(struct conf_node *const *)fa)[i],
				    &(*(struct conf_node *const *)fb)[i]))
					return false;
		return true;
	case CONF_STR:
	case CONF_SHORTSTR:
	case CONF_SECRET:
	case CONF_SECRET_FILE:
	case CONF_PATH:
	case CONF_ENUM:
		break;
	}
	sa = *(char *const *)fa;
	sb = *(char *const *)fb;
	return sa == sb || (sa != NULL && sb != NULL && strcmp(sa, sb) == 0);
}

/* Swap the values of row s between bases a and b (a list with its count). */
static void
conf_value_swap(const struct conf_setting *s, void *a, void *b)
{
	size_t size = conf_is_number(s) ? sizeof(long long) :
	    s->type == CONF_SERVER ? sizeof(struct addr) : sizeof(char *);
	unsigned char tmp[sizeof(struct addr) > sizeof(long long) ? sizeof(struct addr) : 8];

	memcpy(tmp, FIELD(a, s->off), size);
	memcpy(FIELD(a, s->off), FIELD(b, s->off), size);
	memcpy(FIELD(b, s->off), tmp, size);
	if (conf_is_list(s)) {
		size_t n = *(size_t *)FIELD(a, s->count);

		*(size_t *)FIELD(a, s->count) = *(size_t *)FIELD(b, s->count);
		*(size_t *)FIELD(b, s->count) = n;
	}
}

/* Move next's reloadable values into live; see the header. */
int
conf_reload(struct conf *live, struct conf *next)
{
	struct conf_priv *p = (struct conf_priv *)live, *q = (struct conf_priv *)next;
	char old[256], now[256];
	int changed = 0;

	for (size_t i = 0; i < p->nrows; i++) {
		struct conf_row *r = &p->rows[i];
		void *a = p->tables[r->table], *b = q->tables[r->table];

		/* the settings of backends not in use are nobody's; with another
		 * backend.type, only that change is told */
		if (r->table > 0 && (a != live->backend_settings ||
		    strcmp(live->backend_type, next->backend_type) != 0))
			continue;
		if (conf_value_same(r->s, a, b))
			continue;
		if (!r->s->reloadable) {
			log_warn("%s changed: restart dlockd to apply; keeping %s", r->name,
			    conf_value_text(r->s, a, old, sizeof(old)));
			continue;
		}
		log_info("%s: %s -> %s", r->name, conf_value_text(r->s, a, old, sizeof(old)),
		    conf_value_text(r->s, b, now, sizeof(now)));
		conf_value_swap(r->s, a, b);
		r->pos = q->rows[i].pos;
		changed++;
	}
	return changed;
}

#ifdef DLOCKD_TEST_HOOKS	/* test and fuzz objects only (Makefile) */
void
conf_use_backends(const struct backend_ops *(*at)(size_t))
{
	conf_backend_at = at != NULL ? at : backend_at;
}
#endif

const void *
conf_backend_value(const struct conf *c, const char *name)
{
	const struct conf_priv *p = (const struct conf_priv *)c;

	for (size_t i = 0; c->backend_type != NULL && i < p->nrows; i++) {
		const struct conf_row *r = &p->rows[i];

		if (r->table > 0 && strcmp(r->s->name, name) == 0 &&
		    strcmp(conf_backend_at(r->table - 1)->name, c->backend_type) == 0)
			return FIELD(p->tables[r->table], r->s->off);
	}
	return NULL;
}

int
conf_server_parse(const char *s, int default_port, struct addr *out, const char **why)
{
	if (strncmp(s, "unix:", 5) == 0)
		*why = "a Unix socket is not supported here (expected host:port or [v6addr]:port)";
	else if (default_port == ADDR_PORT_REQUIRED && *s != '\0' && *s != '[' &&
	    strchr(s, ':') == NULL)
		*why = "missing port (expected host:port or [v6addr]:port)";
	else if (addr_parse(s, default_port, out, why) == 0 && out->port == 0)
		*why = "the port must be between 1 and 65535";
	else
		return addr_parse(s, default_port, out, why);
	return -1;
}
