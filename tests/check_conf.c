/*
 * check_conf — the config loader: good files, defaults, overrides, and the
 * exact list of errors for each bad fixture under tests/conf/.
 *
 * Run from the top of the source tree, or with TOPDIR set to it.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "backend.h"
#include "conf.h"
#include "log.h"
#include "suite.h"

/* The file name of something in the source tree; the caller frees it. */
static char *
top_path(const char *rel)
{
	const char *top = getenv("TOPDIR");
	char *path;

	ck_assert_int_ge(asprintf(&path, "%s/%s", top != NULL && *top != '\0' ? top : ".",
	    rel), 0);
	return path;
}

/* The file name of fixture name; the caller frees it. */
static char *
fixture(const char *name)
{
	char rel[256];

	snprintf(rel, sizeof(rel), "tests/conf/%s", name);
	return top_path(rel);
}

/* Assert that c->errors is exactly want (NULL-terminated), each entry of want
 * prefixed with "prefix:" (the file name, or "command line"). */
static void
expect_errors(const struct conf *c, const char *prefix, const char *const *want)
{
	size_t n = 0;
	char all[8192] = "";

	for (size_t i = 0; i < c->nerrors; i++) {
		strncat(all, "\n  ", sizeof(all) - strlen(all) - 1);
		strncat(all, c->errors[i], sizeof(all) - strlen(all) - 1);
	}
	while (want[n] != NULL)
		n++;
	ck_assert_msg(c->nerrors == n, "%zu errors, expected %zu:%s", c->nerrors, n, all);
	for (size_t i = 0; i < n; i++) {
		char *line;
		ck_assert_int_ge(asprintf(&line, "%s:%s", prefix, want[i]), 0);
		ck_assert_msg(strcmp(c->errors[i], line) == 0, "error %zu is\n  %s\nexpected\n  %s",
		    i, c->errors[i], line);
		free(line);
	}
}

/* Load fixture name, finish, and assert the errors are exactly want (each
 * given without the "file:" in front); conf_load() must return load_rc. */
static void
expect_fixture_rc(const char *name, int load_rc, const char *const *want)
{
	char *path = fixture(name);
	struct conf *c = conf_create();

	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(conf_load(c, path), load_rc);
	ck_assert_int_eq(conf_finish(c), want[0] == NULL ? 0 : -1);
	expect_errors(c, path, want);
	conf_destroy(c);
	free(path);
}

/* The same for errors that conf_load() finds itself. */
static void
expect_fixture(const char *name, const char *const *want)
{
	expect_fixture_rc(name, want[0] == NULL ? 0 : -1, want);
}

