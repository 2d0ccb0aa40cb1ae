/*
 * rsettings — the redis, redlock and redis-cluster backends as dlockd
 * registers them: their keys under "backend." (one struct rd_settings for
 * the three), their -b URLs, the rules between their settings (dlockd -t
 * checks names and TLS files too), the topology their settings choose, and
 * their operations tables, which are the policy core's (be_redis.c).
 */
#include "rd.h"
#include "be_redis_internal.h"

#include <assert.h>
#include <ctype.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "clock.h"
#include "conf.h"
#include "num.h"
#include "rnode.h"
#include "tls.h"
#include "xmalloc.h"

#define RD_DB_MAX 1000000		/* largest db (the message below says it too) */
#define RD_SET(field) offsetof(struct rd_settings, field)

/* The database of redis and redlock (a cluster has only 0). */
#define RD_DB_SETTING \
	{ .name = "db", .type = CONF_INT, .off = RD_SET(db), .min = 0, .max = RD_DB_MAX }

/* The keys under "backend." of the three backends, into struct rd_settings. */
#define RD_AUTH_SETTINGS \
	{ .name = "username", .type = CONF_STR, .off = RD_SET(username) }, \
	{ .name = "password", .type = CONF_SECRET, .off = RD_SET(password) }, \
	{ .name = "password_file", .type = CONF_SECRET_FILE, .off = RD_SET(password_file), \
	  .pair = "password" }
#define RD_COMMON_SETTINGS \
	{ .name = "key_prefix", .type = CONF_SHORTSTR, .off = RD_SET(key_prefix), .max = 64, \
	  .defstr = "dlock:" }, \
	{ .name = "connect_timeout_ms", .type = CONF_INT, .off = RD_SET(connect_timeout_ms), \
	  .min = 10, .max = 600000, .def = 2000 }, \
	{ .name = "command_timeout_ms", .type = CONF_INT, .off = RD_SET(command_timeout_ms), \
	  .min = 10, .max = 600000, .def = 2000 }, \
	{ .name = "handoff_limit", .type = CONF_INT, .off = RD_SET(handoff_limit), \
	  .min = 1, .max = 1000000, .def = 16 }, \
	{ .name = "lease_cache_ms", .type = CONF_INT, .off = RD_SET(lease_cache_ms), \
	  .min = 0, .max = 1000, .def = 0 }, \
	{ .name = "min_replicas_ack", .type = CONF_INT, .off = RD_SET(min_replicas_ack), \
	  .min = 0, .max = 100, .def = 0 }, \
	{ .name = "replica_ack_timeout_ms", .type = CONF_INT, \
	  .off = RD_SET(replica_ack_timeout_ms), .min = 1, .max = 60000, .def = 100 }, \
	{ .name = "tls.enabled", .type = CONF_BOOL, .off = RD_SET(tls), .def = 0 }, \
	{ .name = "tls.ca_file", .type = CONF_PATH, .off = RD_SET(tls_ca_file) }, \
	{ .name = "tls.cert_file", .type = CONF_PATH, .off = RD_SET(tls_cert_file) }, \
	{ .name = "tls.key_file", .type = CONF_PATH, .off = RD_SET(tls_key_file) }, \
	{ .name = "tls.server_name", .type = CONF_STR, .off = RD_SET(tls_server_name) }

/* The redis backend's keys. */
static const struct conf_setting rd_settings_table[] = {
	{ .name = "address", .type = CONF_SERVER, .off = RD_SET(address),
	  .defstr = "127.0.0.1:6379" },
	RD_AUTH_SETTINGS,
	RD_DB_SETTING,
	RD_COMMON_SETTINGS,
	{ .name = "sentinels", .type = CONF_SERVERLIST, .off = RD_SET(sentinels),
	  .count = RD_SET(nsentinels), .def = RD_SENTINEL_PORT, .optional = 1 },
	{ .name = "master_name", .type = CONF_STR, .off = RD_SET(master_name) },
	{ .name = "sentinel_username", .type = CONF_STR, .off = RD_SET(sentinel_username) },
	{ .name = "sentinel_password", .type = CONF_SECRET, .off = RD_SET(sentinel_password) },
	{ .name = "sentinel_password_file", .type = CONF_SECRET_FILE,
	  .off = RD_SET(sentinel_password_file), .pair = "sentinel_password" },
};

