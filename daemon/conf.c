/*
 * conf — the configuration: the YAML file, command-line options, defaults.
 *
 * It owns struct conf, the settings struct of every registered backend, the
 * entries read from the file and the command line, and the list of errors.
 * Every setting is a row of a table (struct conf_setting): conf_table[] for
 * struct conf, and each backend's ops->settings for its keys under
 * "backend.". It must not know any backend's keys, URL or rules (a backend
 * declares them in its own file), resolve a name, or stop at the first error.
 *
 * A load is two passes. Pass 1 walks libyaml's events and turns the file into
 * a flat list of entries (dotted name, value, position), reporting what the
 * file's shape gets wrong: unknown, dotted and duplicate keys, anchors,
 * aliases, tags, several documents. Pass 2 applies each entry through the
 * rows of its name. Command-line options are entries too, applied when given
 * and again after any file, so they win without any record of who set what.
 * conf_finish() fills the defaults in one pass and checks the settings in
 * another; a rule between two settings is shown at the first one's place in
 * the file, else at the second's, else on the command line.
 *
 * Errors read "file:line:column: message" (libyaml's marks count from 0),
 * "command line: message", or "file: message" for the file as a whole. A
 * load's errors are sorted by position, so they come in the file's order
 * whichever pass found them. Only a YAML syntax error ends a walk early.
 */
#include "conf.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <yaml.h>

#include "backend.h"
#include "log.h"
#include "num.h"
#include "xmalloc.h"

#define CONF_REQUEST_OVERHEAD 32	/* least bytes of a request that are not the key */
#define CONF_SECRET_MAX 4096		/* largest password file */
#define CONF_QUOTE_MAX 48		/* most bytes of a value quoted in a message */
#define CONF_STD_TAG "tag:yaml.org,2002:" /* what libyaml makes of "!!" */
#define CONF_CMDLINE 0			/* the line of what the command line gave */
#define CONF_WHOLE_FILE SIZE_MAX	/* the line of an error about the whole file */
#define AT_CMDLINE ((struct conf_pos){ CONF_CMDLINE, 0 })
#define AT_MARK(m) ((struct conf_pos){ (m).line + 1, (m).column + 1 })
#define FIELD(base, off) ((void *)((char *)(base) + (off)))

/* The i-th log level's name, for log.level. */
static const char *
conf_level_choice(size_t i)
{
	return i <= LOG_LEVEL_ERROR ? log_level_name((enum log_level)i) : NULL;
}

/* The i-th registered backend's name, for backend.type. */
static const char *
conf_backend_choice(size_t i)
{
	return backend_at(i) != NULL ? backend_at(i)->name : NULL;
}

/* The i-th form -b takes: a backend's name, or its URL if it takes one. */
static const char *
conf_url_choice(size_t i)
{
	const struct backend_ops *ops = backend_at(i);

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
	{ .name = "auth.password", .type = CONF_SECRET, .off = OFF(password), .reloadable = 1 },
	{ .name = "auth.password_file", .type = CONF_SECRET_FILE, .off = OFF(password_file),
	  .pair = "auth.password", .reloadable = 1 },
	{ .name = "backend.type", .type = CONF_ENUM, .off = OFF(backend_type),
	  .choice = conf_backend_choice, .defstr = "memory" },
	INT("locks.default_ttl_ms", default_ttl_ms, 10, 31536000000LL, 30000, 1),
	INT("locks.max_ttl_ms", max_ttl_ms, 10, 31536000000LL, 86400000, 1),
	INT("locks.margin_percent", margin_percent, 1, 50, 10, 0),
	INT("locks.lock_delay_ms", lock_delay_ms, 0, 3600000, 0, 0),
	INT("sessions.idle_timeout_ms", idle_timeout_ms, 0, 31536000000LL, 0, 1),
	INT("sessions.tcp_keepalive_s", tcp_keepalive_s, 0, 32767, 15, 0),
	INT("sessions.tcp_keepalive_interval_s", tcp_keepalive_interval_s, 1, 32767, 5, 0),
	INT("sessions.tcp_keepalive_probes", tcp_keepalive_probes, 1, 127, 3, 0),
	INT("limits.max_clients", max_clients, 1, 1000000, 10000, 1),
	INT("limits.max_key_bytes", max_key_bytes, 1, 536870912LL - CONF_REQUEST_OVERHEAD, 1024, 1),
	INT("limits.max_request_bytes", max_request_bytes, 64, 536870912LL, 65536, 1),
	INT("limits.max_waiters_per_key", max_waiters_per_key, 1, 2147483647, 10000, 1),
	INT("limits.max_locks_per_session", max_locks_per_session, 1, 2147483647, 10000, 1),
	{ .name = "log.level", .type = CONF_ENUM, .off = OFF(log_level),
	  .choice = conf_level_choice, .defstr = "info", .reloadable = 1 },
	{ .name = "log.file", .type = CONF_STR, .off = OFF(log_file), .reloadable = 1 },
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
	SH_MAPPING,		/* a mapping (not kept) */
	SH_LIST,		/* a sequence (see the entry's items) */
	SH_BAD			/* an alias or a bad tag, already reported */
};