/* Load fixture name without errors; the caller destroys the result. */
static struct conf *
load_ok(const char *name)
{
	char *path = fixture(name);
	struct conf *c = conf_create();
	static const char *const none[] = { NULL };

	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(conf_load(c, path), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	expect_errors(c, path, none);
	ck_assert_str_eq(c->path, path);
	free(path);
	return c;
}

/* The integer setting backend.name of the chosen backend. */
static long long
be_int(const struct conf *c, const char *name)
{
	const long long *v = conf_backend_value(c, name);

	ck_assert_msg(v != NULL, "no backend.%s", name);
	return *v;
}

/* The string setting backend.name of the chosen backend (NULL for none). */
static const char *
be_str(const struct conf *c, const char *name)
{
	char *const *v = conf_backend_value(c, name);

	ck_assert_msg(v != NULL, "no backend.%s", name);
	return *v;
}

/* The configuration of -b url alone, finished, whose backend is type; the
 * caller destroys it. */
static struct conf *
conf_of_url(const char *url, const char *type)
{
	struct conf *c = conf_create();

	ck_assert_msg(conf_override_backend(c, url) == 0, "%s: %s", url,
	    c->nerrors > 0 ? c->errors[0] : "");
	ck_assert_int_eq(conf_finish(c), 0);
	ck_assert_str_eq(c->backend_type, type);
	return c;
}

/* The server address backend.address of the chosen backend. */
static const struct addr *
be_addr(const struct conf *c)
{
	const struct addr *a = conf_backend_value(c, "address");

	ck_assert_ptr_nonnull(a);
	return a;
}

/* Assert that the redis backend is chosen and its settings, handed over as
 * c->backend_settings, hold their defaults. */
static void
expect_backend_defaults(const struct conf *c)
{
	ck_assert_str_eq(c->backend_type, "redis");
	ck_assert_ptr_nonnull(c->backend_settings);
	ck_assert_ptr_eq(c->backend_settings, be_addr(c));
	ck_assert_str_eq(be_addr(c)->host, "127.0.0.1");
	ck_assert_int_eq(be_addr(c)->port, 6379);
	ck_assert_ptr_null(be_str(c, "password"));
	ck_assert_ptr_null(be_str(c, "password_file"));
	ck_assert_int_eq(be_int(c, "db"), 0);
	ck_assert_str_eq(be_str(c, "key_prefix"), "dlock:");
	ck_assert_int_eq(be_int(c, "connect_timeout_ms"), 2000);
	ck_assert_int_eq(be_int(c, "command_timeout_ms"), 2000);
	ck_assert_int_eq(be_int(c, "handoff_limit"), 16);
}

/* Assert that the lease rules and the session settings hold their defaults. */
static void
expect_session_defaults(const struct conf *c)
{
	ck_assert_int_eq(c->margin_percent, 10);
	ck_assert_int_eq(c->lock_delay_ms, 0);
	ck_assert_int_eq(c->idle_timeout_ms, 0);
	ck_assert_int_eq(c->tcp_keepalive_s, 15);
	ck_assert_int_eq(c->tcp_keepalive_interval_s, 5);
	ck_assert_int_eq(c->tcp_keepalive_probes, 3);
}

/* Assert that the tls.* settings of c hold their defaults: no TLS. */
static void
expect_tls_defaults(const struct conf *c)
{
	ck_assert_uint_eq(c->ntls_listen, 0);
	ck_assert_ptr_null(c->tls_cert_file);
	ck_assert_ptr_null(c->tls_key_file);
	ck_assert_ptr_null(c->tls_ca_file);
	ck_assert_str_eq(c->tls_min_version, "TLSv1.2");
	ck_assert_int_eq(c->tls_handshake_timeout_ms, 10000);
}

/* Assert that every field of c holds its default. */
static void
expect_defaults(const struct conf *c)
{
	ck_assert_uint_eq(c->nlisten, 1);
	ck_assert_str_eq(c->listen[0], "127.0.0.1:7480");
	ck_assert_int_eq(c->unix_socket_mode, 0660);
	ck_assert_int_eq(c->unix_socket_gid, CONF_UNSET);
	ck_assert_int_eq(c->protected_mode, 1);
	ck_assert_ptr_null(c->password);
	ck_assert_ptr_null(c->password_file);
	ck_assert_ptr_null(c->admin_password);
	ck_assert_int_eq(c->admin_gid, CONF_UNSET);
	ck_assert_str_eq(c->backend_type, "memory");
	ck_assert_ptr_null(c->backend_settings);	/* memory has no settings */
	ck_assert_ptr_null(conf_backend_value(c, "address"));
	ck_assert_int_eq(c->default_ttl_ms, 30000);
	ck_assert_int_eq(c->max_ttl_ms, 86400000);
	expect_session_defaults(c);
	ck_assert_int_eq(c->max_clients, 10000);
	ck_assert_int_eq(c->max_key_bytes, 1024);
	ck_assert_int_eq(c->max_request_bytes, 65536);
	ck_assert_int_eq(c->max_waiters_per_key, 10000);
	ck_assert_int_eq(c->max_locks_per_session, 10000);
	ck_assert_int_eq(c->max_keys, 1000000);
	ck_assert_int_eq(c->max_output_bytes, 33554432);
	ck_assert_int_eq(c->request_timeout_ms, 30000);
	ck_assert_int_eq(c->login_timeout_ms, 10000);
	ck_assert_int_eq(c->output_timeout_ms, 30000);
	expect_tls_defaults(c);
	ck_assert_str_eq(c->log_level, "info");
	ck_assert_ptr_null(c->log_file);
}

/* A scratch directory for files a test writes; removed by scratch_rm(). */
struct scratch {
	char dir[256];		/* the directory */
	char files[8][300];	/* files made in it */
	int nfiles;		/* how many */
};

static void
scratch_init(struct scratch *s)
{
	const char *tmp = getenv("TMPDIR");

	memset(s, 0, sizeof(*s));
	snprintf(s->dir, sizeof(s->dir), "%s/check_conf.XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(s->dir));
}

/* Write len bytes of data to file name in the scratch directory; returns the
 * full name, owned by s. */
static const char *
scratch_write(struct scratch *s, const char *name, const char *data, size_t len)
{
	char dir[sizeof(s->dir)];
	char *path;
	FILE *fp;

	ck_assert_int_lt(s->nfiles, 8);
	memcpy(dir, s->dir, sizeof(dir));
	path = s->files[s->nfiles++];
	snprintf(path, sizeof(s->files[0]), "%s/%s", dir, name);
	ck_assert_ptr_nonnull(fp = fopen(path, "w"));
	ck_assert_uint_eq(fwrite(data, 1, len, fp), len);
	ck_assert_int_eq(fclose(fp), 0);
	return path;
}

static const char *
scratch_text(struct scratch *s, const char *name, const char *text)
{
	return scratch_write(s, name, text, strlen(text));
}

static void
scratch_rm(struct scratch *s)
{
	for (int i = 0; i < s->nfiles; i++)
		unlink(s->files[i]);
	rmdir(s->dir);
}

/* Load the YAML text as a file; the caller destroys the result. rc_load and
 * rc_finish are the results expected. */
static struct conf *
load_text(struct scratch *s, const char *text, int rc_load, int rc_finish)
{
	const char *path = scratch_text(s, "t.yaml", text);
	struct conf *c = conf_create();

	ck_assert_int_eq(conf_load(c, path), rc_load);
	ck_assert_int_eq(conf_finish(c), rc_finish);
	unlink(path);
	s->nfiles--;
	return c;
}

/* --- good files --- */

START_TEST(test_empty_file_gives_defaults)
{
	struct conf *c = load_ok("empty.yaml");
	expect_defaults(c);
	conf_destroy(c);

	c = load_ok("comments.yaml");
	expect_defaults(c);
	conf_destroy(c);

	c = load_ok("sections-empty.yaml");
	expect_defaults(c);
	conf_destroy(c);
}
END_TEST

START_TEST(test_no_file_gives_defaults)
{
	struct conf *c = conf_create();

	ck_assert_ptr_null(c->path);
	ck_assert_int_eq(c->max_clients, CONF_UNSET);
	ck_assert_int_eq(c->unix_socket_mode, CONF_UNSET);
	ck_assert_int_eq(c->default_ttl_ms, CONF_UNSET);
	ck_assert_ptr_null(c->listen);
	ck_assert_ptr_null(c->log_level);
	ck_assert_ptr_null(c->backend_type);
	ck_assert_ptr_null(c->backend_settings);
	ck_assert_int_eq(conf_finish(c), 0);
	ck_assert_uint_eq(c->nerrors, 0);
	expect_defaults(c);
	conf_destroy(c);
	conf_destroy(NULL);
}
END_TEST

START_TEST(test_all_keys)
{
	struct conf *c = load_ok("all.yaml");

	ck_assert_uint_eq(c->nlisten, 3);
	ck_assert_str_eq(c->listen[0], "127.0.0.1:17480");
	ck_assert_str_eq(c->listen[1], "[::1]:17480");
	ck_assert_str_eq(c->listen[2], "unix:/tmp/dlockd-test.sock");
	ck_assert_int_eq(c->unix_socket_mode, 0600);
	ck_assert_str_eq(c->password, "correct horse");
	ck_assert_ptr_null(c->password_file);
	ck_assert_str_eq(c->backend_type, "memory");
	ck_assert_ptr_null(c->backend_settings);
	ck_assert_int_eq(c->default_ttl_ms, 5000);
	ck_assert_int_eq(c->max_ttl_ms, 60000);
	ck_assert_int_eq(c->margin_percent, 20);
	ck_assert_int_eq(c->lock_delay_ms, 250);
	ck_assert_int_eq(c->idle_timeout_ms, 45000);
	ck_assert_int_eq(c->tcp_keepalive_s, 60);
	ck_assert_int_eq(c->tcp_keepalive_interval_s, 10);
	ck_assert_int_eq(c->tcp_keepalive_probes, 4);
	ck_assert_int_eq(c->max_clients, 100);
	ck_assert_int_eq(c->max_key_bytes, 200);
	ck_assert_int_eq(c->max_request_bytes, 4096);
	ck_assert_int_eq(c->max_waiters_per_key, 7);
	ck_assert_int_eq(c->max_locks_per_session, 9);
	ck_assert_int_eq(c->max_keys, 11);
	ck_assert_int_eq(c->max_output_bytes, 100000);
	ck_assert_int_eq(c->request_timeout_ms, 1500);
	ck_assert_int_eq(c->login_timeout_ms, 700);
	ck_assert_int_eq(c->output_timeout_ms, 2500);
	ck_assert_int_eq(c->unix_socket_gid, 0);
	ck_assert_int_eq(c->protected_mode, 0);
	ck_assert_uint_eq(c->ntls_listen, 2);
	ck_assert_str_eq(c->tls_listen[0], "127.0.0.1:17481");
	ck_assert_str_eq(c->tls_listen[1], "[::1]:17481");
	/* relative names from the config file's directory */
	ck_assert_ptr_nonnull(strstr(c->tls_cert_file, "tests/conf/certs/server.crt"));
	ck_assert_str_eq(c->tls_key_file, "/etc/dlockd/server.key");
	ck_assert_ptr_nonnull(strstr(c->tls_ca_file, "tests/conf/ca.crt"));
	ck_assert_str_eq(c->tls_min_version, "TLSv1.3");
	ck_assert_int_eq(c->tls_handshake_timeout_ms, 2500);
	ck_assert_str_eq(c->log_level, "debug");
	ck_assert_str_eq(c->log_file, "/var/log/dlockd.log");
	conf_destroy(c);
}
END_TEST

START_TEST(test_flow_style_and_password_file)
{
	struct conf *c = load_ok("flow.yaml");
	char *pwfile = fixture("pw.txt");

	ck_assert_uint_eq(c->nlisten, 1);
	ck_assert_str_eq(c->listen[0], "0.0.0.0:0");
	ck_assert_int_eq(c->unix_socket_mode, 0640);
	/* relative to the directory of the config file, line end dropped */
	ck_assert_str_eq(c->password_file, pwfile);
	ck_assert_str_eq(c->password, "s3cret pass");
	ck_assert_int_eq(c->default_ttl_ms, 10);
	ck_assert_int_eq(c->max_ttl_ms, 10);
	ck_assert_int_eq(c->max_key_bytes, 32);
	ck_assert_int_eq(c->max_request_bytes, 64);
	ck_assert_int_eq(c->max_clients, 10000);
	ck_assert_str_eq(c->log_level, "warn");
	ck_assert_ptr_null(c->log_file);
	free(pwfile);
	conf_destroy(c);
}
END_TEST

START_TEST(test_shipped_config)
{
	char *path = top_path("conf/dlockd.yaml");
	struct conf *c = conf_create();

	ck_assert_int_eq(conf_load(c, path), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	ck_assert_uint_eq(c->nerrors, 0);
	ck_assert_uint_eq(c->nlisten, 2);
	ck_assert_str_eq(c->listen[0], "127.0.0.1:7480");
	ck_assert_str_eq(c->listen[1], "unix:/run/dlockd/dlockd.sock");
	/* everything else as the defaults, as its comments say */
	ck_assert_int_eq(c->unix_socket_mode, 0660);
	ck_assert_str_eq(c->metrics.text, "");
	ck_assert_ptr_null(c->password);
	ck_assert_ptr_null(c->password_file);
	ck_assert_str_eq(c->backend_type, "memory");
	ck_assert_ptr_null(c->backend_settings);	/* memory has no settings */
	ck_assert_ptr_null(conf_backend_value(c, "address"));
	ck_assert_int_eq(c->default_ttl_ms, 30000);
	ck_assert_int_eq(c->max_ttl_ms, 86400000);
	expect_session_defaults(c);
	ck_assert_int_eq(c->max_clients, 10000);
	ck_assert_int_eq(c->max_key_bytes, 1024);
	ck_assert_int_eq(c->max_request_bytes, 65536);
	ck_assert_int_eq(c->max_waiters_per_key, 10000);
	ck_assert_int_eq(c->max_locks_per_session, 10000);
	expect_tls_defaults(c);
	ck_assert_str_eq(c->log_level, "info");
	ck_assert_ptr_null(c->log_file);
	conf_destroy(c);

	/* and with -b redis:// it is a valid redis configuration */
	c = conf_create();
	ck_assert_int_eq(conf_load(c, path), 0);
	ck_assert_int_eq(conf_override_backend(c, "redis://127.0.0.1:6379"), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	expect_backend_defaults(c);
	conf_destroy(c);
	free(path);
}
END_TEST

START_TEST(test_modes)
{
	static const struct { const char *yaml; long long mode; } ok[] = {
		{ "unix_socket_mode: \"0660\"\n", 0660 },
		{ "unix_socket_mode: 0660\n", 0660 },	/* the text, read as octal */
		{ "unix_socket_mode: '0600'\n", 0600 },
		{ "unix_socket_mode: 660\n", 0660 },
		{ "unix_socket_mode: 0777\n", 0777 },
		{ "unix_socket_mode: 0\n", 0 },
		{ "unix_socket_mode: \"00000777\"\n", 0777 },
	};
	struct scratch s;

	scratch_init(&s);
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct conf *c = load_text(&s, ok[i].yaml, 0, 0);
		ck_assert_msg(c->unix_socket_mode == ok[i].mode, "%s gave %llo", ok[i].yaml,
		    c->unix_socket_mode);
		conf_destroy(c);
	}
	scratch_rm(&s);
}
END_TEST

/* The admin settings: a password (or its file) and a group by name or
 * number, resolved when loaded; an unknown group is an error where it is
 * written. */
START_TEST(test_admin_settings)
{
	struct scratch s;
	struct conf *c;
	char yaml[256];

	scratch_init(&s);
	c = load_text(&s, "auth: { password: p }\n", 0, 0);
	ck_assert_ptr_null(c->admin_password);
	ck_assert_int_eq(c->admin_gid, CONF_UNSET);
	conf_destroy(c);
	c = load_text(&s, "auth:\n  admin_password: \"a b\"\n  admin_group: root\n", 0, 0);
	ck_assert_str_eq(c->admin_password, "a b");
	ck_assert_int_eq(c->admin_gid, 0);
	conf_destroy(c);
	c = load_text(&s, "auth: { admin_group: 4242 }\n", 0, 0);
	ck_assert_int_eq(c->admin_gid, 4242);
	conf_destroy(c);
	c = load_text(&s, "auth: { admin_group: \"\" }\n", 0, 0);
	ck_assert_int_eq(c->admin_gid, CONF_UNSET);
	conf_destroy(c);
	const char *pw = scratch_text(&s, "admin-pw", "secret\n");
	snprintf(yaml, sizeof(yaml), "auth: { admin_password_file: \"%s\" }\n", pw);
	c = load_text(&s, yaml, 0, 0);
	ck_assert_str_eq(c->admin_password, "secret");
	ck_assert_str_eq(c->admin_password_file, pw);
	conf_destroy(c);
	c = load_text(&s, "auth:\n  admin_group: no-such-group-at-all\n", -1, -1);
	ck_assert_uint_eq(c->nerrors, 1);
	ck_assert_ptr_nonnull(strstr(c->errors[0], "t.yaml:2:16: 'auth.admin_group': unknown "
	    "group 'no-such-group-at-all'"));
	conf_destroy(c);
	c = load_text(&s, "auth:\n  admin_group: 99999999999\n  admin_password: x\n"
	    "  admin_password_file: y\n", -1, -1);
	ck_assert_uint_ge(c->nerrors, 2);
	ck_assert_ptr_nonnull(strstr(c->errors[0], "t.yaml:2:16: 'auth.admin_group' must be a "
	    "group number from 0 to 4294967294"));
	conf_destroy(c);
	scratch_rm(&s);
}
END_TEST

/* protected_mode: a TCP listener beyond loopback needs a password, or the
 * mode turned off; loopback, Unix sockets and localhost never do. The error
 * is at the listen key and names the address. */
START_TEST(test_protected_mode)
{
	static const struct { const char *yaml; int ok; } cases[] = {
		{ "listen: [\"127.0.0.1:1\", \"127.9.9.9:2\", \"[::1]:3\", \"localhost:4\", "
		  "\"unix:/run/x.sock\", \"[::ffff:127.0.0.1]:5\"]\n", 1 },
		{ "listen: [\"0.0.0.0:1\"]\n", 0 },
		{ "listen: [\"[::]:1\"]\n", 0 },
		{ "listen: [\"10.1.2.3:1\"]\n", 0 },
		{ "listen: [\"db.example:1\"]\n", 0 },
		{ "listen: [\"0.0.0.0:1\"]\nauth: { password: p }\n", 1 },
		{ "listen: [\"0.0.0.0:1\"]\nprotected_mode: false\n", 1 },
		{ "listen: [\"0.0.0.0:1\"]\nprotected_mode: no\n", 1 },
		{ "listen: [\"0.0.0.0:1\"]\nprotected_mode: true\n", 0 },
		{ "listen: [\"0.0.0.0:1\"]\nprotected_mode: On\n", 0 },
	};
	struct scratch s;
	struct conf *c;

	scratch_init(&s);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		c = load_text(&s, cases[i].yaml, 0, cases[i].ok ? 0 : -1);
		if (!cases[i].ok) {
			ck_assert_uint_eq(c->nerrors, 1);
			ck_assert_msg(strstr(c->errors[0], "t.yaml:1:9: 'listen' has ") != NULL &&
			    strstr(c->errors[0], "which is not a loopback address, and no "
			    "'auth.password' is set") != NULL, "%s", c->errors[0]);
		}
		conf_destroy(c);
	}
	c = load_text(&s, "protected_mode: maybe\n", -1, -1);
	ck_assert_uint_eq(c->nerrors, 1);
	ck_assert_ptr_nonnull(strstr(c->errors[0], "t.yaml:1:17: 'protected_mode' must be true "
	    "or false, not"));
	conf_destroy(c);
	/* TLS listeners too, unless clients must present a certificate */
	c = load_text(&s, "tls: { listen: [\"0.0.0.0:7443\"], cert_file: c, key_file: k }\n",
	    0, -1);
	ck_assert_ptr_nonnull(strstr(c->errors[0], "'tls.listen' has 0.0.0.0:7443, which is not "
	    "a loopback address"));
	conf_destroy(c);
	c = load_text(&s, "tls: { listen: [\"0.0.0.0:7443\"], cert_file: c, key_file: k, "
	    "ca_file: a }\n", 0, 0);
	conf_destroy(c);
	/* -l is checked as the file is */
	c = conf_create();
	ck_assert_int_eq(conf_override_listen(c, "0.0.0.0:7480"), 0);
	ck_assert_int_eq(conf_finish(c), -1);
	ck_assert_ptr_nonnull(strstr(c->errors[0], "command line: 'listen' has 0.0.0.0:7480"));
	conf_destroy(c);
	scratch_rm(&s);
}
END_TEST

/* unix_socket_group takes a name or a number, as auth.admin_group does. */
START_TEST(test_unix_socket_group)
{
	struct scratch s;
	struct conf *c;

	scratch_init(&s);
	c = load_text(&s, "unix_socket_group: root\n", 0, 0);
	ck_assert_int_eq(c->unix_socket_gid, 0);
	conf_destroy(c);
	c = load_text(&s, "unix_socket_group: 4242\n", 0, 0);
	ck_assert_int_eq(c->unix_socket_gid, 4242);
	conf_destroy(c);
	c = load_text(&s, "unix_socket_group: no-such-group-at-all\n", -1, -1);
	ck_assert_ptr_nonnull(strstr(c->errors[0], "t.yaml:1:20: 'unix_socket_group': unknown "
	    "group"));
	conf_destroy(c);
	scratch_rm(&s);
}
END_TEST

START_TEST(test_numbers)
{
	struct scratch s;
	struct conf *c;

	scratch_init(&s);
	c = load_text(&s, "limits:\n  max_clients: 1000000\n  max_waiters_per_key: +5\n"
	    "  max_locks_per_session: 2147483647\n"
	    "locks: { default_ttl_ms: 31536000000, max_ttl_ms: 31536000000 }\n", 0, 0);
	ck_assert_int_eq(c->max_clients, 1000000);
	ck_assert_int_eq(c->max_waiters_per_key, 5);
	ck_assert_int_eq(c->max_locks_per_session, 2147483647);
	ck_assert_int_eq(c->default_ttl_ms, 31536000000LL);
	conf_destroy(c);

	c = load_text(&s, "limits:\n  max_request_bytes: 536870912\n"
	    "  max_key_bytes: 536870880\n", 0, 0);
	ck_assert_int_eq(c->max_request_bytes, 536870912);
	ck_assert_int_eq(c->max_key_bytes, 536870880);
	conf_destroy(c);

	/* an explicit !!int tag makes a quoted value a number */
	c = load_text(&s, "limits: { max_clients: !!int \"77\" }\n", 0, 0);
	ck_assert_int_eq(c->max_clients, 77);
	conf_destroy(c);
	scratch_rm(&s);
}
END_TEST

START_TEST(test_password_file_variants)
{
	struct scratch s;
	struct conf *c;
	char big[5000];
	const char *path;
	char *yaml;

	scratch_init(&s);
	/* CRLF and several line ends are dropped, inner blanks kept */
	path = scratch_text(&s, "crlf.txt", " two words \r\n\r\n");
	ck_assert_int_ge(asprintf(&yaml, "auth: { password_file: \"%s\" }\n", path), 0);
	c = load_text(&s, yaml, 0, 0);
	ck_assert_str_eq(c->password, " two words ");
	ck_assert_str_eq(c->password_file, path);
	conf_destroy(c);
	free(yaml);

	/* no line end at all */
	path = scratch_text(&s, "bare.txt", "x");
	ck_assert_int_ge(asprintf(&yaml, "auth:\n  password_file: %s\n", path), 0);
	c = load_text(&s, yaml, 0, 0);
	ck_assert_str_eq(c->password, "x");
	conf_destroy(c);
	free(yaml);

	/* larger than 4096 bytes, even with a line end at the cut */
	memset(big, 'a', sizeof(big));
	big[4096] = '\n';
	path = scratch_write(&s, "big.txt", big, sizeof(big));
	ck_assert_int_ge(asprintf(&yaml, "auth:\n  password_file: %s\n", path), 0);
	c = load_text(&s, yaml, -1, -1);
	ck_assert_uint_eq(c->nerrors, 1);
	ck_assert_ptr_nonnull(strstr(c->errors[0], ":2:18: password file '"));
	ck_assert_ptr_nonnull(strstr(c->errors[0], "big.txt' is larger than 4096 bytes"));
	ck_assert_ptr_null(c->password);
	conf_destroy(c);
	free(yaml);

	/* 4096 bytes exactly is fine */
	path = scratch_write(&s, "max.txt", big, 4096);
	ck_assert_int_ge(asprintf(&yaml, "auth:\n  password_file: %s\n", path), 0);
	c = load_text(&s, yaml, 0, 0);
	ck_assert_uint_eq(strlen(c->password), 4096);
	conf_destroy(c);
	free(yaml);

	/* a NUL byte inside */
	path = scratch_write(&s, "nul.txt", "ab\0cd\n", 6);
	ck_assert_int_ge(asprintf(&yaml, "auth:\n  password_file: %s\n", path), 0);
	c = load_text(&s, yaml, -1, -1);
	ck_assert_uint_eq(c->nerrors, 1);
	ck_assert_ptr_nonnull(strstr(c->errors[0], "nul.txt' contains a NUL byte"));
	conf_destroy(c);
	free(yaml);

	/* a directory cannot be read */
	ck_assert_int_ge(asprintf(&yaml, "auth:\n  password_file: %s\n", s.dir), 0);
	c = load_text(&s, yaml, -1, -1);
	ck_assert_uint_eq(c->nerrors, 1);
	ck_assert_ptr_nonnull(strstr(c->errors[0], ":2:18: cannot read password file '"));
	ck_assert_ptr_nonnull(strstr(c->errors[0], "': Is a directory"));
	conf_destroy(c);
	free(yaml);

	/* "" means none */
	c = load_text(&s, "auth: { password: \"\", password_file: \"\" }\n", 0, 0);
	ck_assert_ptr_null(c->password);
	ck_assert_ptr_null(c->password_file);
	conf_destroy(c);
	scratch_rm(&s);
}
END_TEST

/* --- errors --- */

START_TEST(test_errors_all_reported)
{
	static const char *const want[] = {
		"4:5: bad listen address 'localhost': missing port "
		    "(expected host:port, [v6addr]:port or unix:/path)",
		"5:19: 'unix_socket_mode' must be an octal mode such as 0660, not '0999'",
		"6:1: unknown key 'bogus'",
		"8:9: 'backend.type' must be memory, redis, redlock, redis-cluster or etcd, not 'zookeeper'",
		"10:19: 'locks.default_ttl_ms' must be a decimal integer, not '30s'",
		"11:15: 'locks.max_ttl_ms' must be between 10 and 31536000000, not 5",
		"13:16: 'limits.max_clients' must be between 1 and 1000000, not 0",
		"14:18: 'limits.max_key_bytes' must be between 1 and 536870880, not -1",
		"15:22: 'limits.max_request_bytes' must be between 64 and 536870912, "
		    "not 99999999999999999999999",
		"16:24: 'limits.max_waiters_per_key' must be a decimal integer, not a mapping",
		"17:26: 'limits.max_locks_per_session' must be a decimal integer, not a list",
		"18:3: unknown key 'limits.max_client'",
		"20:10: 'log.level' must be debug, info, warn or error, not 'verbose'",
		"21:3: duplicate key 'log.level' (first at line 20)",
		"22:9: 'log.file' must be a string, not a list",
		NULL
	};
	expect_fixture("errors.yaml", want);
}
END_TEST

START_TEST(test_errors_keep_good_values)
{
	/* what was right in a file with errors is still taken */
	char *path = fixture("errors.yaml");
	struct conf *c = conf_create();

	ck_assert_int_eq(conf_load(c, path), -1);
	ck_assert_int_eq(c->max_clients, CONF_UNSET);
	ck_assert_ptr_null(c->backend_type);
	ck_assert_int_eq(conf_finish(c), -1);
	/* the bad ones got their defaults, the list with a bad entry was dropped */
	ck_assert_int_eq(c->max_clients, 10000);
	ck_assert_int_eq(c->max_ttl_ms, 86400000);
	ck_assert_uint_eq(c->nlisten, 1);
	ck_assert_str_eq(c->listen[0], "127.0.0.1:7480");
	ck_assert_uint_eq(c->nerrors, 15);
	conf_destroy(c);
	free(path);
}
END_TEST

START_TEST(test_syntax_error)
{
	static const char *const want[] = {
		"5:2: syntax error: did not find expected key "
		    "(while parsing a block mapping at line 1, column 1)",
		NULL
	};
	expect_fixture("syntax.yaml", want);
}
END_TEST

START_TEST(test_syntax_error_after_others)
{
	static const char *const want[] = {
		"1:1: unknown key 'bogus'",
		"6:1: syntax error: found unexpected end of stream "
		    "(while scanning a quoted scalar at line 3, column 16)",
		NULL
	};
	expect_fixture("syntax-late.yaml", want);
}
END_TEST

START_TEST(test_bad_utf8)
{
	static const char *const want[] = {
		"2:14: invalid trailing UTF-8 octet (0x22 at byte offset 18)",
		NULL
	};
	expect_fixture("bad-utf8.yaml", want);
}
END_TEST

START_TEST(test_anchors_and_aliases)
{
	static const char *const want[] = {
		"1:9: anchors are not supported (&lim)",
		"4:19: anchors are not supported (&ttl)",
		"5:15: aliases are not supported (*ttl)",
		"7:5: aliases are not supported (*lim)",
		NULL
	};
	expect_fixture("alias.yaml", want);
}
END_TEST

START_TEST(test_merge_key)
{
	static const char *const want[] = {
		"1:1: unknown key 'base'",
		"1:7: anchors are not supported (&b)",
		"3:3: unknown key 'limits.<<'",
		"3:7: aliases are not supported (*b)",
		NULL
	};
	expect_fixture("merge.yaml", want);
}
END_TEST

START_TEST(test_several_documents)
{
	static const char *const want[] = {
		"3:1: several documents in one file are not supported",
		NULL
	};
	expect_fixture("multidoc.yaml", want);
}
END_TEST

START_TEST(test_top_level_not_mapping)
{
	static const char *const list[] = {
		"1:1: the top level must be a mapping, not a list", NULL
	};
	static const char *const scalar[] = {
		"1:1: the top level must be a mapping, not 'just some text'", NULL
	};
	expect_fixture("top-list.yaml", list);
	expect_fixture("top-scalar.yaml", scalar);
}
END_TEST

START_TEST(test_password_file_missing)
{
	char *pw = fixture("no-such-password.txt");
	char *line;

	ck_assert_int_ge(asprintf(&line, "2:18: cannot read password file '%s': "
	    "No such file or directory", pw), 0);
	const char *const want[] = { line, NULL };
	expect_fixture("password-missing.yaml", want);
	free(line);
	free(pw);
}
END_TEST

START_TEST(test_password_file_empty)
{
	char *pw = fixture("pw-empty.txt");
	char *line;

	ck_assert_int_ge(asprintf(&line, "2:18: password file '%s' is empty", pw), 0);
	const char *const want[] = { line, NULL };
	expect_fixture("password-empty.yaml", want);
	free(line);
	free(pw);
}
END_TEST

START_TEST(test_password_both)
{
	static const char *const want[] = {
		"2:13: 'auth.password' and 'auth.password_file' cannot both be set",
		NULL
	};
	expect_fixture_rc("password-both.yaml", 0, want);
}
END_TEST

START_TEST(test_listen_bad)
{
	static const char *const want[] = {
		"2:5: bad listen address '': the address is empty",
		"3:5: bad listen address '7480': missing port "
		    "(expected host:port, [v6addr]:port or unix:/path)",
		"4:5: bad listen address ':7480': the host is empty",
		"5:5: bad listen address 'localhost:': the port is missing",
		"6:5: bad listen address 'localhost:http': the port is not a number",
		"7:5: bad listen address 'localhost:65536': the port is out of range (0..65535)",
		"8:5: bad listen address 'local host:7480': "
		    "the host has characters a host name cannot have",
		"9:5: bad listen address '::1:7480': "
		    "an IPv6 address must be in brackets, as in [::1]:7480",
		"10:5: bad listen address '[::1': missing ']' after the IPv6 address",
		"11:5: bad listen address '[]:7480': the host is empty",
		"12:5: bad listen address '[::1]7480': "
		    "missing ':port' after ']' (expected [v6addr]:port)",
		"13:5: bad listen address '[::1]:': the port is missing",
		"14:5: bad listen address '[not-v6]:7480': not an IPv6 address between the brackets",
		"15:5: bad listen address 'unix:': the socket path is empty (expected unix:/path)",
		"16:5: bad listen address 'unix:run/dlockd.sock': "
		    "the socket path must be absolute (expected unix:/path)",
		"17:5: bad listen address 'unix:/run/dlockd/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...': "
		    "the socket path is too long",
		"18:5: 'listen' entries must be addresses, not a mapping",
		"19:4: 'listen' entries must be addresses, not an empty value",
		"21:5: duplicate listen address '127.0.0.1:7480'",
		NULL
	};
	expect_fixture("listen-bad.yaml", want);
}
END_TEST

START_TEST(test_listen_shape)
{
	static const char *const empty[] = {
		"1:9: 'listen' must have at least one address", NULL
	};
	static const char *const scalar[] = {
		"1:9: 'listen' must be a list of addresses, not '127.0.0.1:7480'", NULL
	};
	expect_fixture_rc("listen-empty.yaml", 0, empty);
	expect_fixture("listen-scalar.yaml", scalar);
}
END_TEST

START_TEST(test_out_of_range)
{
	static const char *const want[] = {
		"1:19: 'unix_socket_mode' must be between 0 and 0777, not 01000",
		"3:19: 'locks.default_ttl_ms' must be between 10 and 31536000000, not 9",
		"4:15: 'locks.max_ttl_ms' must be between 10 and 31536000000, not 31536000001",
		"5:19: 'locks.margin_percent' must be between 1 and 50, not 0",
		"6:18: 'locks.lock_delay_ms' must be between 0 and 3600000, not 3600001",
		"8:16: 'limits.max_clients' must be between 1 and 1000000, not 1000001",
		"9:18: 'limits.max_key_bytes' must be between 1 and 536870880, not 0",
		"10:22: 'limits.max_request_bytes' must be between 64 and 536870912, not 63",
		"11:24: 'limits.max_waiters_per_key' must be between 1 and 2147483647, not 0",
		"12:26: 'limits.max_locks_per_session' must be between 1 and 2147483647, "
		    "not 2147483648",
		"14:20: 'sessions.idle_timeout_ms' must be between 0 and 31536000000, not -1",
		"15:20: 'sessions.tcp_keepalive_s' must be between 0 and 32767, not 32768",
		"16:29: 'sessions.tcp_keepalive_interval_s' must be between 1 and 32767, not 0",
		"17:25: 'sessions.tcp_keepalive_probes' must be between 1 and 127, not 128",
		NULL
	};
	expect_fixture("ranges.yaml", want);
}
END_TEST

START_TEST(test_not_numbers)
{
	static const char *const want[] = {
		"2:16: 'limits.max_clients' must be a decimal integer, not a quoted string",
		"3:18: 'limits.max_key_bytes' must be a decimal integer, not '0x10'",
		"4:22: 'limits.max_request_bytes' must be a decimal integer, not '1_000'",
		"5:24: 'limits.max_waiters_per_key' must be a decimal integer, not '0100'",
		"6:26: 'limits.max_locks_per_session' must be a decimal integer, not '1e3'",
		"8:18: 'locks.default_ttl_ms' must be a decimal integer, not an empty value",
		"9:15: 'locks.max_ttl_ms' must be a decimal integer, not '1.5'",
		NULL
	};
	expect_fixture("numbers.yaml", want);
}
END_TEST

START_TEST(test_wrong_types)
{
	static const char *const want[] = {
		"1:7: 'auth' must be a mapping, not 'secret'",
		"2:10: 'backend' must be a mapping, not a list",
		"3:19: 'unix_socket_mode' must be an octal mode such as 0660, not a mapping",
		"5:10: 'log.level' must be a string, not a list",
		"6:9: 'log.file' must be a string, not a mapping",
		"8:5: a key must be a scalar, not a list",
		NULL
	};
	expect_fixture("types.yaml", want);
}
END_TEST

START_TEST(test_tags)
{
	static const char *const want[] = {
		"3:18: 'limits.max_key_bytes' must be a decimal integer, not a string",
		"6:9: tag '!custom' is not supported",
		"7:19: tag '!!float' is not supported",
		NULL
	};
	expect_fixture("tags.yaml", want);
}
END_TEST

START_TEST(test_duplicate_and_dotted_keys)
{
	static const char *const want[] = {
		"5:1: duplicate key 'limits' (first at line 1)",
		"7:1: unknown key 'log.level' (a dot does not nest keys: write a mapping)",
		"8:1: unknown key ''",
		NULL
	};
	expect_fixture("dup.yaml", want);
}
END_TEST

START_TEST(test_cross_field)
{
	static const char *const want[] = {
		"2:19: 'locks.default_ttl_ms' (90000) must not be greater than "
		    "'locks.max_ttl_ms' (60000)",
		"6:18: 'limits.max_key_bytes' (1000) must be at most "
		    "'limits.max_request_bytes' - 32 (992)",
		NULL
	};
	expect_fixture_rc("cross.yaml", 0, want);
}
END_TEST

START_TEST(test_cross_field_with_defaults)
{
	/* the default is not in the file: the error points at the other key */
	static const char *const want[] = {
		"2:15: 'locks.default_ttl_ms' (30000) must not be greater than "
		    "'locks.max_ttl_ms' (20000)",
		"4:22: 'limits.max_key_bytes' (1024) must be at most "
		    "'limits.max_request_bytes' - 32 (968)",
		NULL
	};
	expect_fixture_rc("cross-default.yaml", 0, want);
}
END_TEST

START_TEST(test_unopenable)
{
	char *path = fixture("no-such-file.yaml");
	char *dir = top_path("tests/conf");
	struct conf *c = conf_create();
	static const char *const missing[] = {
		" cannot open the file: No such file or directory", NULL
	};
	static const char *const notfile[] = { " not a regular file", NULL };

	ck_assert_int_eq(conf_load(c, path), -1);
	ck_assert_int_eq(conf_finish(c), -1);
	expect_errors(c, path, missing);
	conf_destroy(c);

	c = conf_create();
	ck_assert_int_eq(conf_load(c, dir), -1);
	expect_errors(c, dir, notfile);
	conf_destroy(c);
	free(path);
	free(dir);
}
END_TEST

/* --- command line --- */

START_TEST(test_override_listen_replaces_file)
{
	char *path = fixture("all.yaml");
	struct conf *c = conf_create();

	ck_assert_int_eq(conf_load(c, path), 0);
	ck_assert_uint_eq(c->nlisten, 3);
	ck_assert_int_eq(conf_override_listen(c, "127.0.0.1:9000"), 0);
	ck_assert_int_eq(conf_override_listen(c, "unix:/tmp/x.sock"), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	ck_assert_uint_eq(c->nlisten, 2);
	ck_assert_str_eq(c->listen[0], "127.0.0.1:9000");
	ck_assert_str_eq(c->listen[1], "unix:/tmp/x.sock");
	conf_destroy(c);
	free(path);
}
END_TEST

START_TEST(test_override_before_load)
{
	/* the command line wins even when it comes first; the file is checked */
	char *path = fixture("all.yaml");
	struct conf *c = conf_create();

	ck_assert_int_eq(conf_override_listen(c, "[::1]:0"), 0);
	ck_assert_int_eq(conf_override_backend(c, "memory"), 0);
	ck_assert_int_eq(conf_load(c, path), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	ck_assert_uint_eq(c->nlisten, 1);
	ck_assert_str_eq(c->listen[0], "[::1]:0");
	ck_assert_str_eq(c->backend_type, "memory");
	ck_assert_int_eq(c->max_clients, 100);
	conf_destroy(c);
	free(path);
}
END_TEST

START_TEST(test_override_without_file)
{
	struct conf *c = conf_create();

	ck_assert_int_eq(conf_override_listen(c, "localhost:7481"), 0);
	ck_assert_int_eq(conf_override_backend(c, "memory"), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	ck_assert_uint_eq(c->nlisten, 1);
	ck_assert_str_eq(c->listen[0], "localhost:7481");
	ck_assert_str_eq(c->backend_type, "memory");
	conf_destroy(c);
}
END_TEST

START_TEST(test_override_errors)
{
	struct conf *c = conf_create();
	static const char *const want[] = {
		" bad listen address 'nope': missing port "
		    "(expected host:port, [v6addr]:port or unix:/path)",
		" duplicate listen address '127.0.0.1:7000'",
		" unknown backend URL 'zk://127.0.0.1:2181' (expected memory, "
		    "redis://host:port, redlock://host:port,..., redis-cluster://host:port,... or etcd[s]://host:port[,host:port...])",
		" unknown backend URL '' (expected memory, redis://host:port, redlock://host:port,..., redis-cluster://host:port,... or etcd[s]://host:port[,host:port...])",
		NULL
	};

	ck_assert_int_eq(conf_override_listen(c, "nope"), -1);
	ck_assert_int_eq(conf_override_listen(c, "127.0.0.1:7000"), 0);
	ck_assert_int_eq(conf_override_listen(c, "127.0.0.1:7000"), -1);
	/* port 0 twice is two listeners on two free ports */
	ck_assert_int_eq(conf_override_listen(c, "127.0.0.1:0"), 0);
	ck_assert_int_eq(conf_override_listen(c, "127.0.0.1:0"), 0);
	ck_assert_int_eq(conf_override_backend(c, "zk://127.0.0.1:2181"), -1);
	ck_assert_int_eq(conf_override_backend(c, ""), -1);
	ck_assert_int_eq(conf_finish(c), -1);
	expect_errors(c, "command line", want);
	ck_assert_uint_eq(c->nlisten, 3);
	ck_assert_str_eq(c->backend_type, "memory");
	conf_destroy(c);
}
END_TEST

/* --- the redis backend --- */

/* Load the YAML text as a file and assert that its errors are exactly want
 * (each without the "file:" in front); conf_load() must return rc_load. */
static void
expect_text_errors(struct scratch *s, const char *text, int rc_load, const char *const *want)
{
	struct conf *c = load_text(s, text, rc_load, want[0] == NULL ? 0 : -1);
	char *path;

	ck_assert_int_ge(asprintf(&path, "%s/t.yaml", s->dir), 0);
	expect_errors(c, path, want);
	free(path);
	conf_destroy(c);
}

/* Whether any error of c contains s. */
static bool
errors_contain(const struct conf *c, const char *s)
{
	for (size_t i = 0; i < c->nerrors; i++)
		if (strstr(c->errors[i], s) != NULL)
			return true;
	return false;
}

/* metrics: off unless given; one TCP address, never a Unix socket. */
START_TEST(test_metrics_address)
{
	static const struct { const char *yaml, *error; } bad[] = {
		{ "metrics: \"unix:/run/dlockd/metrics.sock\"\n",
		  "1:10: bad metrics 'unix:/run/dlockd/metrics.sock': a Unix socket is not "
		      "supported here (expected host:port or [v6addr]:port)" },
		{ "metrics: localhost\n",
		  "1:10: bad metrics 'localhost': missing port (expected host:port or [v6addr]:port)" },
		{ "metrics: [\"127.0.0.1:7481\"]\n",
		  "1:10: 'metrics' must be a string, not a list" },
	};
	struct scratch s;
	struct conf *c;

	scratch_init(&s);
	c = load_text(&s, "", 0, 0);
	ck_assert_str_eq(c->metrics.text, "");	/* off */
	conf_destroy(c);
	c = load_text(&s, "metrics: \"[::1]:7481\"\n", 0, 0);
	ck_assert_int_eq(c->metrics.kind, ADDR_TCP);
	ck_assert_str_eq(c->metrics.host, "::1");
	ck_assert_int_eq(c->metrics.port, 7481);
	conf_destroy(c);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *const want[] = { bad[i].error, NULL };
		expect_text_errors(&s, bad[i].yaml, -1, want);
	}
	scratch_rm(&s);
}
END_TEST

START_TEST(test_redis_all_keys)
{
	struct conf *c = load_ok("redis-all.yaml");

	ck_assert_str_eq(c->backend_type, "redis");
	ck_assert_str_eq(be_addr(c)->host, "::1");
	ck_assert_int_eq(be_addr(c)->port, 6380);
	ck_assert_str_eq(be_str(c, "password"), "s3cret");
	ck_assert_int_eq(be_int(c, "db"), 3);
	ck_assert_str_eq(be_str(c, "key_prefix"), "app1:");
	ck_assert_int_eq(be_int(c, "connect_timeout_ms"), 500);
	ck_assert_int_eq(be_int(c, "command_timeout_ms"), 1000);
	ck_assert_int_eq(be_int(c, "handoff_limit"), 4);
	ck_assert_int_eq(c->default_ttl_ms, 3003);
	/* the client password is another thing */
	ck_assert_ptr_null(c->password);
	ck_assert_ptr_null(c->password_file);
	conf_destroy(c);
}
END_TEST

START_TEST(test_redis_defaults)
{
	struct conf *c = load_ok("redis-defaults.yaml");

	ck_assert_str_eq(c->backend_type, "redis");
	expect_backend_defaults(c);
	conf_destroy(c);
}
END_TEST

START_TEST(test_redis_password_file)
{
	struct conf *c = load_ok("redis-pwfile.yaml");

	ck_assert_str_eq(be_addr(c)->host, "redis.example.net");
	ck_assert_int_eq(be_addr(c)->port, 6379);
	/* relative to the directory of the config file, line end dropped */
	ck_assert_str_eq(be_str(c, "password"), "s3cret pass");
	ck_assert_ptr_null(c->password);
	ck_assert_ptr_null(c->password_file);
	conf_destroy(c);
}
END_TEST

START_TEST(test_redis_values)
{
	static const struct {
		const char *yaml;	/* the file */
		const char *host;	/* backend.address: host */
		long long port;		/* and port */
		const char *password;	/* backend.password */
		const char *prefix;	/* backend.key_prefix */
	} ok[] = {
		{ "backend: { type: redis, address: \"db-1.example.org:1\" }\n",
		  "db-1.example.org", 1, NULL, "dlock:" },
		{ "backend: { type: redis, address: 10.0.0.7:65535 }\n", "10.0.0.7", 65535, NULL,
		  "dlock:" },
		{ "backend: { type: redis, address: \"[fe80::1%eth0]:6379\" }\n", "fe80::1%eth0",
		  6379, NULL, "dlock:" },
		{ "backend: { type: redis, password: \"\", password_file: \"\" }\n", "127.0.0.1",
		  6379, NULL, "dlock:" },
		{ "backend:\n  type: redis\n  password:\n  password_file:\n", "127.0.0.1", 6379,
		  NULL, "dlock:" },
		{ "backend: { type: redis, password: \"a b:@/c\" }\n", "127.0.0.1", 6379,
		  "a b:@/c", "dlock:" },
		{ "backend: { type: redis, key_prefix: \"x\" }\n", "127.0.0.1", 6379, NULL, "x" },
		{ "backend: { type: redis, key_prefix: \"0123456789012345678901234567890123456789"
		  "012345678901234567890123\" }\n", "127.0.0.1", 6379, NULL,
		  "0123456789012345678901234567890123456789012345678901234567890123" },
	};
	struct scratch s;
	struct conf *c;

	scratch_init(&s);
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		c = load_text(&s, ok[i].yaml, 0, 0);
		ck_assert_str_eq(c->backend_type, "redis");
		ck_assert_str_eq(be_addr(c)->host, ok[i].host);
		ck_assert_int_eq(be_addr(c)->port, ok[i].port);
		if (ok[i].password == NULL)
			ck_assert_ptr_null(be_str(c, "password"));
		else
			ck_assert_str_eq(be_str(c, "password"), ok[i].password);
		ck_assert_str_eq(be_str(c, "key_prefix"), ok[i].prefix);
		conf_destroy(c);
	}

	/* the ends of every range */
	c = load_text(&s, "backend:\n  type: redis\n  db: 1000000\n  connect_timeout_ms: 600000\n"
	    "  command_timeout_ms: 10\n  handoff_limit: 1000000\nlocks:\n  default_ttl_ms: 33\n",
	    0, 0);
	ck_assert_int_eq(be_int(c, "db"), 1000000);
	ck_assert_int_eq(be_int(c, "connect_timeout_ms"), 600000);
	ck_assert_int_eq(be_int(c, "command_timeout_ms"), 10);
	ck_assert_int_eq(be_int(c, "handoff_limit"), 1000000);
	conf_destroy(c);
	c = load_text(&s, "backend:\n  type: redis\n  db: 0\n  connect_timeout_ms: 10\n"
	    "  command_timeout_ms: 600000\n  handoff_limit: 1\n"
	    "locks: { default_ttl_ms: 1800000 }\n", 0, 0);
	ck_assert_int_eq(be_int(c, "db"), 0);
	ck_assert_int_eq(be_int(c, "connect_timeout_ms"), 10);
	ck_assert_int_eq(be_int(c, "command_timeout_ms"), 600000);
	ck_assert_int_eq(be_int(c, "handoff_limit"), 1);
	conf_destroy(c);
	scratch_rm(&s);
}
END_TEST

START_TEST(test_redis_keys_with_memory)
{
	/* checked against the redis backend's table, then ignored: not handed
	 * to the memory backend, not held to the redis backend's rules */
	static const char *const bad[] = {
		"3:7: 'backend.db' must be between 0 and 1000000, not -1", NULL
	};
	struct conf *c = load_ok("redis-memory.yaml");
	char *path = fixture("redis-both.yaml");
	struct scratch s;

	ck_assert_str_eq(c->backend_type, "memory");
	ck_assert_ptr_null(c->backend_settings);
	ck_assert_ptr_null(conf_backend_value(c, "command_timeout_ms"));
	ck_assert_int_eq(c->default_ttl_ms, 10);
	conf_destroy(c);

	/* nor to the rule between its password and password file */
	c = conf_create();
	ck_assert_int_eq(conf_load(c, path), 0);
	ck_assert_int_eq(conf_override_backend(c, "memory"), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	conf_destroy(c);
	free(path);

	scratch_init(&s);
	expect_text_errors(&s, "backend:\n  type: memory\n  db: -1\n", -1, bad);
	scratch_rm(&s);
}
END_TEST

START_TEST(test_redis_bad_values)
{
	static const char *const want[] = {
		"4:12: bad backend.address 'localhost': missing port "
		    "(expected host:port or [v6addr]:port)",
		"5:13: 'backend.password' must be a string, not a list",
		"6:7: 'backend.db' must be between 0 and 1000000, not 1000001",
		"7:15: 'backend.key_prefix' must not be empty",
		"8:23: 'backend.connect_timeout_ms' must be between 10 and 600000, not 9",
		"9:23: 'backend.command_timeout_ms' must be between 10 and 600000, not 600001",
		"10:18: 'backend.handoff_limit' must be between 1 and 1000000, not 0",
		NULL
	};
	expect_fixture("redis-bad.yaml", want);
}
END_TEST

START_TEST(test_redis_bad_addresses)
{
	static const struct { const char *yaml, *error; } bad[] = {
		{ "backend:\n  address: localhost\n",
		  "2:12: bad backend.address 'localhost': missing port "
		      "(expected host:port or [v6addr]:port)" },
		{ "backend:\n  address: \"localhost:0\"\n",
		  "2:12: bad backend.address 'localhost:0': the port must be between 1 and 65535" },
		{ "backend:\n  address: \"localhost:65536\"\n",
		  "2:12: bad backend.address 'localhost:65536': the port is out of range "
		      "(0..65535)" },
		{ "backend:\n  address: \"localhost:redis\"\n",
		  "2:12: bad backend.address 'localhost:redis': the port is not a number" },
		{ "backend:\n  address: \"localhost:\"\n",
		  "2:12: bad backend.address 'localhost:': the port is missing" },
		{ "backend:\n  address: \"unix:/run/redis/redis.sock\"\n",
		  "2:12: bad backend.address 'unix:/run/redis/redis.sock': a Unix socket is not "
		      "supported here (expected host:port or [v6addr]:port)" },
		{ "backend:\n  address: \"::1:6379\"\n",
		  "2:12: bad backend.address '::1:6379': an IPv6 address must be in brackets, "
		      "as in [::1]:7480" },
		{ "backend:\n  address: \"[::1]\"\n",
		  "2:12: bad backend.address '[::1]': missing ':port' after ']' "
		      "(expected [v6addr]:port)" },
		{ "backend:\n  address: \"\"\n",
		  "2:12: bad backend.address '': the address is empty" },
		{ "backend:\n  address:\n",
		  "2:11: bad backend.address '': the address is empty" },
		{ "backend:\n  address: \"a b:6379\"\n",
		  "2:12: bad backend.address 'a b:6379': the host has characters a host name "
		      "cannot have" },
		{ "backend:\n  address: [\"127.0.0.1:6379\"]\n",
		  "2:12: 'backend.address' must be a string, not a list" },
		/* checked with the memory backend too */
		{ "backend:\n  type: memory\n  address: \"127.0.0.1\"\n",
		  "3:12: bad backend.address '127.0.0.1': missing port "
		      "(expected host:port or [v6addr]:port)" },
	};
	struct scratch s;

	scratch_init(&s);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *const want[] = { bad[i].error, NULL };
		expect_text_errors(&s, bad[i].yaml, -1, want);
	}
	scratch_rm(&s);
}
END_TEST

START_TEST(test_redis_bad_prefixes)
{
	static const char *const null[] = {
		"2:14: 'backend.key_prefix' must not be empty", NULL
	};
	static const char *const empty[] = {
		"2:15: 'backend.key_prefix' must not be empty", NULL
	};
	static const char *const toolong[] = {
		"2:15: 'backend.key_prefix' must be at most 64 bytes, not 65", NULL
	};
	struct scratch s;

	scratch_init(&s);
	expect_text_errors(&s, "backend:\n  key_prefix:\n", -1, null);
	expect_text_errors(&s, "backend:\n  key_prefix: ''\n", -1, empty);
	expect_text_errors(&s, "backend:\n  key_prefix: \"0123456789012345678901234567890123456789"
	    "0123456789012345678901234\"\n", -1, toolong);
	scratch_rm(&s);
}
END_TEST

START_TEST(test_redis_bad_password_file)
{
	struct scratch s;
	struct conf *c;
	char *yaml;

	scratch_init(&s);
	ck_assert_int_ge(asprintf(&yaml, "backend:\n  type: redis\n  password_file: %s/none.txt\n",
	    s.dir), 0);
	c = load_text(&s, yaml, -1, -1);
	ck_assert_uint_eq(c->nerrors, 1);
	ck_assert_ptr_nonnull(strstr(c->errors[0], ":3:18: cannot read password file '"));
	ck_assert_ptr_nonnull(strstr(c->errors[0], "none.txt': No such file or directory"));
	ck_assert_ptr_null(be_str(c, "password"));
	conf_destroy(c);
	free(yaml);
	scratch_rm(&s);
}
END_TEST

START_TEST(test_redis_password_both)
{
	static const char *const want[] = {
		"3:13: 'backend.password' and 'backend.password_file' cannot both be set",
		NULL
	};
	char *rel = fixture("pw.txt");
	char *pw = realpath(rel, NULL);
	struct scratch s;
	struct conf *c;
	char *yaml, *line;

	/* the error is at the first one named, the password */
	expect_fixture_rc("redis-both.yaml", 0, want);

	ck_assert_ptr_nonnull(pw);

	scratch_init(&s);
	ck_assert_int_ge(asprintf(&yaml, "backend: { type: redis, password_file: \"%s\", "
	    "password: hunter2 }\n", pw), 0);
	ck_assert_int_ge(asprintf(&line, "1:%d: 'backend.password' and 'backend.password_file' "
	    "cannot both be set", (int)(strstr(yaml, "hunter2") - yaml) + 1), 0);
	{
		const char *const flow[] = { line, NULL };
		expect_text_errors(&s, yaml, 0, flow);
	}
	/* neither secret is used */
	c = load_text(&s, yaml, 0, -1);
	ck_assert(!errors_contain(c, "hunter2"));
	ck_assert(!errors_contain(c, "s3cret"));
	conf_destroy(c);
	free(line);
	free(yaml);
	free(pw);
	free(rel);
	scratch_rm(&s);
}
END_TEST

START_TEST(test_shortest_lease_rule)
{
	static const char *const both[] = {
		"5:19: 'locks.default_ttl_ms' (30000) must be at least the redis backend's "
		    "shortest lease (30003 ms: 3 x backend.command_timeout_ms)",
		NULL
	};
	static const char *const ttl[] = {
		"4:19: 'locks.default_ttl_ms' (5999) must be at least the redis backend's "
		    "shortest lease (6000 ms: 3 x backend.command_timeout_ms)",
		NULL
	};
	static const char *const type[] = {
		"2:9: 'locks.default_ttl_ms' (30000) must be at least the redis backend's "
		    "shortest lease (60000 ms: 3 x backend.command_timeout_ms)",
		NULL
	};
	static const char *const cmdline[] = {
		" 'locks.default_ttl_ms' (30000) must be at least the redis backend's "
		    "shortest lease (60000 ms: 3 x backend.command_timeout_ms)",
		NULL
	};
	char *path = fixture("redis-timeout-ttl.yaml");
	const struct backend_ops *redis = backend_find("redis");
	struct event_base *base;
	struct backend *be;
	struct scratch s;
	struct conf *c;

	/* the lease is the backend's (3 x command_timeout_ms for redis), the
	 * rule conf's: at the TTL when the file sets it ... */
	expect_fixture_rc("redis-timeout.yaml", 0, both);
	expect_fixture_rc("redis-timeout-ttl.yaml", 0, ttl);

	/* ... else at the backend's type ... */
	scratch_init(&s);
	expect_text_errors(&s, "backend:\n  type: redis\n  command_timeout_ms: 20000\n", 0, type);

	/* ... else on the command line */
	c = load_text(&s, "backend:\n  command_timeout_ms: 20000\n", 0, 0);
	ck_assert_int_eq(conf_override_backend(c, "redis://h"), 0);
	ck_assert_int_eq(conf_finish(c), -1);
	expect_errors(c, "command line", cmdline);
	conf_destroy(c);
	scratch_rm(&s);

	/* -b memory: no rule */
	c = conf_create();
	ck_assert_int_eq(conf_override_backend(c, "memory"), 0);
	ck_assert_int_eq(conf_load(c, path), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	conf_destroy(c);

	/* redis from the command line: the TTL in the file is blamed */
	c = conf_create();
	ck_assert_int_eq(conf_load(c, path), 0);
	ck_assert_int_eq(conf_override_backend(c, "memory"), 0);
	ck_assert_int_eq(conf_override_backend(c, "redis://localhost"), 0);
	ck_assert_int_eq(conf_finish(c), -1);
	expect_errors(c, path, ttl);
	conf_destroy(c);
	free(path);

	/* the defaults keep the rule; the backend's floor is the same function */
	c = conf_create();
	ck_assert_int_eq(conf_override_backend(c, "redis://127.0.0.1:1"), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	ck_assert_ptr_nonnull(redis->min_lease_ms);
	ck_assert_uint_eq(redis->min_lease_ms(c->backend_settings), 6000);
	ck_assert_int_le(6000, c->default_ttl_ms);
	ck_assert_ptr_nonnull(base = event_base_new());
	log_min_level = LOG_LEVEL_WARN;
	ck_assert_ptr_nonnull(be = backend_create("redis", base, c->backend_settings));
	ck_assert_uint_eq(be->min_ttl_ms, 6000);
	backend_destroy(be);
	event_base_free(base);
	conf_destroy(c);
	ck_assert_ptr_null(backend_find("memory")->min_lease_ms);
}
END_TEST

/* -b url alone is refused with error (after "command line: "), which
 * holds no password, and the backend stays memory. */
static void
expect_url_error(const char *url, const char *error)
{
	char line[300];
	const char *const want[] = { line, NULL };
	struct conf *c = conf_create();

	snprintf(line, sizeof(line), " %s", error);
	ck_assert_int_eq(conf_override_backend(c, url), -1);
	ck_assert_int_eq(conf_finish(c), -1);
	expect_errors(c, "command line", want);
	ck_assert(!errors_contain(c, "hunter2"));
	ck_assert_str_eq(c->backend_type, "memory");
	conf_destroy(c);
}

START_TEST(test_redis_url_good)
{
	static const struct {
		const char *url;	/* the -b option */
		const char *host;	/* backend.address: host */
		long long port;		/* and port */
		const char *password;	/* backend.password */
		long long db;		/* backend.db */
		const char *user;	/* backend.username */
		long long tls;		/* backend.tls.enabled */
	} ok[] = {
		{ "redis://127.0.0.1:6379", "127.0.0.1", 6379, NULL, 0, NULL, 0 },
		{ "redis://localhost", "localhost", 6379, NULL, 0, NULL, 0 },
		{ "redis://db.example.net:6380/5", "db.example.net", 6380, NULL, 5, NULL, 0 },
		{ "redis://:hunter2@db.example.net:6380/5", "db.example.net", 6380, "hunter2", 5, NULL, 0 },
		{ "redis://[::1]:6379/2", "::1", 6379, NULL, 2, NULL, 0 },
		{ "redis://[::1]", "::1", 6379, NULL, 0, NULL, 0 },
		{ "redis://[::1]/7", "::1", 6379, NULL, 7, NULL, 0 },
		{ "redis://default:pw@h:7000", "h", 7000, "pw", 0, "default", 0 },
		{ "redis://alice:pw@h:7000/2", "h", 7000, "pw", 2, "alice", 0 },
		{ "redis://al%40ice:p%3aw@h", "h", 6379, "p:w", 0, "al@ice", 0 },
		{ "rediss://h", "h", 6379, NULL, 0, NULL, 1 },
		{ "REDISS://bob:pw@h:6380", "h", 6380, "pw", 0, "bob", 1 },
		{ "redis://default@h", "h", 6379, NULL, 0, NULL, 0 },
		{ "redis://:@h:1/", "h", 1, NULL, 0, NULL, 0 },
		{ "redis://@h", "h", 6379, NULL, 0, NULL, 0 },
		/* the last '@' ends the password, which may hold ':', '/' and '@' */
		{ "redis://:p@ss:w/rd@h:2/3", "h", 2, "p@ss:w/rd", 3, NULL, 0 },
		{ "redis://:pa%40ss%2f%25@h", "h", 6379, "pa@ss/%", 0, NULL, 0 },
		{ "redis://defaul%74:x@h", "h", 6379, "x", 0, "default", 0 },
		{ "REDIS://H:65535", "H", 65535, NULL, 0, NULL, 0 },
		{ "redis://h/0", "h", 6379, NULL, 0, NULL, 0 },
		{ "redis://h/1000000", "h", 6379, NULL, 1000000, NULL, 0 },
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct conf *c = conf_of_url(ok[i].url, "redis");

		ck_assert_str_eq(be_addr(c)->host, ok[i].host);
		ck_assert_int_eq(be_addr(c)->port, ok[i].port);
		if (ok[i].password == NULL)
			ck_assert_ptr_null(be_str(c, "password"));
		else
			ck_assert_str_eq(be_str(c, "password"), ok[i].password);
		ck_assert_int_eq(be_int(c, "db"), ok[i].db);
		if (ok[i].user == NULL || strcmp(ok[i].url, "redis://default@h") == 0)
			ck_assert_ptr_null(be_str(c, "username"));
		else
			ck_assert_str_eq(be_str(c, "username"), ok[i].user);
		ck_assert_int_eq(be_int(c, "tls.enabled"), ok[i].tls);
		/* what a URL does not give keeps its default */
		ck_assert_str_eq(be_str(c, "key_prefix"), "dlock:");
		ck_assert_int_eq(be_int(c, "command_timeout_ms"), 2000);
		conf_destroy(c);
	}
}
END_TEST

START_TEST(test_redis_url_bad)
{
	static const struct { const char *url, *error; } bad[] = {
		{ "redis://", "bad redis URL 'redis://': the host is missing" },
		{ "redis:///0", "bad redis URL 'redis:///0': the host is missing" },
		{ "redis://:hunter2@", "bad redis URL 'redis://:***@': the host is missing" },
		{ "redis://h:", "bad redis URL 'redis://h:': the port is missing" },
		{ "redis://h:0", "bad redis URL 'redis://h:0': the port must be between 1 and 65535" },
		{ "redis://:hunter2@h:65536", "bad redis URL 'redis://:***@h:65536': "
		      "the port is out of range (0..65535)" },
		{ "redis://h:redis", "bad redis URL 'redis://h:redis': the port is not a number" },
		{ "redis://::1:6379", "bad redis URL 'redis://::1:6379': "
		      "an IPv6 address must be in brackets, as in [::1]:7480" },
		{ "redis://[::1", "bad redis URL 'redis://[::1': missing ']' after the IPv6 address" },
		{ "redis://[::1]x", "bad redis URL 'redis://[::1]x': "
		      "missing ':port' after ']' (expected [v6addr]:port)" },
		{ "redis://a b", "bad redis URL 'redis://a b': "
		      "the host has characters a host name cannot have" },
		{ "redis://:hunter2@unix:/run/redis.sock", "bad redis URL "
		      "'redis://:***@unix:/run/redis.sock': a Unix socket is not supported "
		      "here (expected host:port or [v6addr]:port)" },
		{ "redis://h/x", "bad redis URL 'redis://h/x': "
		      "the database is not a number (expected /0, /1, ...)" },
		{ "redis://h/-1", "bad redis URL 'redis://h/-1': "
		      "the database is not a number (expected /0, /1, ...)" },
		{ "redis://h/01", "bad redis URL 'redis://h/01': "
		      "the database is not a number (expected /0, /1, ...)" },
		{ "redis://h/1/2", "bad redis URL 'redis://h/1/2': "
		      "the database is not a number (expected /0, /1, ...)" },
		{ "redis://h/1000001", "bad redis URL 'redis://h/1000001': "
		      "the database number is out of range (0..1000000)" },
		{ "redis://h/99999999999999999999", "bad redis URL "
		      "'redis://h/99999999999999999999': "
		      "the database number is out of range (0..1000000)" },
		{ "redis://:hunter2@h/0?timeout=1", "bad redis URL "
		      "'redis://:***@h/0?timeout=1': query parameters are not supported" },
		{ "redis://hunter2@h", "bad redis URL 'redis://***@h': a user needs a password "
		      "(redis://user:password@host:port; a password alone goes after a colon: "
		      "redis://:password@host:port)" },
		{ "redis://%zz:hunter2@h", "bad redis URL 'redis://***@h': "
		      "bad %-escape in the user name" },
		{ "redis://:hunter2%4@h", "bad redis URL 'redis://:***@h': "
		      "bad %-escape in the password" },
		{ "redis://:hunter2%g0@h", "bad redis URL 'redis://:***@h': "
		      "bad %-escape in the password" },
		{ "redis://:hunter2%00@h", "bad redis URL 'redis://:***@h': "
		      "the password contains a NUL byte" },
		{ "redis://default:hunter2@h:0", "bad redis URL 'redis://default:***@h:0': "
		      "the port must be between 1 and 65535" },
		{ "rediss://:hunter2@h:0", "bad redis URL 'rediss://:***@h:0': "
		      "the port must be between 1 and 65535" },
		{ "zk://h:2181", "unknown backend URL 'zk://h:2181' "
		      "(expected memory, redis://host:port, redlock://host:port,..., redis-cluster://host:port,... or etcd[s]://host:port[,host:port...])" },
		{ "http://:hunter2@h", "unknown backend URL 'http://:***@h' "
		      "(expected memory, redis://host:port, redlock://host:port,..., redis-cluster://host:port,... or etcd[s]://host:port[,host:port...])" },
		{ "hunter2@h", "unknown backend URL '***@h' (expected memory, redis://host:port, redlock://host:port,..., redis-cluster://host:port,... or etcd[s]://host:port[,host:port...])" },
		{ "Memory", "unknown backend URL 'Memory' (expected memory, redis://host:port, redlock://host:port,..., redis-cluster://host:port,... or etcd[s]://host:port[,host:port...])" },
		{ "redis:6379", "unknown backend URL 'redis:6379' "
		      "(expected memory, redis://host:port, redlock://host:port,..., redis-cluster://host:port,... or etcd[s]://host:port[,host:port...])" },
		{ "redis", "unknown backend URL 'redis' (expected memory, redis://host:port, redlock://host:port,..., redis-cluster://host:port,... or etcd[s]://host:port[,host:port...])" },
	};
	char *redis = fixture("redis-defaults.yaml");

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char line[300];
		const char *const want[] = { line, NULL };
		struct conf *c;

		expect_url_error(bad[i].url, bad[i].error);
		snprintf(line, sizeof(line), " %s", bad[i].error);

		/* nothing was taken from it, not even to apply after a file */
		c = conf_create();
		ck_assert_int_eq(conf_override_backend(c, bad[i].url), -1);
		ck_assert_int_eq(conf_load(c, redis), 0);
		ck_assert_int_eq(conf_finish(c), -1);
		expect_errors(c, "command line", want);
		expect_backend_defaults(c);
		conf_destroy(c);
	}
	free(redis);
}
END_TEST

START_TEST(test_redlock_url)
{
	static const struct {
		const char *url;	/* the -b option */
		const char *nodes[3];	/* backend.nodes, NULL after the last */
		const char *password;	/* backend.password */
		long long db, tls;	/* backend.db, backend.tls.enabled */
	} ok[] = {
		{ "redlock://a:7001,b:7002,c", { "a:7001", "b:7002", "c:6379" }, NULL, 0, 0 },
		{ "redlock://:hunter2@[::1]:7001,h/3", { "[::1]:7001", "h:6379", NULL }, "hunter2",
		  3, 0 },
		{ "REDLOCKS://h", { "h:6379", NULL, NULL }, NULL, 0, 1 },
	};
	static const struct { const char *url, *error; } bad[] = {
		{ "redlock://", "bad redlock URL 'redlock://': the nodes are missing "
		      "(redlock://host:port,host:port,host:port)" },
		{ "redlock://,h", "bad redlock URL 'redlock://,h': the nodes are missing "
		      "(redlock://host:port,host:port,host:port)" },
		{ "redlock://:hunter2@h,h:0", "bad redlock URL 'redlock://:***@h,h:0': "
		      "the port must be between 1 and 65535" },
		{ "redlock://h/x", "bad redlock URL 'redlock://h/x': "
		      "the database is not a number (expected /0, /1, ...)" },
		{ "redlock://h?x=1", "bad redlock URL 'redlock://h?x=1': "
		      "query parameters are not supported" },
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct conf *c = conf_of_url(ok[i].url, "redlock");
		const struct conf_node *nodes = *(struct conf_node *const *)conf_backend_value(c,
		    "nodes");

		for (size_t k = 0; k < 3 && ok[i].nodes[k] != NULL; k++) {
			ck_assert_str_eq(nodes[k].server, ok[i].nodes[k]);
			ck_assert_ptr_null(nodes[k].password);
		}
		if (ok[i].password == NULL)
			ck_assert_ptr_null(be_str(c, "password"));
		else
			ck_assert_str_eq(be_str(c, "password"), ok[i].password);
		ck_assert_int_eq(be_int(c, "db"), ok[i].db);
		ck_assert_int_eq(be_int(c, "tls.enabled"), ok[i].tls);
		ck_assert_int_eq(be_int(c, "node_timeout_ms"), 0);
		ck_assert_str_eq(be_str(c, "clock_drift_factor"), "0.01");
		ck_assert_int_eq(be_int(c, "restart_keepout_ms"), 0);
		conf_destroy(c);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_url_error(bad[i].url, bad[i].error);
}
END_TEST

/* Load text (its backend section, as a file) and expect conf_finish to
 * fail with one error holding want. */
static void
expect_one_error(struct scratch *sc, const char *text, const char *want)
{
	struct conf *c = load_text(sc, text, 0, -1);
	ck_assert_uint_eq(c->nerrors, 1);
	ck_assert_msg(strstr(c->errors[0], want) != NULL, "%s", c->errors[0]);
	conf_destroy(c);
}

START_TEST(test_redis_cluster_conf)
{
	static const struct {
		const char *url;	/* the -b option */
		const char *nodes[3];	/* backend.nodes, NULL after the last */
		const char *password;	/* backend.password */
		long long tls;		/* backend.tls.enabled */
	} ok[] = {
		{ "redis-cluster://a:7001,b:7002,c", { "a:7001", "b:7002", "c:6379" }, NULL, 0 },
		{ "redis-cluster://:hunter2@[::1]:7001", { "[::1]:7001", NULL, NULL }, "hunter2", 0 },
		{ "REDISS-CLUSTER://h", { "h:6379", NULL, NULL }, NULL, 1 },
	};
	static const struct { const char *url, *error; } bad[] = {
		{ "redis-cluster://", "bad redis-cluster URL 'redis-cluster://': the nodes are "
		      "missing (redis-cluster://host:port,host:port,...)" },
		{ "redis-cluster://h/1", "bad redis-cluster URL 'redis-cluster://h/1': a cluster "
		      "has no databases but 0 (redis-cluster://host:port,... without /db)" },
		{ "redis-cluster://u@h", "bad redis-cluster URL 'redis-cluster://***@h': a user "
		      "needs a password (redis-cluster://user:password@host:port,...; a password "
		      "alone goes after a colon: redis-cluster://:password@host:port,...)" },
		{ "redis-cluster://:hunter2@h:0", "bad redis-cluster URL "
		      "'redis-cluster://:***@h:0': the port must be between 1 and 65535" },
	};
	struct scratch sc;
	struct conf *c;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		const struct conf_node *nodes;
		c = conf_of_url(ok[i].url, "redis-cluster");
		nodes = *(struct conf_node *const *)conf_backend_value(c, "nodes");
		for (size_t k = 0; k < 3 && ok[i].nodes[k] != NULL; k++)
			ck_assert_str_eq(nodes[k].server, ok[i].nodes[k]);
		if (ok[i].password == NULL)
			ck_assert_ptr_null(be_str(c, "password"));
		else
			ck_assert_str_eq(be_str(c, "password"), ok[i].password);
		ck_assert_int_eq(be_int(c, "tls.enabled"), ok[i].tls);
		ck_assert_int_eq(be_int(c, "refresh_ms"), 5000);
		ck_assert_int_eq(be_int(c, "db"), 0);
		conf_destroy(c);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_url_error(bad[i].url, bad[i].error);

	/* YAML: nodes and refresh_ms; a db; a prefix with a brace; no nodes */
	scratch_init(&sc);
	c = load_text(&sc, "backend:\n  type: redis-cluster\n  nodes: [a, \"b:7002\"]\n"
	    "  refresh_ms: 1000\n", 0, 0);
	ck_assert_int_eq(be_int(c, "refresh_ms"), 1000);
	conf_destroy(c);
	expect_one_error(&sc, "backend:\n  type: redis-cluster\n  nodes:\n    - a\n"
	    "    - { address: b, password: x }\n",
	    "the nodes of a redis-cluster backend are addresses only");
	expect_one_error(&sc, "backend:\n  type: redis-cluster\n  nodes: [a]\n  db: 1\n",
	    ":4:7: 'backend.db' of a redis-cluster backend must be 0");
	expect_one_error(&sc, "backend:\n  type: redis-cluster\n  nodes: [a]\n"
	    "  key_prefix: \"app{1}:\"\n",
	    ":4:15: 'backend.key_prefix' of a redis-cluster "
	    "backend must not hold '{' or '}'");
	expect_one_error(&sc, "backend:\n  type: redis-cluster\n",
	    ":2:9: 'backend.nodes' must have at least one");
	scratch_rm(&sc);
}
END_TEST

/* A key two backends declare has one type in both: conf reads a key once
 * for every backend that declares it, whichever is chosen. */
START_TEST(test_backend_keys_one_type)
{
	const struct backend_ops *a, *b;
	for (size_t i = 0; (a = backend_at(i)) != NULL; i++)
		for (size_t j = i + 1; (b = backend_at(j)) != NULL; j++)
			for (size_t x = 0; x < a->nsettings; x++)
				for (size_t y = 0; y < b->nsettings; y++)
					if (strcmp(a->settings[x].name, b->settings[y].name) == 0)
						ck_assert_msg(a->settings[x].type ==
						    b->settings[y].type, "backend.%s: %s and %s "
						    "differ", a->settings[x].name, a->name, b->name);
}
END_TEST

START_TEST(test_redlock_drift_factor)
{
	static const char *const bad[] = { "abc", "0.5", "-0.1", "0.01x", "nan" };
	struct scratch s;
	struct conf *c;

	scratch_init(&s);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char text[200];

		snprintf(text, sizeof(text), "backend:\n  type: redlock\n  nodes: [a, b, c]\n"
		    "  clock_drift_factor: \"%s\"\n", bad[i]);
		c = load_text(&s, text, 0, -1);
		ck_assert_uint_eq(c->nerrors, 1);
		ck_assert_msg(strstr(c->errors[0], ":4:23: 'backend.clock_drift_factor' must be "
		    "a number from 0 to below 0.5") != NULL, "%s", c->errors[0]);
		conf_destroy(c);
	}
	/* the nodes left out: said where the backend was chosen */
	c = load_text(&s, "backend:\n  type: redlock\n", 0, -1);
	ck_assert_uint_eq(c->nerrors, 1);
	ck_assert_msg(strstr(c->errors[0], ":2:9: 'backend.nodes' must have at least one node") !=
	    NULL, "%s", c->errors[0]);
	conf_destroy(c);
	scratch_rm(&s);
}
END_TEST

START_TEST(test_redis_url_long_is_cut)
{
	/* a long URL is quoted cut short, the password hidden all the same */
	struct conf *c = conf_create();

	ck_assert_int_eq(conf_override_backend(c, "redis://:hunter2hunter2hunter2hunter2"
	    "hunter2hunter2@a-rather-long-host-name.example.org:0"), -1);
	ck_assert_uint_eq(c->nerrors, 1);
	ck_assert_str_eq(c->errors[0], "command line: bad redis URL "
	    "'redis://:***@a-rather-long-host-name.example.org...': "
	    "the port must be between 1 and 65535");
	conf_destroy(c);
}
END_TEST

START_TEST(test_redis_url_overrides_file)
{
	static const char *const urls[] = { "redis://10.1.1.1:7000", "redis://:url-pw@10.1.1.1:7000/9" };
	char *path = fixture("redis-all.yaml");

	for (int before = 0; before < 2; before++)
		for (size_t u = 0; u < 2; u++) {
			struct conf *c = conf_create();

			if (before)
				ck_assert_int_eq(conf_override_backend(c, urls[u]), 0);
			ck_assert_int_eq(conf_load(c, path), 0);
			if (!before)
				ck_assert_int_eq(conf_override_backend(c, urls[u]), 0);
			ck_assert_int_eq(conf_finish(c), 0);
			/* type, address, password and db from the URL ... */
			ck_assert_str_eq(c->backend_type, "redis");
			ck_assert_str_eq(be_addr(c)->host, "10.1.1.1");
			ck_assert_int_eq(be_addr(c)->port, 7000);
			if (u == 0) {
				ck_assert_ptr_null(be_str(c, "password"));
				ck_assert_int_eq(be_int(c, "db"), 0);
			} else {
				ck_assert_str_eq(be_str(c, "password"), "url-pw");
				ck_assert_int_eq(be_int(c, "db"), 9);
			}
			/* ... the rest from the file */
			ck_assert_str_eq(be_str(c, "key_prefix"), "app1:");
			ck_assert_int_eq(be_int(c, "connect_timeout_ms"), 500);
			ck_assert_int_eq(be_int(c, "command_timeout_ms"), 1000);
			ck_assert_int_eq(be_int(c, "handoff_limit"), 4);
			conf_destroy(c);
		}
	free(path);
}
END_TEST

START_TEST(test_redis_url_overrides_password_file)
{
	char *path = fixture("redis-pwfile.yaml");
	char *both = fixture("redis-both.yaml");
	struct conf *c;

	/* the URL's password wins over the file's password_file ... */
	c = conf_create();
	ck_assert_int_eq(conf_load(c, path), 0);
	ck_assert_int_eq(conf_override_backend(c, "redis://:url-pw@h"), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	ck_assert_str_eq(be_str(c, "password"), "url-pw");
	conf_destroy(c);

	/* ... and so does a URL without one, given first or last */
	c = conf_create();
	ck_assert_int_eq(conf_override_backend(c, "redis://h"), 0);
	ck_assert_int_eq(conf_load(c, path), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	ck_assert_ptr_null(be_str(c, "password"));
	ck_assert_str_eq(be_addr(c)->host, "h");
	conf_destroy(c);

	/* a file that sets both: neither is used, so no conflict */
	c = conf_create();
	ck_assert_int_eq(conf_load(c, both), 0);
	ck_assert_int_eq(conf_override_backend(c, "redis://h"), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	ck_assert_ptr_null(be_str(c, "password"));
	conf_destroy(c);
	free(both);
	free(path);
}
END_TEST

START_TEST(test_redis_url_then_memory)
{
	/* -b memory changes the type only; a bad URL changes nothing */
	char *path = fixture("redis-all.yaml");
	struct conf *c = conf_create();
	static const char *const want[] = {
		" bad redis URL 'redis://:***@h:0': the port must be between 1 and 65535", NULL
	};

	ck_assert_int_eq(conf_load(c, path), 0);
	ck_assert_int_eq(conf_override_backend(c, "redis://:hunter2@h:0"), -1);
	ck_assert_str_eq(c->backend_type, "redis");
	ck_assert_str_eq(be_addr(c)->host, "::1");
	ck_assert_str_eq(be_str(c, "password"), "s3cret");
	ck_assert_int_eq(be_int(c, "db"), 3);
	ck_assert_int_eq(conf_override_backend(c, "memory"), 0);
	ck_assert_int_eq(conf_finish(c), -1);
	expect_errors(c, "command line", want);
	ck_assert_str_eq(c->backend_type, "memory");
	ck_assert_ptr_null(c->backend_settings);
	ck_assert_ptr_null(conf_backend_value(c, "address"));
	conf_destroy(c);
	free(path);
}
END_TEST

/* --- lists of servers, through a backend only this suite knows --- */

#define LS_PORT 2379		/* the port of an endpoint written without one */

/* The settings of the "lists" backend. */
struct ls_settings {
	char **endpoints;	/* backend.endpoints: port LS_PORT if left out */
	size_t nendpoints;	/* how many */
	char **peers;		/* backend.peers: each with its port */
	size_t npeers;		/* how many */
};

#define LS_SET(field) offsetof(struct ls_settings, field)

static const struct conf_setting ls_table[] = {
	{ .name = "endpoints", .type = CONF_SERVERLIST, .off = LS_SET(endpoints),
	  .count = LS_SET(nendpoints), .def = LS_PORT, .defstr = "localhost" },
	{ .name = "peers", .type = CONF_SERVERLIST, .off = LS_SET(peers),
	  .count = LS_SET(npeers), .defstr = "[::1]:7000, 127.0.0.1:7001" },
};

/* The parse_url of a backend only this suite knows: -b SCHEME://SERVERS
 * gives its setting name as it is written, one string, the servers
 * separated by commas (as the etcd and redlock URLs do). 1 if url is not
 * of that scheme. */
static int
url_servers(const char *url, const char *scheme, const char *name, backend_url_set *set,
    void *arg)
{
	size_t n = strlen(scheme);

	if (strncmp(url, scheme, n) != 0)
		return 1;
	set(arg, name, url + n);
	return 0;
}

/* -b lists://SERVERS gives backend.endpoints. */
static int
ls_parse_url(const char *url, backend_url_set *set, void *arg, const char **why)
{
	(void)why;
	return url_servers(url, "lists://", "endpoints", set, arg);
}

/* Only conf sees it: it is never created. */
static const struct backend_ops ls_ops = {
	.name = "lists",
	.settings = ls_table,
	.nsettings = sizeof(ls_table) / sizeof(ls_table[0]),
	.settings_size = sizeof(struct ls_settings),
	.parse_url = ls_parse_url,
	.url_form = "lists://host:port,...",
};

/* The registered backends, then "lists". */
static const struct backend_ops *
ls_at(size_t i)
{
	size_t n = 0;

	while (backend_at(n) != NULL)
		n++;
	return i < n ? backend_at(i) : i == n ? &ls_ops : NULL;
}

static void
ls_setup(void)
{
	conf_use_backends(ls_at);
}

/* Back to the registered backends. */
static void
backends_teardown(void)
{
	conf_use_backends(NULL);
}

/* The settings of the "lists" backend, which c must have chosen. */
static const struct ls_settings *
ls_settings(const struct conf *c)
{
	const struct ls_settings *set = c->backend_settings;

	ck_assert_str_eq(c->backend_type, "lists");
	ck_assert_ptr_nonnull(set);
	ck_assert_ptr_eq(conf_backend_value(c, "endpoints"), &set->endpoints);
	ck_assert_ptr_eq(conf_backend_value(c, "peers"), &set->peers);
	return set;
}

/* Assert that the n servers of list are want (NULL-terminated), in order,
 * and that list ends with NULL. */
static void
expect_servers(char *const *list, size_t n, const char *const *want)
{
	size_t i;

	ck_assert_ptr_nonnull(list);
	for (i = 0; want[i] != NULL; i++) {
		ck_assert_msg(i < n, "%zu servers, expected more", n);
		ck_assert_str_eq(list[i], want[i]);
	}
	ck_assert_uint_eq(n, i);
	ck_assert_ptr_null(list[n]);
}

START_TEST(test_serverlist_good)
{
	static const struct {
		const char *yaml;		/* the file's keys after backend.type */
		const char *endpoints[6];	/* backend.endpoints then */
		const char *peers[3];		/* backend.peers then */
	} ok[] = {
		/* .defstr as if given: the default port, several servers */
		{ "", { "localhost:2379" }, { "[::1]:7000", "127.0.0.1:7001" } },
		/* lists, in order, the default port where none is written */
		{ "  endpoints:\n    - etcd-1.example.net:2381\n    - etcd-2\n    - \"[::1]\"\n"
		  "    - '[fe80::1%eth0]:2380'\n    - !!str 10.0.0.3:2379\n"
		  "  peers: [ \"b:2\", a:1 ]\n",
		  { "etcd-1.example.net:2381", "etcd-2:2379", "[::1]:2379", "[fe80::1%eth0]:2380",
		    "10.0.0.3:2379" }, { "b:2", "a:1" } },
		/* one string, commas between, blanks around them */
		{ "  endpoints: h1:1, h2 ,[::1]:3,\th4\n  peers: \"  a:1  \"\n",
		  { "h1:1", "h2:2379", "[::1]:3", "h4:2379" }, { "a:1" } },
	};
	struct scratch s;
	struct conf *c;

	scratch_init(&s);
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		char *yaml;

		ck_assert_int_ge(asprintf(&yaml, "backend:\n  type: lists\n%s", ok[i].yaml), 0);
		c = load_text(&s, yaml, 0, 0);
		expect_servers(ls_settings(c)->endpoints, ls_settings(c)->nendpoints,
		    ok[i].endpoints);
		expect_servers(ls_settings(c)->peers, ls_settings(c)->npeers, ok[i].peers);
		conf_destroy(c);
		free(yaml);
	}
	scratch_rm(&s);

	/* with another backend chosen, its settings are not handed out */
	c = conf_create();
	ck_assert_int_eq(conf_finish(c), 0);
	ck_assert_str_eq(c->backend_type, "memory");
	ck_assert_ptr_null(conf_backend_value(c, "endpoints"));
	conf_destroy(c);
}
END_TEST

START_TEST(test_serverlist_bad)
{
	static const char *const items[] = {
		"3:7: bad backend.endpoints server 'unix:/run/etcd.sock': a Unix socket is not "
		    "supported here (expected host:port or [v6addr]:port)",
		"4:7: bad backend.endpoints server 'h:0': the port must be between 1 and 65535",
		"5:7: bad backend.endpoints server 'h:': the port is missing",
		"6:7: bad backend.endpoints server '::1:2379': "
		    "an IPv6 address must be in brackets, as in [::1]:7480",
		"7:7: 'backend.endpoints' entries must be servers, not a mapping",
		"8:6: 'backend.endpoints' entries must be servers, not an empty value",
		"10:7: duplicate backend.endpoints server 'good:1'",
		"12:7: duplicate backend.endpoints server 'h:2379'",
		/* one scalar: every error at its place */
		"13:10: bad backend.peers server '': the address is empty",
		"13:10: bad backend.peers server 'b:x': the port is not a number",
		"13:10: duplicate backend.peers server 'a:1'",
		"13:10: bad backend.peers server 'c': "
		    "missing port (expected host:port or [v6addr]:port)",
		"13:10: bad backend.peers server '': the address is empty",
		NULL
	};
	static const char *const shapes[] = {
		/* an item of a list is one server, commas or not */
		"2:16: bad backend.endpoints server 'c:3,d:4': "
		    "an IPv6 address must be in brackets, as in [::1]:7480",
		"3:10: bad backend.peers server 'b?:2': it contains a NUL character",
		NULL
	};
	static const char *const mapping[] = {
		"2:10: 'backend.peers' must be a list of servers, not a mapping", NULL
	};
	struct scratch s;
	struct conf *c;

	scratch_init(&s);
	expect_text_errors(&s, "backend:\n  endpoints:\n"
	    "    - unix:/run/etcd.sock\n    - \"h:0\"\n    - \"h:\"\n    - ::1:2379\n"
	    "    - { a: 1 }\n    -\n    - good:1\n    - good:1\n    - h\n    - h:2379\n"
	    "  peers: a:1,, b:x ,a:1 ,c,\n", -1, items);
	expect_text_errors(&s, "backend:\n  endpoints: [ \"c:3,d:4\" ]\n"
	    "  peers: \"a:1,b\\0:2\"\n", -1, shapes);
	expect_text_errors(&s, "backend:\n  peers: { a: 1 }\n", -1, mapping);

	/* a refused list leaves the one before it */
	c = conf_create();
	ck_assert_int_eq(conf_override_backend(c, "lists://x:1"), 0);
	ck_assert_int_eq(conf_override_backend(c, "lists://x:1,y,x:1"), -1);
	ck_assert_int_eq(conf_finish(c), -1);
	expect_errors(c, "command line", (const char *const[]){
	    " duplicate backend.endpoints server 'x:1'", NULL });
	expect_servers(ls_settings(c)->endpoints, ls_settings(c)->nendpoints,
	    (const char *const[]){ "x:1", NULL });
	conf_destroy(c);
	scratch_rm(&s);
}
END_TEST

START_TEST(test_serverlist_empty)
{
	static const char *const want[] = {
		"3:14: 'backend.endpoints' must have at least one server", NULL
	};
	static const char *const none[] = { NULL };
	struct scratch s;
	struct conf *c;

	scratch_init(&s);
	expect_text_errors(&s, "backend:\n  type: lists\n  endpoints: []\n", 0, want);
	expect_text_errors(&s, "backend:\n  type: lists\n  endpoints: ''\n", 0, want);
	expect_text_errors(&s, "backend:\n  type: lists\n  endpoints: \" \\t \"\n", 0, want);
	expect_text_errors(&s, "backend:\n  type: lists\n  endpoints: ~\n", 0, want);
	/* only the chosen backend's settings must make sense */
	expect_text_errors(&s, "backend:\n  endpoints: []\n", 0, none);
	scratch_rm(&s);

	c = conf_create();
	ck_assert_int_eq(conf_override_backend(c, "lists://"), 0);
	ck_assert_int_eq(conf_finish(c), -1);
	expect_errors(c, "command line", (const char *const[]){
	    " 'backend.endpoints' must have at least one server", NULL });
	conf_destroy(c);
}
END_TEST

START_TEST(test_serverlist_url)
{
	static const struct {
		const char *url;		/* the -b option */
		const char *want[4];		/* backend.endpoints */
	} ok[] = {
		{ "lists://h1:2379,h2:2379", { "h1:2379", "h2:2379", NULL } },
		{ "lists:// h1 , [::1]:5 ", { "h1:2379", "[::1]:5", NULL } },
		{ "lists://[2001:db8::1],h", { "[2001:db8::1]:2379", "h:2379", NULL } },
		{ "lists://only:1", { "only:1", NULL } },
	};
	struct scratch s;
	const char *path;

	scratch_init(&s);
	path = scratch_text(&s, "t.yaml", "backend:\n  type: lists\n  endpoints: [ f:1, g:2 ]\n");
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct conf *c = conf_create();

		ck_assert_msg(conf_override_backend(c, ok[i].url) == 0, "%s: %s", ok[i].url,
		    c->nerrors > 0 ? c->errors[0] : "");
		/* the URL's list wins over the file's, before or after it */
		ck_assert_int_eq(conf_load(c, path), 0);
		ck_assert_int_eq(conf_finish(c), 0);
		expect_servers(ls_settings(c)->endpoints, ls_settings(c)->nendpoints,
		    ok[i].want);
		conf_destroy(c);
	}
	scratch_rm(&s);
}
END_TEST

/* --- lists of nodes, through a backend only this suite knows --- */

#define NL_PORT 6379		/* the port of a node written without one */

/* The settings of the "nodelist" backend. */
struct nl_settings {
	struct conf_node *nodes;	/* backend.nodes: port NL_PORT if left out */
	size_t nnodes;			/* how many */
	struct conf_node *spares;	/* backend.spares: may be empty, each with
					 * its port */
	size_t nspares;			/* how many */
};

#define NL_SET(field) offsetof(struct nl_settings, field)

static const struct conf_setting nl_table[] = {
	{ .name = "nodes", .type = CONF_NODELIST, .off = NL_SET(nodes),
	  .count = NL_SET(nnodes), .def = NL_PORT },
	{ .name = "spares", .type = CONF_NODELIST, .off = NL_SET(spares),
	  .count = NL_SET(nspares), .defstr = "localhost:7000", .optional = 1 },
};

/* -b nodelist://SERVERS gives backend.nodes. */
static int
nl_parse_url(const char *url, backend_url_set *set, void *arg, const char **why)
{
	(void)why;
	return url_servers(url, "nodelist://", "nodes", set, arg);
}

/* Only conf sees it: it is never created. */
static const struct backend_ops nl_ops = {
	.name = "nodelist",
	.settings = nl_table,
	.nsettings = sizeof(nl_table) / sizeof(nl_table[0]),
	.settings_size = sizeof(struct nl_settings),
	.parse_url = nl_parse_url,
	.url_form = "nodelist://host:port,...",
};

/* "nodelist" alone, so that no registered backend's row of the same name
 * takes backend.nodes first. */
static const struct backend_ops *
nl_at(size_t i)
{
	return i == 0 ? &nl_ops : NULL;
}

static void
nl_setup(void)
{
	conf_use_backends(nl_at);
}

/* The settings of the "nodelist" backend, which c must have chosen. */
static const struct nl_settings *
nl_settings(const struct conf *c)
{
	const struct nl_settings *set = c->backend_settings;

	ck_assert_str_eq(c->backend_type, "nodelist");
	ck_assert_ptr_nonnull(set);
	ck_assert_ptr_eq(conf_backend_value(c, "nodes"), &set->nodes);
	ck_assert_ptr_eq(conf_backend_value(c, "spares"), &set->spares);
	return set;
}

/* What a node should hold; NULL (CONF_UNSET) for what it leaves to the
 * backend. A relative file name is relative to the configuration's
 * directory. */
struct nl_want {
	const char *server, *username, *password, *password_file;
	long long tls;
	const char *ca_file, *cert_file, *key_file, *server_name;
};

/* Assert that the file name got is want resolved from dir (NULL: none). */
static void
expect_file(const char *got, const char *dir, const char *want)
{
	char *path = NULL;

	if (want != NULL && want[0] != '/')
		ck_assert_int_ge(asprintf(&path, "%s/%s", dir, want), 0);
	ck_assert_pstr_eq(got, path != NULL ? path : want);
	free(path);
}

/* Assert that the n nodes got are the nwant of want, every field. */
static void
expect_nodes(const struct conf_node *got, size_t n, const struct nl_want *want, size_t nwant,
    const char *dir)
{
	ck_assert_uint_eq(n, nwant);
	ck_assert_ptr_nonnull(got);
	for (size_t i = 0; i < n; i++) {
		ck_assert_str_eq(got[i].server, want[i].server);
		ck_assert_pstr_eq(got[i].username, want[i].username);
		ck_assert_pstr_eq(got[i].password, want[i].password);
		expect_file(got[i].password_file, dir, want[i].password_file);
		ck_assert_int_eq(got[i].tls, want[i].tls);
		expect_file(got[i].tls_ca_file, dir, want[i].ca_file);
		expect_file(got[i].tls_cert_file, dir, want[i].cert_file);
		expect_file(got[i].tls_key_file, dir, want[i].key_file);
		ck_assert_pstr_eq(got[i].tls_server_name, want[i].server_name);
	}
}

START_TEST(test_nodelist_good)
{
	static const struct nl_want nodes[] = {
		{ .server = "10.0.0.5:6380", .tls = CONF_UNSET },
		{ .server = "10.0.0.6:6380", .username = "dlock", .password = "node2 pass",
		  .password_file = "secrets/node2.pass", .tls = 1, .ca_file = "ca.pem",
		  .cert_file = "client.pem", .key_file = "/etc/dlockd/client.key",
		  .server_name = "redis-2.example.net" },
		{ .server = "[2001:db8::7]:6379", .tls = CONF_UNSET },
		{ .server = "redis-4:6379", .password = "node4 secret", .tls = 0 },
		{ .server = "10.0.0.8:7000", .tls = CONF_UNSET },
	};
	static const struct nl_want spares[] = { { .server = "localhost:7000", .tls = CONF_UNSET } };
	char *dir = top_path("tests/conf");
	struct conf *c = load_ok("nodes.yaml");
	const struct nl_settings *set = nl_settings(c);

	expect_nodes(set->nodes, set->nnodes, nodes, sizeof(nodes) / sizeof(nodes[0]), dir);
	/* .defstr as if given */
	expect_nodes(set->spares, set->nspares, spares, 1, dir);
	conf_destroy(c);

	/* with another backend chosen, its settings are not handed out */
	c = conf_create();
	ck_assert_int_eq(conf_finish(c), 0);
	ck_assert_ptr_null(conf_backend_value(c, "nodes"));	/* not the chosen backend */
	conf_destroy(c);
	free(dir);
}
END_TEST

START_TEST(test_nodelist_flow_and_scalar)
{
	static const struct nl_want nodes[] = {
		{ .server = "a:1", .tls = CONF_UNSET },
		{ .server = "b:6379", .username = "u", .tls = 1, .server_name = "b.example" },
		{ .server = "c:3", .password = "pw", .password_file = "c.pass",
		  .tls = CONF_UNSET },
	};
	static const struct nl_want scalar[] = {
		{ .server = "h1:1", .tls = CONF_UNSET },
		{ .server = "[::1]:6379", .tls = CONF_UNSET },
	};
	struct scratch s;
	struct conf *c;

	scratch_init(&s);
	scratch_text(&s, "c.pass", "pw\r\n");
	c = load_text(&s, "backend:\n  type: nodelist\n  nodes: [ a:1, { address: b, "
	    "username: u, tls: { enabled: yes, server_name: b.example } },\n"
	    "    { address: \"c:3\", password: \"\", password_file: c.pass } ]\n"
	    "  spares: []\n", 0, 0);
	expect_nodes(nl_settings(c)->nodes, nl_settings(c)->nnodes, nodes, 3, s.dir);
	ck_assert_uint_eq(nl_settings(c)->nspares, 0);
	conf_destroy(c);
	/* one string of servers, as CONF_SERVERLIST takes it */
	c = load_text(&s, "backend:\n  type: nodelist\n  nodes: \" h1:1 ,[::1]\"\n", 0, 0);
	expect_nodes(nl_settings(c)->nodes, nl_settings(c)->nnodes, scalar, 2, s.dir);
	conf_destroy(c);
	scratch_rm(&s);
}
END_TEST

START_TEST(test_nodelist_bad)
{
	char *nofile = fixture("no-such.pass"), *unreadable;
	const char *want[] = {
		"4:7: a node of 'backend.nodes' has no 'address'",
		"6:7: unknown key 'pasword' in a node of 'backend.nodes'",
		"7:16: bad backend.nodes server 'h:0': the port must be between 1 and 65535",
		"8:7: duplicate backend.nodes server '10.0.0.1:6379'",
		"10:17: 'password' and 'password_file' in a node of 'backend.nodes' cannot both "
		    "be set",
		NULL,	/* the password file, below */
		"16:18: 'tls.enabled' in a node of 'backend.nodes' must be true or false, "
		    "not 'maybe'",
		"18:25: 'tls.cert_file' without 'tls.key_file' in a node of 'backend.nodes': "
		    "a client certificate goes with its key",
		"20:24: 'tls.key_file' without 'tls.cert_file' in a node of 'backend.nodes': "
		    "a client certificate goes with its key",
		"21:16: 'address' in a node of 'backend.nodes' must be a server, not a list",
		"23:17: 'username' in a node of 'backend.nodes' must be a string, not a list",
		"24:12: 'tls' in a node of 'backend.nodes' must be a mapping, not 'yes'",
		"25:7: 'backend.nodes' entries must be nodes, not a list",
		"26:6: 'backend.nodes' entries must be nodes, not an empty value",
		"28:7: duplicate key 'address' in a node of 'backend.nodes' (first at line 27)",
		"29:7: unknown key 'tls.enabled' in a node of 'backend.nodes' "
		    "(a dot does not nest keys: write a mapping)",
		"30:14: unknown key 'tls.verify' in a node of 'backend.nodes'",
		NULL
	};

	ck_assert_int_ge(asprintf(&unreadable, "13:22: cannot read password file '%s': "
	    "No such file or directory", nofile), 0);
	want[5] = unreadable;
	expect_fixture("nodes-bad.yaml", want);
	free(unreadable);
	free(nofile);
}
END_TEST

START_TEST(test_nodelist_shapes)
{
	static const char *const yaml[] = {
		/* the whole value */
		"backend:\n  nodes: { address: a:1 }\n",
		/* anchors, aliases and tags inside a node */
		"backend:\n  nodes:\n    - address: &a h:1\n    - address: *a\n"
		    "    - { address: !!binary aGk= }\n    - !!map { address: h:4 }\n"
		    "    - { username: !!str 5, address: \"h:5\", tls: !!seq [] }\n",
		/* deeper mappings, keys that are no scalars, NUL characters */
		"backend:\n  nodes:\n    - { address: \"h:1\", tls: { enabled: { x: 1 } } }\n"
		    "    - { address: \"h:2\", [k]: v, x: { y: 1 } }\n"
		    "    - { address: \"h:3\\0\", password: \"p\\0w\" }\n",
	};
	static const char *const want0[] = {
		"2:10: 'backend.nodes' must be a list of nodes, not a mapping", NULL
	};
	static const char *const want1[] = {
		"3:16: anchors are not supported (&a)",
		"4:16: aliases are not supported (*a)",
		"5:18: tag '!!binary' is not supported",
		"7:49: 'tls' in a node of 'backend.nodes' must be a mapping, not a list",
		NULL
	};
	static const char *const want2[] = {
		"3:41: 'tls.enabled' in a node of 'backend.nodes' must be a string, not a mapping",
		"4:25: a key must be a scalar, not a list",
		"4:33: unknown key 'x' in a node of 'backend.nodes'",
		"5:18: bad backend.nodes server 'h:3?': it contains a NUL character",
		"5:37: 'password' in a node of 'backend.nodes' must not contain a NUL character",
		NULL
	};
	const char *const *want[] = { want0, want1, want2 };
	struct scratch s;

	scratch_init(&s);
	for (size_t i = 0; i < sizeof(yaml) / sizeof(yaml[0]); i++)
		expect_text_errors(&s, yaml[i], -1, want[i]);
	scratch_rm(&s);
}
END_TEST

START_TEST(test_nodelist_empty)
{
	static const char *const want[] = {
		"3:10: 'backend.nodes' must have at least one node", NULL
	};
	static const char *const none[] = { NULL };
	struct scratch s;

	scratch_init(&s);
	expect_text_errors(&s, "backend:\n  type: nodelist\n  nodes: []\n", 0, want);
	expect_text_errors(&s, "backend:\n  type: nodelist\n  nodes: ~\n", 0, want);
	expect_text_errors(&s, "backend:\n  type: nodelist\n  nodes: [a]\n  spares: []\n", 0,
	    none);
	scratch_rm(&s);
}
END_TEST

START_TEST(test_nodelist_url)
{
	static const struct nl_want nodes[] = {
		{ .server = "h1:7001", .tls = CONF_UNSET },
		{ .server = "[::1]:6379", .tls = CONF_UNSET },
		{ .server = "h3:6379", .tls = CONF_UNSET },
	};
	char *path = fixture("nodes.yaml");
	struct conf *c = conf_create();

	/* the URL's nodes win over the file's, servers alone */
	ck_assert_int_eq(conf_override_backend(c, "nodelist://h1:7001, [::1] ,h3"), 0);
	ck_assert_int_eq(conf_load(c, path), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	expect_nodes(nl_settings(c)->nodes, nl_settings(c)->nnodes, nodes, 3, "");
	conf_destroy(c);

	c = conf_create();
	ck_assert_int_eq(conf_override_backend(c, "nodelist://a:1,a:1"), -1);
	expect_errors(c, "command line", (const char *const[]){
	    " duplicate backend.nodes server 'a:1'", NULL });
	conf_destroy(c);
	free(path);
}
END_TEST

/* The text of the file path; the caller frees it. */
static char *
read_text(const char *path)
{
	char *text = NULL;
	size_t size = 0;
	FILE *fp = fopen(path, "r"), *out = open_memstream(&text, &size);
	int ch;

	ck_assert_ptr_nonnull(fp);
	ck_assert_ptr_nonnull(out);
	while ((ch = getc(fp)) != EOF)
		putc(ch, out);
	fclose(fp);
	fclose(out);
	return text;
}

START_TEST(test_nodelist_reload)
{
	static const char *const base = "backend:\n  type: nodelist\n  nodes:\n"
	    "    - a:1\n    - { address: b:2%s }\n";
	static const char *const first = ", username: u, password: old-secret";
	static const struct {
		const char *keys;	/* the second node's keys besides */
		bool same;		/* whether the lists are the same */
	} next[] = {
		{ ", password: old-secret, username: u", true },
		{ ", username: u, password: new-secret", false },
		{ ", username: u, password_file: pw.txt", false },
		{ ", username: u, password: old-secret, tls: { enabled: true }", false },
		{ ", username: u, password: old-secret, tls: { server_name: b.example }", false },
		{ ", username: v, password: old-secret", false },
	};
	struct scratch s;
	struct conf *live, *c;
	const char *log;
	char *yaml, *text;
	const struct conf_node *nodes;

	scratch_init(&s);
	scratch_text(&s, "pw.txt", "file-secret\n");
	log = scratch_text(&s, "log", "");
	ck_assert_int_ge(asprintf(&yaml, base, first), 0);
	live = load_text(&s, yaml, 0, 0);
	free(yaml);
	nodes = nl_settings(live)->nodes;
	for (size_t i = 0; i < sizeof(next) / sizeof(next[0]); i++) {
		ck_assert_int_ge(asprintf(&yaml, base, next[i].keys), 0);
		c = load_text(&s, yaml, 0, 0);
		free(yaml);
		ck_assert_int_eq(truncate(log, 0), 0);
		ck_assert_int_eq(log_open(log), 0);
		ck_assert_int_eq(conf_reload(live, c), 0);	/* never live */
		log_close();
		text = read_text(log);
		ck_assert_msg((strstr(text, "backend.nodes changed: restart dlockd to apply; "
		    "keeping a:1, b:2\n") == NULL) == next[i].same, "%zu: %s", i, text);
		ck_assert_ptr_null(strstr(text, "secret"));
		free(text);
		ck_assert_ptr_eq(nl_settings(live)->nodes, nodes);
		ck_assert_str_eq(nodes[1].password, "old-secret");
		conf_destroy(c);
	}
	conf_destroy(live);
	scratch_rm(&s);
}
END_TEST

START_TEST(test_nodelist_no_password_shown)
{
	/* neither errors nor the printed value ever show a node's password */
	static const char *const yaml =
	    "backend:\n  type: nodelist\n  nodes:\n"
	    "    - { address: \"h:0\", password: hunter2 }\n"
	    "    - { address: h, password: hunter2, pasword: hunter2, password_file: x }\n"
	    "    - { address: i, password: [hunter2], tls: { enabled: maybe } }\n"
	    "    - { address: j, password: \"hunter2\\0\" }\n";
	struct scratch s;
	struct conf *c;

	scratch_init(&s);
	c = load_text(&s, yaml, -1, -1);
	ck_assert_uint_ge(c->nerrors, 6);
	for (size_t i = 0; i < c->nerrors; i++)
		ck_assert_msg(strstr(c->errors[i], "hunter2") == NULL, "%s", c->errors[i]);
	conf_destroy(c);
	scratch_rm(&s);
}
END_TEST

START_TEST(test_url_decode)
{
	static const struct {
		const char *in;		/* the part of a URL */
		size_t n;		/* bytes of it to decode */
		const char *out;	/* what it decodes to, NULL if refused */
	} cases[] = {
		{ "", 0, "" },
		{ "hunter2", 7, "hunter2" },
		{ "pa%40ss%2f%2F%25", 16, "pa@ss//%" },
		{ "%41%62c", 7, "Abc" },
		{ "%01%7f%ff+ ", 11, "\x01\x7f\xff+ " },
		{ "a%41zz", 4, "aA" },		/* only n bytes are read */
		{ "%%41", 4, NULL },
		{ "a%4", 3, NULL },
		{ "a%41", 3, NULL },		/* the escape goes past n */
		{ "%", 1, NULL },
		{ "%g0", 3, NULL },
		{ "%0g", 3, NULL },
		{ "% 1", 3, NULL },
		{ "%00", 3, NULL },		/* a NUL would cut the string */
		{ "x%00y", 5, NULL },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *d = conf_url_decode(cases[i].in, cases[i].n);

		if (cases[i].out == NULL)
			ck_assert_msg(d == NULL, "'%s' (%zu) gave '%s'", cases[i].in, cases[i].n,
			    d);
		else {
			ck_assert_msg(d != NULL, "'%s' (%zu) refused", cases[i].in, cases[i].n);
			ck_assert_str_eq(d, cases[i].out);
			explicit_bzero(d, strlen(d));
		}
		free(d);
	}
}
END_TEST

/* The userinfo of a URL: absent, user only, password only, both, escapes,
 * the last '@' ending it; a bad escape or an escaped NUL allocates nothing
 * and never shows the password. */
START_TEST(test_url_userinfo)
{
	static const struct {
		const char *in;		/* the authority, after "scheme://" */
		const char *user;	/* NULL: none */
		const char *password;	/* NULL: none */
		size_t rest;		/* offset of *rest in in */
	} ok[] = {
		{ "h:1", NULL, NULL, 0 },
		{ "", NULL, NULL, 0 },
		{ "alice@h", "alice", NULL, 6 },
		{ "@h", "", NULL, 1 },
		{ ":pw@h", "", "pw", 4 },
		{ ":@h", "", "", 2 },
		{ "alice:@h", "alice", "", 7 },
		{ "alice:pw@h:2379,g:1", "alice", "pw", 9 },
		{ "al%69ce:p%77@h", "alice", "pw", 13 },
		{ "a%3Ab:c%3ad@h", "a:b", "c:d", 12 },
		{ "u:p:w@h", "u", "p:w", 6 },
		{ "u:pa%40ss@h", "u", "pa@ss", 10 },
		{ "u:p@ss@h", "u", "p@ss", 7 },		/* the last '@' ends it */
		{ "u@x:p@h", "u@x", "p", 6 },
		{ "u:%2500@h", "u", "%00", 8 },
		{ "u:p@", "u", "p", 4 },
	};
	static const struct { const char *in, *why; } bad[] = {
		{ "%zz:hunter2@h", "bad %-escape in the user name" },
		{ "a%4:hunter2@h", "bad %-escape in the user name" },
		{ "a%00b:hunter2@h", "the user name contains a NUL byte" },
		{ "alice:hunter2%g0@h", "bad %-escape in the password" },
		{ "alice:hunter2%@h", "bad %-escape in the password" },
		{ ":hunter2%00@h", "the password contains a NUL byte" },
		{ "alice:%00hunter2@h", "the password contains a NUL byte" },
		{ "%zz:hunter2%00@h", "bad %-escape in the user name" },
		{ "alice:hunter2%zz%00@h", "bad %-escape in the password" },
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		char *user = (char *)1, *pw = (char *)1;
		const char *rest = NULL, *why = NULL;

		ck_assert_msg(conf_url_userinfo(ok[i].in, &user, &pw, &rest, &why) == 0,
		    "'%s' refused: %s", ok[i].in, why);
		ck_assert_ptr_null(why);
		ck_assert_ptr_eq(rest, ok[i].in + ok[i].rest);
		if (ok[i].user == NULL)
			ck_assert_ptr_null(user);
		else
			ck_assert_str_eq(user, ok[i].user);
		if (ok[i].password == NULL)
			ck_assert_ptr_null(pw);
		else
			ck_assert_str_eq(pw, ok[i].password);
		if (pw != NULL)
			explicit_bzero(pw, strlen(pw));
		free(pw);
		free(user);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *user = (char *)1, *pw = (char *)1;
		const char *rest = NULL, *why = NULL;

		ck_assert_msg(conf_url_userinfo(bad[i].in, &user, &pw, &rest, &why) == -1,
		    "'%s' taken", bad[i].in);
		ck_assert_ptr_nonnull(why);
		ck_assert_str_eq(why, bad[i].why);
		ck_assert_ptr_null(strstr(why, "hunter2"));
		ck_assert_ptr_null(user);
		ck_assert_ptr_null(pw);
	}
}
END_TEST

/* -b etcd://: the user and password, and what is wrong with them. */
START_TEST(test_etcd_url_userinfo)
{
	static const struct { const char *url, *user, *password; int tls; } ok[] = {
		{ "etcd://h:1", NULL, NULL, 0 },
		{ "etcd://root:s3cret@h:1", "root", "s3cret", 0 },
		{ "etcd://ro%6Ft:s3%40cret@h:1", "root", "s3@cret", 0 },
		{ "etcd://root:p@ss@h:1", "root", "p@ss", 0 },
		{ "etcd://root@h:1", "root", NULL, 0 },
		{ "etcds://h:1,g", NULL, NULL, 1 },
		{ "ETCDS://root:pw@h:1", "root", "pw", 1 },
	};
	static const struct { const char *url, *error; } bad[] = {
		{ "etcd://@h:1", "the user name is empty" },
		{ "etcd://:hunter2@h:1", "the user name is empty" },
		{ "etcd://:hunter2%zz@h:1", "the user name is empty" },
		{ "etcd://r%zz:hunter2@h:1", "bad %-escape in the user name" },
		{ "etcd://r%00:hunter2@h:1", "the user name contains a NUL byte" },
		{ "etcd://root:hunter2%4@h:1", "bad %-escape in the password" },
		{ "etcd://root:hunter2%00@h:1", "the password contains a NUL byte" },
		{ "etcd://root:hunter2@", "the host is missing" },
		{ "etcd://root:hunter2@h:1/v3", "a path or query is not supported" },
		{ "etcds://", "the host is missing" },
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct conf *c = conf_of_url(ok[i].url, "etcd");

		if (ok[i].user == NULL)
			ck_assert_ptr_null(be_str(c, "username"));
		else
			ck_assert_str_eq(be_str(c, "username"), ok[i].user);
		if (ok[i].password == NULL)
			ck_assert_ptr_null(be_str(c, "password"));
		else
			ck_assert_str_eq(be_str(c, "password"), ok[i].password);
		ck_assert_int_eq(be_int(c, "tls.enabled"), ok[i].tls);
		conf_destroy(c);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct conf *c = conf_create();

		ck_assert_int_eq(conf_override_backend(c, bad[i].url), -1);
		ck_assert_uint_eq(c->nerrors, 1);
		ck_assert_msg(strstr(c->errors[0], bad[i].error) != NULL, "%s: %s", bad[i].url,
		    c->errors[0]);
		ck_assert(!errors_contain(c, "hunter2"));
		conf_destroy(c);
	}
}
END_TEST

START_TEST(test_etcd_tls_settings)
{
	struct scratch s;
	struct conf *c;

	scratch_init(&s);
	c = load_text(&s, "backend:\n  type: etcd\n  tls:\n    enabled: true\n"
	    "    ca_file: ca.pem\n    cert_file: client.pem\n    key_file: client.key\n"
	    "    server_name: etcd.example.org\n", 0, 0);
	ck_assert_uint_eq(c->nerrors, 0);
	ck_assert_int_eq(be_int(c, "tls.enabled"), 1);
	ck_assert_str_eq(be_str(c, "tls.server_name"), "etcd.example.org");
	ck_assert_ptr_nonnull(strstr(be_str(c, "tls.cert_file"), "client.pem"));
	conf_destroy(c);
	/* a client certificate without its key: said where */
	c = load_text(&s, "backend:\n  type: etcd\n  tls:\n    enabled: true\n"
	    "    cert_file: client.pem\n", 0, -1);
	ck_assert_uint_eq(c->nerrors, 1);
	ck_assert_msg(strstr(c->errors[0], ":5:16: 'backend.tls.cert_file' and "
	    "'backend.tls.key_file' go together") != NULL, "%s", c->errors[0]);
	conf_destroy(c);
	scratch_rm(&s);
}
END_TEST

/* --- backends declare their keys --- */

START_TEST(test_backend_keys_declared_by_backends)
{
	static const char *const redis_keys[] = { "address", "username", "password",
		"password_file", "db", "key_prefix", "connect_timeout_ms", "command_timeout_ms",
		"handoff_limit", "lease_cache_ms", "min_replicas_ack", "replica_ack_timeout_ms",
		"tls.enabled", "tls.ca_file", "tls.cert_file", "tls.key_file", "tls.server_name",
		"sentinels", "master_name", "sentinel_username", "sentinel_password",
		"sentinel_password_file" };
	static const char *const redlock_keys[] = { "nodes", "node_timeout_ms",
		"clock_drift_factor", "restart_keepout_ms", "username", "password", "password_file", "db",
		"key_prefix", "connect_timeout_ms", "command_timeout_ms", "handoff_limit",
		"lease_cache_ms", "min_replicas_ack", "replica_ack_timeout_ms", "tls.enabled",
		"tls.ca_file", "tls.cert_file", "tls.key_file", "tls.server_name" };
	const struct backend_ops *redis = backend_find("redis"), *ops;
	const struct backend_ops *redlock = backend_find("redlock");
	static char text[262144];
	char *conf_c = top_path("daemon/conf.c");
	struct scratch s;
	size_t n;
	FILE *fp;

	/* the redis backend's table is the whole of its keys ... */
	ck_assert_ptr_nonnull(redis);
	ck_assert_uint_eq(redis->nsettings, sizeof(redis_keys) / sizeof(redis_keys[0]));
	for (size_t i = 0; i < redis->nsettings; i++)
		ck_assert_str_eq(redis->settings[i].name, redis_keys[i]);
	ck_assert_ptr_nonnull(redlock);
	ck_assert_uint_eq(redlock->nsettings, sizeof(redlock_keys) / sizeof(redlock_keys[0]));
	for (size_t i = 0; i < redlock->nsettings; i++)
		ck_assert_str_eq(redlock->settings[i].name, redlock_keys[i]);
	ck_assert_uint_eq(backend_find("memory")->nsettings, 0);
	ck_assert_ptr_null(backend_find("memory")->settings);

	/* ... each key of each backend's table is one conf takes under
	 * "backend.", checked by its row ... */
	scratch_init(&s);
	for (size_t b = 0; (ops = backend_at(b)) != NULL; b++)
		for (size_t i = 0; i < ops->nsettings; i++) {
			char *yaml, *want;
			struct conf *c;

			const char *name = ops->settings[i].name, *dot = strchr(name, '.');

			/* "a.b" is written as a mapping a: holding b */
			if (dot == NULL) {
				ck_assert_int_ge(asprintf(&yaml, "backend:\n  %s: { a: 1 }\n", name),
				    0);
				ck_assert_int_ge(asprintf(&want, ":2:%zu: 'backend.%s' must be ",
				    strlen(name) + 5, name), 0);
			} else {
				ck_assert_int_ge(asprintf(&yaml, "backend:\n  %.*s:\n    %s: { a: 1 }\n",
				    (int)(dot - name), name, dot + 1), 0);
				ck_assert_int_ge(asprintf(&want, ":3:%zu: 'backend.%s' must be ",
				    strlen(dot + 1) + 7, name), 0);
			}
			c = load_text(&s, yaml, -1, -1);
			ck_assert_uint_eq(c->nerrors, 1);
			ck_assert_msg(strstr(c->errors[0], want) != NULL, "%s", c->errors[0]);
			conf_destroy(c);
			free(want);
			free(yaml);
		}
	/* ... and no other */
	expect_text_errors(&s, "backend:\n  bogus: 1\n", -1,
	    (const char *const[]){ "2:3: unknown key 'backend.bogus'", NULL });
	scratch_rm(&s);

	/* conf.c itself names no backend */
	ck_assert_ptr_nonnull(fp = fopen(conf_c, "r"));
	n = fread(text, 1, sizeof(text) - 1, fp);
	text[n] = '\0';
	fclose(fp);
	ck_assert_uint_lt(n, sizeof(text) - 1);
	ck_assert_ptr_null(strcasestr(text, "redis"));
	free(conf_c);
}
END_TEST

/* --- one run reports everything --- */

START_TEST(test_every_error_in_one_run)
{
	char *path = fixture("all-errors.yaml"), *pw = fixture("no-such-password.txt");
	const char *const file[] = {
		"2:28: duplicate listen address '127.0.0.1:7480'",
		"3:19: 'unix_socket_mode' must be an octal mode such as 0660, not '0999'",
		NULL,	/* the password file, below */
		"8:7: 'backend.db' must be between 0 and 1000000, not -1",
		"9:12: aliases are not supported (*nowhere)",
		"10:3: unknown key 'backend.bogus'",
		"12:19: anchors are not supported (&t)",
		"14:1: unknown key 'limits.max_clients' (a dot does not nest keys: write a mapping)",
		"16:16: tag '!!float' is not supported",
		"17:15: 'log.level' must be debug, info, warn or error, not 'loud'",
		"18:1: duplicate key 'log' (first at line 17)",
		"command line: bad listen address 'nope': missing port "
		    "(expected host:port, [v6addr]:port or unix:/path)",
		"command line: bad redis URL 'redis://:***@h:0': "
		    "the port must be between 1 and 65535",
		"12:19: 'locks.default_ttl_ms' (100) must not be greater than "
		    "'locks.max_ttl_ms' (50)",
		"12:19: 'locks.default_ttl_ms' (100) must be at least the redis backend's "
		    "shortest lease (6000 ms: 3 x backend.command_timeout_ms)",
	};
	size_t n = sizeof(file) / sizeof(file[0]);
	struct conf *c = conf_create();

	/* pass 1 and pass 2 of the file, the command line, then the rules */
	ck_assert_int_eq(conf_load(c, path), -1);
	ck_assert_int_eq(conf_override_listen(c, "nope"), -1);
	ck_assert_int_eq(conf_override_backend(c, "redis://:pw@h:0"), -1);
	ck_assert_int_eq(conf_finish(c), -1);
	ck_assert_uint_eq(c->nerrors, n);
	for (size_t i = 0; i < n; i++) {
		char *want;

		if (file[i] == NULL)
			ck_assert_int_ge(asprintf(&want, "%s:5:18: cannot read password file '%s': "
			    "No such file or directory", path, pw), 0);
		else if (strncmp(file[i], "command line:", 13) == 0)
			want = strdup(file[i]);
		else
			ck_assert_int_ge(asprintf(&want, "%s:%s", path, file[i]), 0);
		ck_assert_str_eq(c->errors[i], want);
		free(want);
	}
	conf_destroy(c);
	free(pw);
	free(path);
}
END_TEST

START_TEST(test_cmdline_wins_over_later_file)
{
	/* options given before a file are applied again after it: no record of
	 * who set what, the command line's entries simply come last */
	struct scratch s;
	struct conf *c = conf_create();
	const char *path;

	scratch_init(&s);
	path = scratch_text(&s, "t.yaml", "listen: [\"127.0.0.1:9000\"]\nbackend:\n  type: memory\n"
	    "  address: \"10.0.0.1:1\"\n  password: file-pw\n  db: 7\n  key_prefix: \"x:\"\n");
	ck_assert_int_eq(conf_override_listen(c, "127.0.0.1:9001"), 0);
	ck_assert_int_eq(conf_override_backend(c, "redis://:url-pw@10.9.9.9/4"), 0);
	for (int load = 0; load < 2; load++)
		ck_assert_int_eq(conf_load(c, path), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	ck_assert_uint_eq(c->nlisten, 1);
	ck_assert_str_eq(c->listen[0], "127.0.0.1:9001");
	ck_assert_str_eq(c->backend_type, "redis");
	ck_assert_str_eq(be_addr(c)->host, "10.9.9.9");
	ck_assert_int_eq(be_addr(c)->port, 6379);
	ck_assert_str_eq(be_str(c, "password"), "url-pw");
	ck_assert_int_eq(be_int(c, "db"), 4);
	ck_assert_str_eq(be_str(c, "key_prefix"), "x:");	/* not in the URL: the file's */
	conf_destroy(c);
	scratch_rm(&s);
}
END_TEST

/* --- reload --- */

/* A reload moves the reloadable settings into the config in force, in place,
 * and keeps the others; the replaced values go to the new config. */
START_TEST(test_reload_moves_reloadable_settings)
{
	struct scratch sc;
	struct conf *live, *next;
	const void *settings;

	scratch_init(&sc);
	live = load_text(&sc, "listen: [\"127.0.0.1:1\"]\nunix_socket_mode: \"0600\"\n"
	    "auth:\n  password: one\nlocks:\n  default_ttl_ms: 1000\n"
	    "limits:\n  max_locks_per_session: 5\nlog:\n  level: info\n", 0, 0);
	next = load_text(&sc, "listen: [\"127.0.0.1:2\", \"127.0.0.1:3\"]\n"
	    "unix_socket_mode: \"0644\"\nauth:\n  password: two\n"
	    "locks:\n  default_ttl_ms: 2000\nlimits:\n  max_locks_per_session: 5\n"
	    "log:\n  level: debug\n  file: /var/log/d.log\n", 0, 0);
	settings = live->backend_settings;
	ck_assert_int_eq(conf_reload(live, next), 4);
	ck_assert_str_eq(live->password, "two");
	ck_assert_int_eq(live->default_ttl_ms, 2000);
	ck_assert_int_eq(live->max_locks_per_session, 5);
	ck_assert_str_eq(live->log_level, "debug");
	ck_assert_str_eq(live->log_file, "/var/log/d.log");
	/* not reloadable: kept */
	ck_assert_int_eq(live->unix_socket_mode, 0600);
	ck_assert_uint_eq(live->nlisten, 1);
	ck_assert_str_eq(live->listen[0], "127.0.0.1:1");
	ck_assert_ptr_eq(live->backend_settings, settings);
	/* what was replaced is next's to free */
	ck_assert_str_eq(next->password, "one");
	ck_assert_ptr_null(next->log_file);
	ck_assert_uint_eq(next->nlisten, 2);
	/* a second time, nothing changes */
	ck_assert_int_eq(conf_reload(live, next), 4);
	ck_assert_str_eq(live->password, "one");
	ck_assert_int_eq(conf_reload(live, live), 0);
	conf_destroy(next);
	conf_destroy(live);
	scratch_rm(&sc);
}
END_TEST

/* The backend's settings are held by the backend: never changed live. */
START_TEST(test_reload_keeps_backend_settings)
{
	struct scratch sc;
	struct conf *live, *next;
	const void *settings;

	scratch_init(&sc);
	live = load_text(&sc, "backend:\n  type: redis\n  address: \"10.0.0.1:6379\"\n"
	    "  password: a\n", 0, 0);
	next = load_text(&sc, "backend:\n  type: redis\n  address: \"10.0.0.2:6379\"\n"
	    "  password: b\n", 0, 0);
	settings = live->backend_settings;
	ck_assert_int_eq(conf_reload(live, next), 0);
	ck_assert_ptr_eq(live->backend_settings, settings);
	ck_assert_str_eq(be_addr(live)->host, "10.0.0.1");
	ck_assert_str_eq(be_str(live, "password"), "a");
	conf_destroy(next);
	next = load_text(&sc, "backend:\n  type: memory\n", 0, 0);
	ck_assert_int_eq(conf_reload(live, next), 0);
	ck_assert_str_eq(live->backend_type, "redis");
	conf_destroy(next);
	conf_destroy(live);
	scratch_rm(&sc);
}
END_TEST

/* An error about a setting is reported where the setting was given. */
START_TEST(test_setting_error_at_its_place)
{
	struct scratch sc;
	struct conf *c;

	scratch_init(&sc);
	c = load_text(&sc, "log:\n  level: info\n  file: /x/y.log\n", 0, 0);
	ck_assert_int_eq(conf_setting_error(c, "log.file", "bad %s", "file"), -1);
	ck_assert_int_eq(conf_override_listen(c, "127.0.0.1:9"), 0);
	ck_assert_int_eq(conf_setting_error(c, "listen", "bad %d", 9), -1);
	ck_assert_uint_eq(c->nerrors, 2);
	ck_assert_msg(strstr(c->errors[0], ":3:9: bad file") != NULL, "%s", c->errors[0]);
	ck_assert_str_eq(c->errors[1], "command line: bad 9");
	conf_destroy(c);
	scratch_rm(&sc);
}
END_TEST

START_TEST(test_tls_settings)
{
	static const char *const bad[] = {
		"2:12: bad tls.listen address 'unix:/run/x.sock': a Unix socket is not supported "
		    "here (expected host:port or [v6addr]:port)",
		"2:30: bad tls.listen address 'localhost': missing port "
		    "(expected host:port or [v6addr]:port)",
		"2:41: bad tls.listen address '127.0.0.1:0': the port must be between 1 and 65535",
		"3:16: 'tls.min_version' must be TLSv1.2 or TLSv1.3, not 'TLSv1.1'",
		"4:25: 'tls.handshake_timeout_ms' must be between 100 and 3600000, not 50",
		NULL
	};
	static const char *const nokey[] = {
		"2:14: 'tls.cert_file' and 'tls.key_file' go together: set both or neither", NULL
	};
	static const char *const nocert[] = {
		"2:11: 'tls.listen' needs 'tls.cert_file' and 'tls.key_file'", NULL
	};
	static const char *const twice[] = {
		"3:11: '127.0.0.1:7480' is in both 'listen' and 'tls.listen'", NULL
	};
	struct scratch sc;
	struct conf *c;
	char *want;

	scratch_init(&sc);
	/* no listener: no TLS, an empty list is none */
	c = load_text(&sc, "tls:\n  listen: []\n  cert_file: \"\"\n", 0, 0);
	expect_tls_defaults(c);
	conf_destroy(c);
	c = load_text(&sc, "tls:\n  listen: [unix:/run/x.sock, localhost, 127.0.0.1:0]\n"
	    "  min_version: TLSv1.1\n  handshake_timeout_ms: 50\n", -1, -1);
	expect_errors(c, c->path, bad);
	conf_destroy(c);
	c = load_text(&sc, "tls:\n  cert_file: a.crt\n", 0, -1);
	expect_errors(c, c->path, nokey);
	conf_destroy(c);
	c = load_text(&sc, "tls:\n  listen: [127.0.0.1:7481]\n", 0, -1);
	expect_errors(c, c->path, nocert);
	conf_destroy(c);
	c = load_text(&sc, "listen: [127.0.0.1:7480]\ntls:\n  listen: [127.0.0.1:7480]\n"
	    "  cert_file: a.crt\n  key_file: /k/a.key\n", 0, -1);
	expect_errors(c, c->path, twice);
	conf_destroy(c);
	/* a good one: the names resolved from the file's directory */
	c = load_text(&sc, "tls:\n  listen: [\"[::1]:7481\"]\n  cert_file: a.crt\n"
	    "  key_file: /k/a.key\n", 0, 0);
	ck_assert_uint_eq(c->ntls_listen, 1);
	ck_assert_str_eq(c->tls_listen[0], "[::1]:7481");
	ck_assert_int_ge(asprintf(&want, "%s/a.crt", sc.dir), 0);
	ck_assert_str_eq(c->tls_cert_file, want);
	ck_assert_str_eq(c->tls_key_file, "/k/a.key");
	free(want);
	conf_destroy(c);
	scratch_rm(&sc);
}
END_TEST

START_TEST(test_reload_tls)
{
	struct scratch sc;
	struct conf *live, *next;

	scratch_init(&sc);
	live = load_text(&sc, "tls:\n  listen: [127.0.0.1:7481]\n  cert_file: /a.crt\n"
	    "  key_file: /a.key\n", 0, 0);
	next = load_text(&sc, "tls:\n  listen: [127.0.0.1:7482]\n  cert_file: /b.crt\n"
	    "  key_file: /b.key\n  ca_file: /ca.crt\n  handshake_timeout_ms: 500\n", 0, 0);
	/* the files and the timeout move; the listeners need a restart */
	ck_assert_int_eq(conf_reload(live, next), 4);
	ck_assert_str_eq(live->tls_cert_file, "/b.crt");
	ck_assert_str_eq(live->tls_key_file, "/b.key");
	ck_assert_str_eq(live->tls_ca_file, "/ca.crt");
	ck_assert_int_eq(live->tls_handshake_timeout_ms, 500);
	ck_assert_str_eq(live->tls_listen[0], "127.0.0.1:7481");
	conf_destroy(next);
	conf_destroy(live);
	scratch_rm(&sc);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("conf");

	suite_case(s, "good", NULL, NULL, 0, SUITE_TESTS(test_empty_file_gives_defaults,
	    test_no_file_gives_defaults, test_all_keys, test_flow_style_and_password_file,
	    test_shipped_config, test_modes, test_numbers, test_admin_settings,
	    test_protected_mode, test_unix_socket_group, test_password_file_variants));
	suite_case(s, "errors", NULL, NULL, 0, SUITE_TESTS(test_errors_all_reported,
	    test_errors_keep_good_values, test_syntax_error, test_syntax_error_after_others,
	    test_bad_utf8, test_anchors_and_aliases, test_merge_key, test_several_documents,
	    test_top_level_not_mapping, test_password_file_missing, test_password_file_empty,
	    test_password_both, test_listen_bad, test_metrics_address, test_listen_shape,
	    test_out_of_range, test_not_numbers, test_wrong_types, test_tags,
	    test_duplicate_and_dotted_keys, test_cross_field, test_cross_field_with_defaults,
	    test_unopenable));
	suite_case(s, "command line", NULL, NULL, 0,
	    SUITE_TESTS(test_override_listen_replaces_file, test_override_before_load,
	    test_override_without_file, test_override_errors));
	suite_case(s, "redis", NULL, NULL, 0, SUITE_TESTS(test_redis_all_keys,
	    test_redis_defaults, test_redis_password_file, test_redis_values,
	    test_redis_keys_with_memory, test_redis_bad_values, test_redis_bad_addresses,
	    test_redis_bad_prefixes, test_redis_bad_password_file, test_redis_password_both,
	    test_shortest_lease_rule, test_redis_url_good, test_redis_url_bad, test_redlock_url,
	    test_redlock_drift_factor, test_redis_cluster_conf, test_backend_keys_one_type,
	    test_redis_url_long_is_cut, test_redis_url_overrides_file,
	    test_redis_url_overrides_password_file, test_redis_url_then_memory));
	suite_case(s, "server lists", ls_setup, backends_teardown, 0,
	    SUITE_TESTS(test_serverlist_good, test_serverlist_bad, test_serverlist_empty,
	    test_serverlist_url, test_url_decode, test_url_userinfo, test_etcd_url_userinfo,
	    test_etcd_tls_settings));
	suite_case(s, "nodes", nl_setup, backends_teardown, 0, SUITE_TESTS(test_nodelist_good,
	    test_nodelist_flow_and_scalar, test_nodelist_bad, test_nodelist_shapes,
	    test_nodelist_empty, test_nodelist_url, test_nodelist_reload,
	    test_nodelist_no_password_shown));
	suite_case(s, "reload", NULL, NULL, 0,
	    SUITE_TESTS(test_reload_moves_reloadable_settings,
	    test_reload_keeps_backend_settings, test_setting_error_at_its_place,
	    test_reload_tls));
	suite_case(s, "tls", NULL, NULL, 0, SUITE_TESTS(test_tls_settings));
	suite_case(s, "structure", NULL, NULL, 0,
	    SUITE_TESTS(test_backend_keys_declared_by_backends, test_every_error_in_one_run,
	    test_cmdline_wins_over_later_file));
	return suite_run(s);
}