/* The redlock backend's keys. */
static const struct conf_setting rl_settings_table[] = {
	{ .name = "nodes", .type = CONF_NODELIST, .off = RD_SET(nodes),
	  .count = RD_SET(nnodes), .def = RD_PORT },
	{ .name = "node_timeout_ms", .type = CONF_INT, .off = RD_SET(node_timeout_ms),
	  .min = 0, .max = 600000, .def = 0 },
	{ .name = "clock_drift_factor", .type = CONF_SHORTSTR,
	  .off = RD_SET(clock_drift_factor), .max = 32, .defstr = "0.01" },
	{ .name = "restart_keepout_ms", .type = CONF_INT, .off = RD_SET(restart_keepout_ms),
	  .min = 0, .max = 86400000, .def = 0 },
	RD_AUTH_SETTINGS,
	RD_DB_SETTING,
	RD_COMMON_SETTINGS,
};

/* The redis-cluster backend's keys. */
static const struct conf_setting rc_settings_table[] = {
	/* the same type as redlock's nodes: one key, one type */
	{ .name = "nodes", .type = CONF_NODELIST, .off = RD_SET(seeds),
	  .count = RD_SET(nseeds), .def = RD_PORT },
	{ .name = "refresh_ms", .type = CONF_INT, .off = RD_SET(refresh_ms),
	  .min = 100, .max = 3600000, .def = 5000 },
	RD_AUTH_SETTINGS,
	RD_DB_SETTING,		/* 0 only: said by rd_check */
	RD_COMMON_SETTINGS,
};

/* A renewal that gets no reply is dropped after command_timeout_ms and
 * retried: a lease needs room for that, three times over (a lock is renewed
 * every third of its TTL). */
static uint64_t
rd_min_lease_ms(const void *settings)
{
	const struct rd_settings *set = settings;
	return 3 * (uint64_t)set->command_timeout_ms;
}

/* The URLs of the three backends (dlockd -h lists them); a parser tells TLS
 * (and Sentinel) by the row. */
static const struct backend_url rd_urls[] = {
	{ "redis://", "[[user]:password@]host[:port][/db]", "port 6379, db 0" },
	{ "rediss://", "[[user]:password@]host[:port][/db]", "the same with TLS" },
	{ "redis-sentinel://", "[[user]:password@]host[:port][,host[:port]...]/NAME[/db]",
	  "the master the sentinels (port 26379) call NAME" },
	{ "rediss-sentinel://", "[[user]:password@]host[:port][,host[:port]...]/NAME[/db]",
	  "the same with TLS" },
	{ NULL, NULL, NULL },
};
static const struct backend_url rl_urls[] = {
	{ "redlock://", "[[user]:password@]host[:port][,host[:port]...][/db]",
	  "independent servers, a majority deciding" },
	{ "redlocks://", "[[user]:password@]host[:port][,host[:port]...][/db]",
	  "the same with TLS" },
	{ NULL, NULL, NULL },
};
static const struct backend_url rc_urls[] = {
	{ "redis-cluster://", "[[user]:password@]host[:port][,host[:port]...]",
	  "a Redis Cluster, from these seed nodes" },
	{ "rediss-cluster://", "[[user]:password@]host[:port][,host[:port]...]",
	  "the same with TLS" },
	{ NULL, NULL, NULL },
};

/* The "host[:port][/db]" part of a redis URL into *a and *db: NULL, or why
 * not. */