/* One value, or one item of a list. */
struct conf_value {
	enum conf_shape shape;	/* what it was written as */
	char *text;		/* a scalar's text, NUL-terminated; wiped when freed */
	size_t len;		/* its length (a NUL inside makes strlen() shorter) */
	struct conf_pos pos;	/* where it starts */
};

/* A key of the file, or a setting given on the command line. */
struct conf_entry {
	char *name;		/* the dotted name */
	struct conf_value v;	/* its value */
	struct conf_value *items; /* SH_LIST: the items */
	size_t nitems;		/* how many */
	size_t keyline;		/* the line of its key (duplicates name it) */
	char *secret;		/* CONF_SECRET_FILE: what the file held, until
				 * conf_finish() moves it to the secret's field */
	bool applied;		/* every row of its name took its value */
};

/* A list of entries. */
struct conf_entries {
	struct conf_entry *v;	/* the entries, in order */
	size_t n;		/* how many */
};

/* A row of any table, under its full name. */
struct conf_row {
	char *name;		/* full dotted name ("backend." + a backend's row's) */
	const struct conf_setting *s; /* the row */
	size_t table;		/* 0: conf_table[]; i + 1: backend_at(i)'s */
};

/* The config and what only this file sees of it. */
struct conf_priv {
	struct conf pub;		/* what the header shows; first */
	struct conf_row *rows;		/* every table's rows */
	size_t nrows;			/* how many */
	void **tables;			/* the struct each table fills: &pub, then
					 * each backend's settings (NULL for none) */
	struct conf_entries file;	/* the entries of the file(s) loaded */
	struct conf_entries cmdline;	/* the entries of the command line */
	struct conf_pos *errpos;	/* the position of each error */
};

/* One conf_load() in progress. */
struct conf_parser {
	struct conf_priv *p;		/* the config being filled */
	yaml_parser_t yp;		/* libyaml's state */
	size_t first;			/* this file's first entry in p->file */
};

/* Append "where: message" to c->errors, pos saying where. Returns -1. */
static int __attribute__((format(printf, 3, 4)))
conf_error(struct conf_priv *p, struct conf_pos pos, const char *fmt, ...)
{
	struct conf *c = &p->pub;
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	c->errors = xreallocarray(c->errors, c->nerrors + 1, sizeof(*c->errors));
	p->errpos = xreallocarray(p->errpos, c->nerrors + 1, sizeof(*p->errpos));
	p->errpos[c->nerrors] = pos;
	c->errors[c->nerrors++] = pos.line == CONF_CMDLINE ? xasprintf("command line: %s", msg) :
	    pos.line == CONF_WHOLE_FILE ? xasprintf("%s: %s", c->path, msg) :
	    xasprintf("%s:%zu:%zu: %s", c->path, pos.line, pos.col, msg);
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

/* Replace the string in field with a copy of s (NULL for none), wiping the
 * old one first if it may be a secret. */
static void
conf_set_str(char **field, const char *s, bool secret)
{
	if (secret && *field != NULL)
		explicit_bzero(*field, strlen(*field));
	free(*field);
	*field = s != NULL ? xstrdup(s) : NULL;
}

/* Free what e holds, its texts wiped (they may be secrets). */
static void
conf_free_entry(struct conf_entry *e)
{
	free(e->name);
	for (size_t i = 0; i <= e->nitems; i++) {
		struct conf_value *v = i < e->nitems ? &e->items[i] : &e->v;

		if (v->text != NULL)
			explicit_bzero(v->text, v->len);
		free(v->text);
	}
	free(e->items);
	conf_set_str(&e->secret, NULL, true);
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
static const struct conf_row *
conf_find(const struct conf_priv *p, const char *name, bool section)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < p->nrows; i++)
		if (section ? strncmp(p->rows[i].name, name, n) == 0 && p->rows[i].name[n] == '.' :
		    strcmp(p->rows[i].name, name) == 0)
			return &p->rows[i];
	return NULL;
}

