/*
 * dlock_cli_elect — the dlock commands that look at a key's leader:
 * "leader" (its state now) and "observe" (its state, then each change).
 * They print, in a person's words or as JSON, what dlock_leader and
 * dlock_observe return; "campaign", which runs a command as "run" does,
 * is in dlock_cli.c.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "dlock_cli.h"

/* What leader and observe were asked for on their command lines. */
struct watch_args {
	const char *key;	/* KEY */
	int json;		/* --json: JSON objects */
	long long count;	/* observe --count: stop after this many lines; 0: never */
};

/*
 * Parse the arguments of leader or observe (with_count: observe, which takes
 * --count) into a: options before or after KEY, "--" before a KEY that
 * starts with a dash. 0, or the exit status of a usage error (printed).
 */
static int
parse_watch_args(const struct command *cmd, int argc, char **argv, int with_count,
    struct watch_args *a)
{
	const char *val;
	int dashes = 0, missing;

	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];

		missing = 0;
		if (!dashes && is_help(arg)) {
			printf("usage: dlock [-a ADDR] [-p PASSWORD] %s %s\n", cmd->name,
			    cmd->usage);
			exit(0);
		}
		if (dashes || arg[0] != '-' || arg[1] == '\0') {
			if (a->key != NULL)
				return usage_error(cmd, "unexpected argument %s", arg);
			a->key = arg;
			dashes = 0;
		} else if (strcmp(arg, "--") == 0) {
			dashes = 1;
		} else if (strcmp(arg, "--json") == 0) {
			a->json = 1;
		} else if (with_count &&
		    (val = opt_value(argc, argv, &i, "--count", &missing)) != NULL) {
			if (parse_num(val, 1, LLONG_MAX, &a->count) < 0)
				return usage_error(cmd, "--count: not a positive number: %s", val);
		} else if (missing) {
			return usage_error(cmd, "option %s needs a value", arg);
		} else {
			return usage_error(cmd, "unknown option %s", arg);
		}
	}
	if (a->key == NULL)
		return usage_error(cmd, "%s", "missing KEY");
	if (*a->key == '\0')
		return usage_error(cmd, "%s", "KEY is empty");
	return 0;
}

/*
 * The length of the UTF-8 sequence of two bytes or more at s (n bytes
 * left), or 0 when s does not start one (ASCII, a stray or overlong byte, a
 * surrogate, past U+10FFFF, cut short).
 */
static size_t
utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t len;

	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4;
	else
		return 0;
	/* the second byte's range rules out overlongs, surrogates and > U+10FFFF */
	if (s[0] == 0xe0)
		lo = 0xa0;
	else if (s[0] == 0xed)
		hi = 0x9f;
	else if (s[0] == 0xf0)
		lo = 0x90;
	else if (s[0] == 0xf4)
		hi = 0x8f;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

/*
 * Print s (n bytes, any byte) in double quotes: as a JSON string (json), or
 * for a person, with C's escapes. UTF-8 text is printed as it is; a byte
 * that is not is U+FFFD in JSON, \xHH for a person.
 */
static void
print_quoted(const char *s, size_t n, int json)
{
	/* the bytes written as a backslash and a letter, and their letters */
	static const char escaped[] = "\"\\\n\r\t", letter[] = "\"\\nrt";
	const unsigned char *u = (const unsigned char *)s;
	const char *e;

	putchar('"');
	for (size_t i = 0; i < n; i++) {
		size_t len;

		if (u[i] != '\0' && (e = strchr(escaped, u[i])) != NULL) {
			putchar('\\');
			putchar(letter[e - escaped]);
		} else if (u[i] >= 0x20 && u[i] < 0x7f) {
			putchar(u[i]);
		} else if (u[i] >= 0x80 && (len = utf8_seq(u + i, n - i)) > 0) {
			fwrite(u + i, 1, len, stdout);
			i += len - 1;
		} else if (json && u[i] >= 0x80) {
			fputs("\\ufffd", stdout);
		} else if (json) {
			printf("\\u%04x", u[i]);
		} else {
			printf("\\x%02x", u[i]);
		}
	}
	putchar('"');
}

/* Print the state l of key as a JSON object on a line of its own. */
static void
print_json(const char *key, const struct dlock_leader *l)
{
	fputs("{\"key\":", stdout);
	print_quoted(key, strlen(key), 1);
	fputs(",\"value\":", stdout);
	if (l->has_value)
		print_quoted(l->value, l->valuelen, 1);
	else
		fputs("null", stdout);
	printf(",\"term\":%lld,\"revision\":%lld,\"kind\":", l->term, l->revision);
	print_quoted(l->kind, strlen(l->kind), 1);
	printf(",\"holders\":%lld}\n", l->holders);
}

/* Who leads, in a person's words: leader "VALUE", or no leader (and why). */
static void
print_who(const struct dlock_leader *l)
{
	if (l->has_value) {
		fputs("leader ", stdout);
		print_quoted(l->value, l->valuelen, 0);
	} else if (l->holders == 0) {
		fputs("no leader", stdout);
	} else {
		printf("no leader (held %s by %lld)", l->kind, l->holders);
	}
}

/* dlock leader [--json] KEY */
int
cmd_leader(const struct command *cmd, int argc, char **argv)
{
	struct watch_args a = { 0 };
	struct dlock_leader l;
	dlock_t *d;
	int status;

	if ((status = parse_watch_args(cmd, argc, argv, 0, &a)) != 0)
		return status;
	if ((d = connect_or_report(&status)) == NULL)
		return status;
	if (dlock_leader(d, a.key, &l) < 0) {
		status = report(d);
		dlock_close(d);
		return status;
	}
	dlock_close(d);
	if (a.json) {
		print_json(a.key, &l);
		return 0;
	}
	fputs("value: ", stdout);
	if (l.has_value)
		print_quoted(l.value, l.valuelen, 0);
	else
		fputs("none", stdout);
	printf("\nterm: %lld\nrevision: %lld\nkind: %s\nholders: %lld\n", l.term,
	    l.revision, l.kind, l.holders);
	return 0;
}

/*
 * dlock observe [--json] [--count N] KEY: the state now, then a line at
 * every change (OBSERVE key AFTER revision, waiting for ever), each line
 * written out at once. It ends after N lines, or when interrupted (SIGINT,
 * SIGTERM: the default action, between lines or during a wait).
 */
int
cmd_observe(const struct command *cmd, int argc, char **argv)
{
	struct watch_args a = { 0 };
	struct dlock_leader l;
	long long after = -1;
	dlock_t *d;
	int status;

	if ((status = parse_watch_args(cmd, argc, argv, 1, &a)) != 0)
		return status;
	if ((d = connect_or_report(&status)) == NULL)
		return status;
	for (long long n = 0; a.count == 0 || n < a.count; n++) {
		if (dlock_observe(d, a.key, after, -1, &l) < 0) {
			status = report(d);
			break;
		}
		after = l.revision;
		if (a.json) {
			print_json(a.key, &l);
		} else {
			printf("rev %lld  term %lld  ", l.revision, l.term);
			print_who(&l);
			putchar('\n');
		}
		if ((status = flushed()) != 0)
			break;
	}
	dlock_close(d);
	return status;
}