static const char *
rd_url_server(const char *s, struct addr *a, long long *db)
{
	const char *slash = s + strcspn(s, "/"), *d = *slash != '\0' ? slash + 1 : slash, *why;
	char *hostport;
	int rc;
	if (strpbrk(s, "?#") != NULL)
		return "query parameters are not supported";
	if (slash == s)
		return "the host is missing";
	hostport = xmemdup(s, (size_t)(slash - s));
	rc = conf_server_parse(hostport, RD_PORT, a, &why);
	free(hostport);
	if (rc < 0)
		return why;
	*db = 0;
	if (*d == '\0')
		return NULL;
	if (!isdigit((unsigned char)*d) || (d[0] == '0' && d[1] != '\0'))
		return "the database is not a number (expected /0, /1, ...)";
	switch (num_parse(d, strlen(d), 0, RD_DB_MAX, db)) {
	case NUM_OK:
		return NULL;
	case NUM_RANGE:
		return "the database number is out of range (0..1000000)";
	default:
		return "the database is not a number (expected /0, /1, ...)";
	}
}

/* The "host[:port],host[:port].../NAME[/db]" part of a redis-sentinel URL:
 * the sentinels (as written, each checked) into *servers, the master's name
 * into *name (both allocated, the caller frees them) and *db. NULL, or why
 * not. */
static const char *
rd_url_sentinels(const char *s, char **servers, char **name, long long *db)
{
	const char *slash = strchr(s, '/'), *why, *p;
	char *list, *item, *save = NULL, *rest;
	struct addr a;
	*servers = *name = NULL;
	if (strpbrk(s, "?#") != NULL)
		return "query parameters are not supported";
	if (slash == NULL || slash[1] == '\0' || slash[1] == '/')
		return "the master's name is missing (redis-sentinel://host:port/MASTER_NAME)";
	if (slash == s)
		return "the sentinels are missing";
	list = xmemdup(s, (size_t)(slash - s));
	for (item = strtok_r(list, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save))
		if (conf_server_parse(item, RD_SENTINEL_PORT, &a, &why) < 0) {
			free(list);
			return why;
		}
	free(list);
	p = strchr(slash + 1, '/');
	rest = xasprintf("h%s", p != NULL ? p : "");	/* the db, checked as for redis:// */
	why = rd_url_server(rest, &a, db);
	free(rest);
	if (why != NULL)
		return why;
	*servers = xmemdup(s, (size_t)(slash - s));
	*name = p != NULL ? xmemdup(slash + 1, (size_t)(p - slash - 1)) : xstrdup(slash + 1);
	return NULL;
}

/* What every redis, redlock and redis-cluster URL gives: TLS on or off,
 * the user and password (none when it has none, and never the file's
 * password_file), the db (none when db < 0: a cluster's). */
static void
url_set_common(backend_url_set *set, void *arg, bool tls, const char *user, const char *pw,
    long long db)
{
	set(arg, "tls.enabled", tls ? "true" : "false");
	/* "default" without a password: no AUTH at all */
	set(arg, "username", user != NULL && pw != NULL ? user : "");
	set(arg, "password", pw != NULL ? pw : "");
	set(arg, "password_file", "");
	if (db >= 0) {
		char *text = xasprintf("%lld", db);
		set(arg, "db", text);
		free(text);
	}
}

/* Free a URL's user and password, wiping the password. */
static void
userinfo_free(char *user, char *pw)
{
	if (pw != NULL)
		explicit_bzero(pw, strlen(pw));
	free(pw);
	free(user);
}

/* -b redis://[user[:password]@]host[:port][/db], or rediss:// for TLS:
 * port 6379 and db 0 when left out; user and password may hold %XX
 * escapes. Or redis-sentinel://[user[:password]@]host[:port][,...]/NAME[/db]
 * (rediss-sentinel:// for TLS): the sentinels (port 26379 when left out)
 * and the master's name; user and password are the master's. The URL gives
 * the address (or the sentinels and master), TLS on or off, the user and
 * password (none when it has none, and never the file's password_file) and
 * the db; the file's other settings (TLS files, timeouts, the sentinels'
 * password) stay. 1 if url is not a redis URL; else 0, or -1 with *why a
 * sentence that never holds the password. */