/* The entry that last gave name a value: the command line's, else the
 * file's; NULL if none did. */
static struct conf_entry *
conf_effective(struct conf_priv *p, const char *name)
{
	struct conf_entries *lists[] = { &p->cmdline, &p->file };

	for (size_t l = 0; l < 2; l++)
		for (size_t i = lists[l]->n; i-- > 0;)
			if (lists[l]->v[i].applied && strcmp(lists[l]->v[i].name, name) == 0)
				return &lists[l]->v[i];
	return NULL;
}

/* ---- pass 1: the YAML file into entries ----------------------------------- */

/* Read the next event. false after reporting a YAML error, which ends the
 * walk: libyaml gives nothing more. */
static bool
conf_next(struct conf_parser *ps, yaml_event_t *ev)
{
	yaml_parser_t *yp = &ps->yp;
	char ctx[128] = "", val[16] = "";

	if (yaml_parser_parse(yp, ev))
		return true;
	if (yp->error == YAML_MEMORY_ERROR)
		log_fatal("out of memory reading %s", ps->p->pub.path);
	if (yp->error == YAML_READER_ERROR) {
		if (yp->problem_value != -1)
			snprintf(val, sizeof(val), "0x%02X ", (unsigned)yp->problem_value);
		conf_error(ps->p, (struct conf_pos){ CONF_WHOLE_FILE, 0 },
		    "%s (%sat byte offset %zu)", yp->problem, val, yp->problem_offset);
		return false;
	}
	if (yp->context != NULL)
		snprintf(ctx, sizeof(ctx), " (%s at line %zu, column %zu)", yp->context,
		    yp->context_mark.line + 1, yp->context_mark.column + 1);
	conf_error(ps->p, AT_MARK(yp->problem_mark), "syntax error: %s%s",
	    yp->problem != NULL ? yp->problem : "cannot parse the file", ctx);
	return false;
}