static int
rd_parse_url(const char *url, backend_url_set *set, void *arg, const char **why)
{
	int row = backend_url_row(rd_urls, url);
	const char *s;
	char *user = NULL, *pw = NULL, *text, *servers = NULL, *name = NULL;
	bool tls = row % 2 == 1, sentinel = row >= 2;
	struct addr a;
	long long db;
	if (row < 0)
		return 1;
	s = url + strlen(rd_urls[row].scheme);
	*why = NULL;
	if (conf_url_userinfo(s, &user, &pw, &s, why) == 0 && user != NULL && *user != '\0' &&
	    strcmp(user, "default") != 0 && pw == NULL)
		*why = "a user needs a password (redis://user:password@host:port; a "
		    "password alone goes after a colon: redis://:password@host:port)";
	if (*why == NULL)
		*why = sentinel ? rd_url_sentinels(s, &servers, &name, &db) :
		    rd_url_server(s, &a, &db);
	if (*why == NULL) {
		if (!sentinel) {
			text = xasprintf(strchr(a.host, ':') != NULL ? "[%s]:%d" : "%s:%d", a.host,
			    a.port);
			set(arg, "address", text);
			free(text);
		}
		set(arg, "sentinels", sentinel ? servers : "");
		set(arg, "master_name", sentinel ? name : "");
		url_set_common(set, arg, tls, user, pw, db);
	}
	userinfo_free(user, pw);
	free(servers);
	free(name);
	return *why == NULL ? 0 : -1;
}

/* -b redlock://[user[:password]@]host[:port][,host[:port]...][/db] or
 * redlocks:// for TLS: the nodes (port 6379 when left out); or
 * redis-cluster://[user[:password]@]host[:port][,host[:port]...] or
 * rediss-cluster:// for TLS: the seed nodes, no db. As for redis://
 * otherwise. 1 if url is neither; else 0, or -1 with *why a sentence that
 * never holds the password. */
static int
nodes_parse_url(const char *url, bool cluster, backend_url_set *set, void *arg,
    const char **why)
{
	const struct backend_url *urls = cluster ? rc_urls : rl_urls;
	int row = backend_url_row(urls, url);
	const char *s, *slash;
	char *user = NULL, *pw = NULL, *list = NULL, *text;
	bool tls = row == 1;
	struct addr a;
	long long db = 0;
	if (row < 0)
		return 1;
	s = url + strlen(urls[row].scheme);
	*why = NULL;
	if (conf_url_userinfo(s, &user, &pw, &s, why) == 0 && user != NULL && *user != '\0' &&
	    strcmp(user, "default") != 0 && pw == NULL)
		*why = cluster ? "a user needs a password (redis-cluster://user:password@host:port,"
		    "...; a password alone goes after a colon: redis-cluster://:password@host:port"
		    ",...)" : "a user needs a password (redlock://user:password@host:port,...; a "
		    "password alone goes after a colon: redlock://:password@host:port,...)";
	if (*why == NULL && strpbrk(s, "?#") != NULL)
		*why = "query parameters are not supported";
	slash = s + strcspn(s, "/");
	if (*why == NULL && (slash == s || *s == ','))
		*why = cluster ? "the nodes are missing (redis-cluster://host:port,host:port,...)" :
		    "the nodes are missing (redlock://host:port,host:port,host:port)";
	if (*why == NULL) {
		char *item, *save = NULL;
		list = xmemdup(s, (size_t)(slash - s));
		text = xstrdup(list);
		for (item = strtok_r(text, ",", &save); item != NULL && *why == NULL;
		    item = strtok_r(NULL, ",", &save))
			if (conf_server_parse(item, RD_PORT, &a, why) == 0)
				*why = NULL;
		free(text);
	}
	if (*why == NULL && *slash != '\0' && cluster && slash[1] != '\0')
		*why = "a cluster has no databases but 0 (redis-cluster://host:port,... without /db)";
	else if (*why == NULL && *slash != '\0' && !cluster) {
		text = xasprintf("h%s", slash);	/* the db, checked as for redis:// */
		*why = rd_url_server(text, &a, &db);
		free(text);
	}
	if (*why == NULL) {
		set(arg, "nodes", list);
		url_set_common(set, arg, tls, user, pw, cluster ? -1 : db);
	}
	userinfo_free(user, pw);
	free(list);
	return *why == NULL ? 0 : -1;
}

/* -b redlock://... (nodes_parse_url). */
static int
rl_parse_url(const char *url, backend_url_set *set, void *arg, const char **why)
{
	return nodes_parse_url(url, false, set, arg, why);
}

/* -b redis-cluster://... (nodes_parse_url). */
static int
rc_parse_url(const char *url, backend_url_set *set, void *arg, const char **why)
{
	return nodes_parse_url(url, true, set, arg, why);
}

/* Whether the name of server (a "host:port") resolves, as the daemon will
 * look it up (getaddrinfo blocks: dlockd -t only); else an error at
 * setting. */
static void
rd_check_name(struct conf *c, const char *setting, const char *host)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	int rc = getaddrinfo(host, NULL, &hints, &ai);
	if (rc != 0) {
		conf_setting_warning(c, setting, "cannot resolve '%s': %s (the daemon starts "
		    "anyway, and resolves it again at every connect)", host, gai_strerror(rc));
		return;
	}
	freeaddrinfo(ai);
}

/* The rules between the settings; deep (dlockd -t): the names resolve and
 * the TLS files can be used. */
static void
rd_check(struct conf *c, const void *settings, int deep)
{
	const struct rd_settings *set = settings;
	if (set->nsentinels > 0 && set->master_name == NULL)
		(void)conf_setting_error(c, "backend.sentinels", "'backend.sentinels' needs "
		    "'backend.master_name': the name the sentinels know the master by");
	if (set->nsentinels == 0 && set->master_name != NULL)
		(void)conf_setting_error(c, "backend.master_name", "'backend.master_name' needs "
		    "'backend.sentinels'");
	if (set->min_replicas_ack > 0 && set->replica_ack_timeout_ms >= set->command_timeout_ms)
		(void)conf_setting_error(c, "backend.replica_ack_timeout_ms",
		    "'backend.replica_ack_timeout_ms' (%lld) must be below "
		    "'backend.command_timeout_ms' (%lld): WAIT holds the connection that long",
		    set->replica_ack_timeout_ms, set->command_timeout_ms);
	if (set->clock_drift_factor != NULL) {
		char *end;
		double f = strtod(set->clock_drift_factor, &end);
		if (end == set->clock_drift_factor || *end != '\0' || !(f >= 0 && f < 0.5))
			(void)conf_setting_error(c, "backend.clock_drift_factor",
			    "'backend.clock_drift_factor' must be a number from 0 to below 0.5 "
			    "(the share of a lease the clocks may drift by; 0.01 by default), "
			    "not '%s'", set->clock_drift_factor);
	}
	for (size_t i = 0; i < set->nseeds; i++) {
		const struct conf_node *n = &set->seeds[i];
		if (n->username != NULL || n->password != NULL || n->tls != CONF_UNSET ||
		    n->tls_ca_file != NULL || n->tls_cert_file != NULL || n->tls_key_file != NULL ||
		    n->tls_server_name != NULL) {
			(void)conf_setting_error(c, "backend.nodes", "the nodes of a redis-cluster "
			    "backend are addresses only: every node of a cluster takes the "
			    "backend's user, password and tls (node %s sets its own)", n->server);
			break;
		}
	}
	if (set->nseeds > 0 && set->db != 0)
		(void)conf_setting_error(c, "backend.db", "'backend.db' of a redis-cluster backend "
		    "must be 0: a cluster has no other database");
	if (set->nseeds > 0 && strpbrk(set->key_prefix, "{}") != NULL)
		(void)conf_setting_error(c, "backend.key_prefix", "'backend.key_prefix' of a "
		    "redis-cluster backend must not hold '{' or '}': the keys of a lock share "
		    "the hash tag that dlockd puts after it");
	if ((set->tls_cert_file == NULL) != (set->tls_key_file == NULL))
		(void)conf_setting_error(c, set->tls_cert_file != NULL ? "backend.tls.cert_file" :
		    "backend.tls.key_file", "'backend.tls.cert_file' and 'backend.tls.key_file' "
		    "go together (a client certificate and its key)");
	if (!deep || c->nerrors > 0)
		return;
	if (set->nsentinels == 0 && set->nnodes == 0 && set->nseeds == 0)
		rd_check_name(c, "backend.address", set->address.host);
	for (size_t i = 0; i < set->nseeds; i++) {
		struct addr a;
		const char *why;
		if (conf_server_parse(set->seeds[i].server, RD_PORT, &a, &why) == 0)
			rd_check_name(c, "backend.nodes", a.host);
	}
	for (size_t i = 0; i < set->nnodes; i++) {
		const struct conf_node *n = &set->nodes[i];
		struct tls_client *tls;
		struct addr a;
		const char *why;
		char msg[512];
		if (conf_server_parse(n->server, RD_PORT, &a, &why) == 0)
			rd_check_name(c, "backend.nodes", a.host);
		if (!rd_node_tls_on(set, n) || !rd_node_tls_own(n))
			continue;
		tls = tls_client_create(n->tls_ca_file != NULL ? n->tls_ca_file :
		    set->tls_ca_file, n->tls_cert_file != NULL ? n->tls_cert_file :
		    set->tls_cert_file, n->tls_key_file != NULL ? n->tls_key_file :
		    set->tls_key_file, msg, sizeof(msg));
		if (tls == NULL)
			(void)conf_setting_error(c, "backend.nodes", "TLS of node %s: %s",
			    n->server, msg);
		tls_client_unref(tls);
	}
	for (size_t i = 0; i < set->nsentinels; i++) {
		struct addr a;
		const char *why;
		if (conf_server_parse(set->sentinels[i], RD_SENTINEL_PORT, &a, &why) == 0)
			rd_check_name(c, "backend.sentinels", a.host);
	}
	if (set->tls) {
		char why[512];
		struct tls_client *tls = tls_client_create(set->tls_ca_file, set->tls_cert_file,
		    set->tls_key_file, why, sizeof(why));
		if (tls == NULL)
			(void)conf_setting_error(c, set->tls_cert_file != NULL ?
			    "backend.tls.cert_file" : "backend.tls.ca_file", "TLS: %s", why);
		tls_client_unref(tls);
	}
}