/* Consume the rest of the node that starts with ev (already read). */
static bool
conf_skip(struct conf_parser *ps, const yaml_event_t *ev)
{
	int depth = ev->type == YAML_SEQUENCE_START_EVENT || ev->type == YAML_MAPPING_START_EVENT;
	yaml_event_t e;

	while (depth > 0) {
		if (!conf_next(ps, &e))
			return false;
		if (e.type == YAML_SEQUENCE_START_EVENT || e.type == YAML_MAPPING_START_EVENT)
			depth++;
		else if (e.type == YAML_SEQUENCE_END_EVENT || e.type == YAML_MAPPING_END_EVENT)
			depth--;
		yaml_event_delete(&e);
	}
	return true;
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

/* Read the node that starts with ev into v: a scalar's text; with items,
 * a list's items too (each a scalar, or a collection skipped). */
static bool
conf_read(struct conf_parser *ps, const yaml_event_t *ev, struct conf_value *v,
    struct conf_entry *items)
{
	yaml_event_t e;
	bool ok;

	v->shape = conf_shape(ps, ev);
	v->pos = AT_MARK(ev->start_mark);
	if (ev->type == YAML_SCALAR_EVENT) {
		v->len = ev->data.scalar.length;
		v->text = xmemdup(ev->data.scalar.value, v->len);
		return true;
	}
	if (ev->type != YAML_SEQUENCE_START_EVENT || items == NULL)
		return conf_skip(ps, ev);
	for (;;) {
		if (!conf_next(ps, &e))
			return false;
		if (e.type == YAML_SEQUENCE_END_EVENT) {
			yaml_event_delete(&e);
			return true;
		}
		items->items = xreallocarray(items->items, items->nitems + 1, sizeof(*items->items));
		memset(&items->items[items->nitems], 0, sizeof(*items->items));
		ok = conf_read(ps, &e, &items->items[items->nitems++], NULL);
		yaml_event_delete(&e);
		if (!ok)
			return false;
	}
}

static bool conf_walk_mapping(struct conf_parser *, const char *);

/* The node that starts with ev, the value of the section name ("" for the
 * top level): a mapping to walk, or nothing. */
static bool
conf_walk_section(struct conf_parser *ps, const char *name, const yaml_event_t *ev)
{
	char what[CONF_QUOTE_MAX + 8];
	struct conf_entry e = { .name = NULL };
	bool ok;

	if (ev->type == YAML_MAPPING_START_EVENT)
		return conf_shape(ps, ev) == SH_MAPPING ? conf_walk_mapping(ps, name) :
		    conf_skip(ps, ev);
	ok = conf_read(ps, ev, &e.v, NULL);
	conf_what(&e.v, what, sizeof(what));
	if (e.v.shape != SH_EMPTY && e.v.shape != SH_BAD && *name != '\0')
		conf_error(ps->p, e.v.pos, "'%s' must be a mapping, not %s", name, what);
	else if (e.v.shape != SH_EMPTY && e.v.shape != SH_BAD)
		conf_error(ps->p, e.v.pos, "the top level must be a mapping, not %s", what);
	conf_free_entry(&e);
	return ok;
}

/* The value (first event val) of key k of the section prefix: a setting's
 * becomes an entry, a section's is walked, anything else reported. */
static bool
conf_walk_key(struct conf_parser *ps, const char *prefix, const struct conf_value *k,
    const yaml_event_t *val)
{
	struct conf_priv *p = ps->p;
	char what[CONF_QUOTE_MAX + 8], q[CONF_QUOTE_MAX + 4], *name;
	struct conf_entry *e = NULL, skip = { .name = NULL };
	bool section, known, ok;

	if (k->shape == SH_MAPPING || k->shape == SH_LIST)
		conf_error(p, k->pos, "a key must be a scalar, not %s",
		    conf_what(k, what, sizeof(what)));
	if (k->text == NULL) {		/* reported */
		ok = conf_read(ps, val, &skip.v, NULL);
		conf_free_entry(&skip);
		return ok;
	}
	name = *prefix != '\0' ? xasprintf("%s.%s", prefix, k->text) : xstrdup(k->text);
	section = conf_find(p, name, true) != NULL;
	known = section || conf_find(p, name, false) != NULL;
	conf_quote(name, strlen(name), q, sizeof(q));
	for (size_t i = ps->first; i < p->file.n && e == NULL; i++)
		if (strcmp(p->file.v[i].name, name) == 0)
			e = &p->file.v[i];
	if (strchr(k->text, '.') != NULL || !known)
		conf_error(p, k->pos, strchr(k->text, '.') != NULL && known ?
		    "unknown key '%s' (a dot does not nest keys: write a mapping)" :
		    "unknown key '%s'", q);
	else if (e != NULL)
		conf_error(p, k->pos, "duplicate key '%s' (first at line %zu)", q, e->keyline);
	else {
		e = conf_push(&p->file);	/* a section's too, to find duplicates */
		e->name = name;
		e->keyline = k->pos.line;
		return section ? conf_walk_section(ps, name, val) : conf_read(ps, val, &e->v, e);
	}
	free(name);
	ok = conf_read(ps, val, &skip.v, NULL);
	conf_free_entry(&skip);
	return ok;
}

/* The keys and values of the mapping whose start was read, up to its end;
 * prefix is its dotted name ("" at the top). */
static bool
conf_walk_mapping(struct conf_parser *ps, const char *prefix)
{
	struct conf_entry k = { .name = NULL };
	yaml_event_t key, val;
	bool ok = true;

	while (ok && conf_next(ps, &key)) {
		if (key.type == YAML_MAPPING_END_EVENT) {
			yaml_event_delete(&key);
			return true;
		}
		ok = conf_read(ps, &key, &k.v, NULL) && conf_next(ps, &val);
		yaml_event_delete(&key);
		if (ok) {
			ok = conf_walk_key(ps, prefix, &k.v, &val);
			yaml_event_delete(&val);
		}
		conf_free_entry(&k);
		memset(&k, 0, sizeof(k));
	}
	return false;
}

/* The whole stream: nothing, or one document whose top is a mapping. */
static void
conf_walk(struct conf_parser *ps)
{
	yaml_event_t ev;
	bool ok;

	if (!conf_next(ps, &ev))		/* stream start */
		return;
	yaml_event_delete(&ev);
	if (!conf_next(ps, &ev) || ev.type == YAML_STREAM_END_EVENT)
		return;				/* an empty file */
	yaml_event_delete(&ev);			/* document start */
	if (!conf_next(ps, &ev))
		return;
	ok = conf_walk_section(ps, "", &ev);
	yaml_event_delete(&ev);
	if (!ok || !conf_next(ps, &ev))		/* document end */
		return;
	yaml_event_delete(&ev);
	if (!conf_next(ps, &ev))
		return;
	if (ev.type == YAML_DOCUMENT_START_EVENT)
		conf_error(ps->p, AT_MARK(ev.start_mark),
		    "several documents in one file are not supported");
	yaml_event_delete(&ev);
}

/* ---- pass 2: entries into the settings ------------------------------------ */

/* Parse text as the value of row s: CONF_INT an optional sign and decimal
 * digits without a leading zero, CONF_MODE octal digits. */
static enum num_status
conf_number(const struct conf_setting *s, const char *text, long long *out)
{
	const char *d = text + (s->type == CONF_INT && (*text == '+' || *text == '-'));
	long long v = 0;

	if (s->type == CONF_INT && (!isdigit((unsigned char)*d) || (d[0] == '0' && d[1] != '\0')))
		return NUM_SYNTAX;
	if (s->type == CONF_INT)
		return num_parse(text + (*text == '+'), strlen(text + (*text == '+')), s->min,
		    s->max, out);
	if (*d == '\0' || strspn(d, "01234567") != strlen(d))
		return NUM_SYNTAX;
	for (; *d != '\0' && v <= s->max; d++)
		v = v * 8 + (*d - '0');
	if (v < s->min || v > s->max)
		return NUM_RANGE;
	*out = v;
	return NUM_OK;
}

/* Read the password file named text (relative to the config file's
 * directory) into e->secret and its resolved name into field. */
static int
conf_apply_secret_file(struct conf_priv *p, struct conf_entry *e, char **field,
    const char *text)
{
	const char *slash = p->pub.path != NULL ? strrchr(p->pub.path, '/') : NULL, *why;
	char buf[CONF_SECRET_MAX + 1], q[CONF_QUOTE_MAX + 4], *file;
	size_t n = 0;
	int err = 0;
	FILE *fp;

	conf_set_str(&e->secret, NULL, true);
	conf_set_str(field, NULL, false);
	if (*text == '\0')
		return 0;
	file = text[0] == '/' || slash == NULL ? xstrdup(text) :
	    xasprintf("%.*s/%s", (int)(slash - p->pub.path), p->pub.path, text);
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
	conf_quote(file, strlen(file), q, sizeof(q));
	if (err != 0)
		conf_error(p, e->v.pos, "cannot read password file '%s': %s", q, why);
	else if (why != NULL)
		conf_error(p, e->v.pos, "password file '%s' %s", q, why);
	else {
		e->secret = xmemdup(buf, n);
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

/* Apply list entry e to the CONF_ADDRLIST row s of base: it replaces the
 * list if each item is a good address, listed once. */
static int
conf_apply_list(struct conf_priv *p, const struct conf_entry *e, const struct conf_setting *s,
    void *base)
{
	char ***field = FIELD(base, s->off), what[CONF_QUOTE_MAX + 8];
	size_t *count = FIELD(base, s->count), n = 0;
	struct addr *a;
	const char *why;
	bool bad = false;

	if (e->v.shape != SH_LIST)
		return e->v.shape == SH_BAD ? -1 : conf_error(p, e->v.pos,
		    "'%s' must be a list of addresses, not %s", e->name,
		    conf_what(&e->v, what, sizeof(what)));
	a = xcalloc(e->nitems + 1, sizeof(*a));
	for (size_t i = 0; i < e->nitems; i++) {
		const struct conf_value *v = &e->items[i];
		bool dup = false;

		conf_what(v, what, sizeof(what));
		why = v->text != NULL && strlen(v->text) != v->len ?
		    "it contains a NUL character" : NULL;
		if (v->shape == SH_BAD)
			bad = true;
		else if (v->shape == SH_MAPPING || v->shape == SH_LIST || v->shape == SH_EMPTY)
			bad = conf_error(p, v->pos, "'%s' entries must be addresses, not %s", e->name,
			    what);
		else if (why != NULL || addr_parse(v->text, ADDR_PORT_REQUIRED, &a[n], &why) < 0)
			bad = conf_error(p, v->pos, "bad %s address %s: %s", e->name, what, why);
		else {
			for (size_t j = 0; j < n; j++)
				dup = dup || conf_addr_same(&a[j], &a[n]);
			if (dup)
				bad = conf_error(p, v->pos, "duplicate %s address '%s'", e->name,
				    conf_quote(a[n].text, strlen(a[n].text), what, sizeof(what)));
			else
				n++;
		}
	}
	if (!bad) {
		while (*count > 0)
			free((*field)[--*count]);
		free(*field);
		*field = xcalloc(n + 1, sizeof(**field));
		for (; *count < n; (*count)++)
			(*field)[*count] = xstrdup(a[*count].text);
	}
	free(a);
	return bad ? -1 : 0;
}

/* Apply entry e to row s of base. 0, or -1 after reporting why. */
static int
conf_apply_row(struct conf_priv *p, struct conf_entry *e, const struct conf_setting *s,
    void *base)
{
	char what[CONF_QUOTE_MAX + 8], q[CONF_QUOTE_MAX + 4], names[128];
	const char *want = s->type == CONF_INT ? "a decimal integer" : s->type == CONF_MODE ?
	    "an octal mode such as 0660" : "a string", *text, *why, *name = NULL;
	const struct conf_value *v = &e->v;
	void *field = FIELD(base, s->off);
	struct addr a;
	long long n;

	if (s->type == CONF_ADDRLIST || v->shape == SH_BAD)
		return v->shape == SH_BAD ? -1 : conf_apply_list(p, e, s, base);
	conf_what(v, what, sizeof(what));
	if (v->shape == SH_MAPPING || v->shape == SH_LIST)
		return conf_error(p, v->pos, "'%s' must be %s, not %s", e->name, want, what);
	if (strlen(v->text) != v->len)
		return conf_error(p, v->pos, "'%s' must not contain a NUL character", e->name);
	text = v->shape == SH_EMPTY ? "" : v->text;
	conf_quote(text, strlen(text), q, sizeof(q));
	switch (s->type) {
	case CONF_INT:
	case CONF_MODE:
		if (s->type == CONF_INT && (v->shape == SH_QUOTED || v->shape == SH_STR))
			return conf_error(p, v->pos, "'%s' must be a decimal integer, not %s",
			    e->name, v->shape == SH_STR ? "a string" : "a quoted string");
		switch (conf_number(s, text, &n)) {
		case NUM_OK:
			*(long long *)field = n;
			return 0;
		case NUM_RANGE:
			if (s->type == CONF_MODE)
				return conf_error(p, v->pos, "'%s' must be between %#llo and %#llo, "
				    "not %s", e->name, s->min, s->max, q);
			return conf_error(p, v->pos, "'%s' must be between %lld and %lld, not %s",
			    e->name, s->min, s->max, q);
		default:
			return conf_error(p, v->pos, "'%s' must be %s, not %s", e->name, want, what);
		}
	case CONF_ENUM:
		for (size_t i = 0; (name = s->choice(i)) != NULL && strcmp(name, text) != 0; i++)
			;
		if (name == NULL)
			return conf_error(p, v->pos, "'%s' must be %s, not %s", e->name,
			    conf_join(s->choice, names, sizeof(names)), what);
		break;
	case CONF_SHORTSTR:
		if (*text == '\0')
			return conf_error(p, v->pos, "'%s' must not be empty", e->name);
		if (strlen(text) > (size_t)s->max)
			return conf_error(p, v->pos, "'%s' must be at most %lld bytes, not %zu",
			    e->name, s->max, strlen(text));
		break;
	case CONF_SERVER:
		if (conf_server_parse(text, ADDR_PORT_REQUIRED, &a, &why) < 0)
			return conf_error(p, v->pos, "bad %s '%s': %s", e->name, q, why);
		*(struct addr *)field = a;
		return 0;
	case CONF_SECRET_FILE:
		return conf_apply_secret_file(p, e, field, text);
	default:
		break;
	}
	conf_set_str(field, *text != '\0' ? text : NULL, s->type == CONF_SECRET);
	return 0;
}

/* Apply entry e through every row of its name (conf_table[]'s, or each
 * backend's for a "backend." key), reporting the first refusal. */
static bool
conf_apply(struct conf_priv *p, struct conf_entry *e)
{
	e->applied = false;
	for (size_t i = 0; i < p->nrows; i++)
		if (strcmp(p->rows[i].name, e->name) == 0) {
			if (conf_apply_row(p, e, p->rows[i].s, p->tables[p->rows[i].table]) < 0)
				return e->applied = false;
			e->applied = true;
		}
	return e->applied;
}

/* ---- the command line ----------------------------------------------------- */

/* Apply e, given on the command line, and keep it to apply again after any
 * file loaded later; e is freed if refused. 0 or -1. */
static int
conf_cmdline(struct conf_priv *p, struct conf_entry e)
{
	if (!conf_apply(p, &e)) {
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
	return (struct conf_value){ SH_PLAIN, xstrdup(s), strlen(s), AT_CMDLINE };
}

/* -l ADDR: one list of every -l so far, which replaces the file's. */
int
conf_override_listen(struct conf *c, const char *addr)
{
	struct conf_priv *p = (struct conf_priv *)c;
	const struct conf_entry *prev = conf_effective(p, "listen");
	struct conf_entry e = { .name = xstrdup("listen"), .v = conf_cmdline_value("") };

	if (prev != NULL && prev->v.pos.line != CONF_CMDLINE)
		prev = NULL;
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

	for (size_t i = 0; rc == 1 && (ops = backend_at(i)) != NULL; i++)
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

	while (backend_at(ntables - 1) != NULL)
		ntables++;
	p->tables = xcalloc(ntables, sizeof(*p->tables));
	p->tables[0] = &p->pub;
	for (size_t t = 0; t < ntables; t++) {
		const struct backend_ops *ops = t > 0 ? backend_at(t - 1) : NULL;
		const struct conf_setting *rows = ops != NULL ? ops->settings : conf_table;
		size_t n = ops != NULL ? ops->nsettings : sizeof(conf_table) / sizeof(conf_table[0]);

		if (ops != NULL && ops->settings_size > 0)
			p->tables[t] = xcalloc(1, ops->settings_size);
		p->rows = xreallocarray(p->rows, p->nrows + n, sizeof(*p->rows));
		for (size_t i = 0; i < n; i++) {
			p->rows[p->nrows++] = (struct conf_row){ xasprintf("%s%s",
			    ops != NULL ? "backend." : "", rows[i].name), &rows[i], t };
			if (rows[i].type == CONF_INT || rows[i].type == CONF_MODE)
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
		const struct conf_setting *s = p->rows[i].s;
		void *base = p->tables[p->rows[i].table];
		char ***list = FIELD(base, s->off);

		if (s->type == CONF_ADDRLIST) {
			for (size_t j = 0; j < *(size_t *)FIELD(base, s->count); j++)
				free((*list)[j]);
			free(*list);
		} else if (s->type != CONF_INT && s->type != CONF_MODE && s->type != CONF_SERVER)
			conf_set_str(FIELD(base, s->off), NULL, s->type == CONF_SECRET);
		free(p->rows[i].name);
	}
	for (size_t t = 1; backend_at(t - 1) != NULL; t++)
		free(p->tables[t]);
	for (size_t i = 0; i < p->file.n + p->cmdline.n; i++)
		conf_free_entry(i < p->file.n ? &p->file.v[i] : &p->cmdline.v[i - p->file.n]);
	for (size_t i = 0; i < c->nerrors; i++)
		free(c->errors[i]);
	free(p->file.v);
	free(p->cmdline.v);
	free(c->errors);
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
	struct conf_parser ps = { .p = p, .first = p->file.n };
	struct conf_pos whole = { CONF_WHOLE_FILE, 0 };
	size_t before = c->nerrors;
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
	if (!yaml_parser_initialize(&ps.yp))
		log_fatal("out of memory reading %s", path);
	yaml_parser_set_input_file(&ps.yp, fp);
	conf_walk(&ps);					/* pass 1 */
	yaml_parser_delete(&ps.yp);
	fclose(fp);
	for (size_t i = ps.first; i < p->file.n; i++)	/* pass 2 */
		conf_apply(p, &p->file.v[i]);
	for (size_t i = 0; i < p->cmdline.n; i++)	/* the command line still wins */
		conf_apply(p, &p->cmdline.v[i]);
	conf_sort_errors(p, before);
	return c->nerrors > before ? -1 : 0;
}

/* Give the field of row s in base its default if it is unset. */
static void
conf_default(const struct conf_setting *s, void *base)
{
	void *field = FIELD(base, s->off);
	const char *why;

	switch (s->type) {
	case CONF_INT:
	case CONF_MODE:
		if (*(long long *)field == CONF_UNSET)
			*(long long *)field = s->def;
		break;
	case CONF_SERVER:
		if (s->defstr != NULL && ((struct addr *)field)->text[0] == '\0' &&
		    conf_server_parse(s->defstr, ADDR_PORT_REQUIRED, field, &why) < 0)
			log_fatal("%s: bad default: %s", s->name, why);
		break;
	case CONF_ADDRLIST:
		if (s->defstr != NULL && *(char ***)field == NULL) {
			*(char ***)field = xcalloc(2, sizeof(char *));
			**(char ***)field = xstrdup(s->defstr);
			*(size_t *)FIELD(base, s->count) = 1;
		}
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
conf_rule(struct conf_priv *p, const char *a, const char *b)
{
	const struct conf_entry *ea = conf_effective(p, a), *eb = conf_effective(p, b);

	if (ea != NULL && ea->v.pos.line != CONF_CMDLINE)
		return ea->v.pos;
	return eb != NULL ? eb->v.pos : AT_CMDLINE;
}

/* Check row r alone: a list must not be empty; a secret and its file must
 * not both be set, and the file's secret becomes the secret. */
static void
conf_check(struct conf_priv *p, const struct conf_row *r)
{
	void *base = p->tables[r->table];
	const struct conf_row *pair;
	struct conf_entry *e;
	char *name, **secret;

	if (r->s->type == CONF_ADDRLIST && *(size_t *)FIELD(base, r->s->count) == 0)
		conf_error(p, conf_rule(p, r->name, r->name), "'%s' must have at least one address",
		    r->name);
	if (r->s->type != CONF_SECRET_FILE)
		return;
	name = xasprintf("%s%s", r->table > 0 ? "backend." : "", r->s->pair);
	if ((pair = conf_find(p, name, false)) == NULL)
		log_fatal("%s: no setting %s", r->name, name);
	secret = FIELD(base, pair->s->off);
	if (*secret != NULL && *(char **)FIELD(base, r->s->off) != NULL)
		conf_error(p, conf_rule(p, name, r->name), "'%s' and '%s' cannot both be set",
		    name, r->name);
	else if ((e = conf_effective(p, r->name)) != NULL && e->secret != NULL) {
		conf_set_str(secret, NULL, true);
		*secret = e->secret;
		e->secret = NULL;
	}
	free(name);
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
		conf_default(p->rows[i].s, p->tables[p->rows[i].table]);
	for (t = 1; (ops = backend_at(t - 1)) != NULL && strcmp(ops->name, c->backend_type) != 0;
	    t++)
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
	if (ops != NULL && ops->min_lease_ms != NULL &&
	    (uint64_t)c->default_ttl_ms < ops->min_lease_ms(c->backend_settings))
		conf_error(p, conf_rule(p, "locks.default_ttl_ms", "backend.type"),
		    "'locks.default_ttl_ms' (%lld) must be at least the %s backend's shortest "
		    "lease (%llu ms)", c->default_ttl_ms, ops->name,
		    (unsigned long long)ops->min_lease_ms(c->backend_settings));
	return c->nerrors > 0 ? -1 : 0;
}

const void *
conf_backend_value(const struct conf *c, const char *name)
{
	const struct conf_priv *p = (const struct conf_priv *)c;

	for (size_t i = 0; c->backend_type != NULL && i < p->nrows; i++) {
		const struct conf_row *r = &p->rows[i];

		if (r->table > 0 && strcmp(r->s->name, name) == 0 &&
		    strcmp(backend_at(r->table - 1)->name, c->backend_type) == 0)
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