/* The topology settings c choose: a cluster's seeds, the sentinels, redlock's
 * nodes, or one server. */
static const struct rd_topo *
settings_topo(const struct rd_settings *c)
{
	if (c->nseeds > 0)
		return &rd_topo_cluster;
	if (c->nsentinels > 0)
		return &rd_topo_sentinel;
	return c->nnodes > 0 ? &rd_topo_redlock : &rd_topo_single;
}

/* backend_ops.create: the policy over the topology of be's settings. */
static int
rs_create(struct backend *be)
{
	return rd_create(be, settings_topo(be->settings));
}

/* The operations of the three backends: one policy, over the topology their
 * settings choose. */
#define RD_OPS \
	.local_leases = 0, \
	.settings_size = sizeof(struct rd_settings), \
	.min_lease_ms = rd_min_lease_ms, \
	.min_lease_rule = "3 x backend.command_timeout_ms", \
	.create = rs_create, \
	.destroy = rd_destroy, \
	.acquire = rd_acquire, \
	.release = rd_release, \
	.renew = rd_renew, \
	.transfer = rd_transfer, \
	.holders = rd_holders, \
	.force = rd_force, \
	.list = rd_list, \
	.info = rd_info, \
	.state = rd_state, \
	.pending = rd_pending, \
	.drain = rd_drain, \
	.reload = rd_reload, \
	.problem = rd_problem, \
	.check = rd_check

/* Leaders across daemons: one call's look, or redlock's quorum read of its
 * nodes' looks, numbered by the daemon (rleader.c). */
#define RD_LEADER_OPS \
	.proclaim = rd_proclaim, \
	.leader = rd_leader, \
	.watch = rd_watch

const struct backend_ops be_redis_ops = {
	.name = "redis",
	.settings = rd_settings_table,
	.nsettings = sizeof(rd_settings_table) / sizeof(rd_settings_table[0]),
	.parse_url = rd_parse_url,
	.url_form = "redis://host:port",
	.urls = rd_urls,
	RD_OPS,
	RD_LEADER_OPS,
};

/* Redlock: the same policy over several independent servers, a quorum
 * deciding each operation (rtopo_nodes.c). */
const struct backend_ops be_redlock_ops = {
	.name = "redlock",
	.settings = rl_settings_table,
	.nsettings = sizeof(rl_settings_table) / sizeof(rl_settings_table[0]),
	.parse_url = rl_parse_url,
	.url_form = "redlock://host:port,...",
	.urls = rl_urls,
	RD_OPS,
	RD_LEADER_OPS,
};

/* Redis Cluster: the policy of one server per key, on its slot's master
 * (rtopo_cluster.c). */
const struct backend_ops be_redis_cluster_ops = {
	.name = "redis-cluster",
	.settings = rc_settings_table,
	.nsettings = sizeof(rc_settings_table) / sizeof(rc_settings_table[0]),
	.parse_url = rc_parse_url,
	.url_form = "redis-cluster://host:port,...",
	.urls = rc_urls,
	RD_OPS,
	RD_LEADER_OPS,
};

#ifdef DLOCKD_TEST_HOOKS	/* test and fuzz objects only (Makefile) */
/* For the fuzz harness (be_redis_internal.h): one server's backend, nothing
 * started. */
int
be_redis_offline(struct backend *be)
{
	be->ops = &be_redis_ops;
	(void)rd_init(be, NULL, &rd_topo_single);
	return 0;
}

/* The answers the harness makes up, as the first node's: op, sent to it,
 * answered reply (NULL: the connection was lost). */
static void
answer(struct rd *r, struct rd_op *op, void *reply)
{
	op->sent_ms = clock_ms();
	op->calls[0].node = r->nodes[0];
	op->calls[0].answer = RQ_PENDING;
	op->pending = 1;
	rd_on_reply(&op->calls[0], reply, reply == NULL ? "the connection to redis was lost" :
	    NULL);
}

void
be_redis_answer(struct backend *be, int script, const struct be_lock *l, unsigned fences,
    be_cb *cb, void *arg, void *reply)
{
	struct rd *r = be->priv;
	char member[RSCRIPT_MEMBER_MAX];
	const char *none[] = { NULL };
	assert(script >= 0 && script < RS_COUNT);
	if (script == RS_RELEASE || script == RS_RENEW)
		deleg_member(r, l, member);
	else
		rscript_member(l, member);
	struct rd_op *op = rd_op_new(r, (enum rscript)script, l, member, "l", none, cb, arg);
	op->fences = fences;
	if (op->script == RS_RELEASE)
		r->releases_inflight++;
	answer(r, op, reply);
}

void
be_redis_look_answer(struct backend *be, const char *key, size_t keylen, be_leader_cb *cb,
    void *arg, void *reply)
{
	struct rd *r = be->priv;
	answer(r, rd_look_new(r, key, keylen, cb, arg), reply);
}

void
be_redis_unsolicited(struct backend *be, int sub, void *reply)
{
	struct rd *r = be->priv;
	rnode_unsolicited(r->nodes[0]->node, sub, reply);
}
#endif
