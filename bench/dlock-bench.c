/*
 * dlock-bench — the load generator of `make bench`.
 *
 * Clients, each one connection with at most one request out, lock and unlock
 * keys in a loop on one libevent loop, and the tool prints one JSON object
 * with what it measured: acquisitions per second, the wait from sending a
 * lock request to its grant (a log-linear histogram), Jain's fairness over
 * clients and over servers, its own CPU, and the CPU of the processes it was
 * asked to watch, all over a measuring window that follows a warm-up.
 *
 * Modes (what a client does):
 *   dlock        LOCK key, hold, UNLOCK key, against dlockd
 *   direct-poll  a client-side Redis lock: SET key token NX PX ttl, retried
 *                every --poll-ms while busy; unlock with EVALSHA of a
 *                compare-and-delete script
 *   direct       the same, for uncontended workloads only (a busy reply is
 *                an error)
 *   direct-etcd  dlockd's etcd recipe straight to etcd over gRPC, for
 *                uncontended workloads only: each client has a lease of its
 *                own (granted at start, kept alive); acquire is one Txn (put
 *                the key on the lease, read its range by create revision:
 *                it must come first), release one Txn (delete it). Every
 *                client's calls share one connection, through the daemon's
 *                etcd client (etcd_direct.c), as a daemon's do
 *   ping         PING after PING (any RESP server): the request/reply ceiling
 *   hold         no server: each client sleeps the hold time in a loop (the
 *                hold-time limit of one key)
 *   lockall      sets of keys (--set): LOCKALL n key... , hold, UNLOCKALL n
 *                key... (all or none; a nil answer is counted, not an error)
 *   lockseq      the same sets taken the way a client does without LOCKALL:
 *                LOCK of each key in the set's order, hold, UNLOCK of each in
 *                the reverse order
 *
 * Workloads (which key an acquisition takes):
 *   uncontended  client i always uses key i
 *   contended    every client uses key 0
 *   hot          each acquisition draws one of --keys keys from a Zipf
 *                distribution of exponent --zipf (key 0 the hottest)
 * In the set modes a set of --set keys stands for the key: uncontended,
 * client i's own keys; contended, the same keys for all; hot, distinct draws
 * in the order drawn (--zipf 0: uniform). With --wait-ms the lock requests
 * carry WAIT, and a request answered later than WAIT + --margin-ms, or not
 * at all, is counted as stuck: after the window the clients finish what
 * they started (no new set) so that every request gets its chance to be
 * answered.
 *
 * Everything is in this file but the histogram (hist.c), the reply reader
 * (reply.c) and the direct-etcd mode's requests (etcd_direct.c); addresses
 * and integers are parsed by common/.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "addr.h"
#include "etcd_direct.h"
#include "hist.h"
#include "num.h"
#include "reply.h"

#define MAX_ADDRS	16
#define MAX_WATCH	16
#define MAX_CLIENTS	10000
#define MAX_KEYS	10000000
#define MAX_SET		16		/* keys of one set (lockall, lockseq) */
#define MARGIN_MS	500		/* default --margin-ms */
#define IN_SIZE		4096		/* a client's input buffer: replies are small */
#define OUT_SIZE	1024		/* a client's output buffer: one request */
#define RETRY_MS	10		/* pause after an error reply before trying again */
#define NS_PER_MS	1000000ull
#define NS_PER_US	1000ull
#define ETCD_TIMEOUT_MS	2000		/* direct-etcd: a call fails without an
					 * answer by then (the daemon's default
					 * backend.request_timeout_ms) */
#define REVOKE_MS	2000		/* direct-etcd: the most the leases'
					 * revokes are waited for at the end */

/* Compare-and-delete: the unlock of the direct modes. */
#define UNLOCK_SCRIPT \
	"if redis.call('get', KEYS[1]) == ARGV[1] then " \
	"return redis.call('del', KEYS[1]) else return 0 end"

#define MODES(X) \
	X(MODE_DLOCK, "dlock") \
	X(MODE_DIRECT_POLL, "direct-poll") \
	X(MODE_DIRECT, "direct") \
	X(MODE_DIRECT_ETCD, "direct-etcd") \
	X(MODE_PING, "ping") \
	X(MODE_HOLD, "hold") \
	X(MODE_LOCKALL, "lockall") \
	X(MODE_LOCKSEQ, "lockseq")

#define WORKLOADS(X) \
	X(WL_UNCONTENDED, "uncontended") \
	X(WL_CONTENDED, "contended") \
	X(WL_HOT, "hot")

#define AS_ENUM(e, s) e,
#define AS_NAME(e, s) s,
enum mode { MODES(AS_ENUM) MODE_COUNT };
enum workload { WORKLOADS(AS_ENUM) WL_COUNT };
static const char *const mode_names[] = { MODES(AS_NAME) };
static const char *const workload_names[] = { WORKLOADS(AS_NAME) };

/* A process whose CPU time is read at the start and end of the window. */
struct watch {
	char name[32];		/* as given, the JSON key */
	long pid;		/* its pid */
	long long cpu0_us;	/* utime + stime at the window's start; -1 unknown */
	long long cpu1_us;	/* at its end */
};

/* What the command line asked for. */
struct opts {
	enum mode mode;			/* what a client does */
	enum workload wl;		/* which keys it takes */
	int clients;			/* connections (clients) */
	int keys;			/* keys of the hot workload */
	double zipf;			/* its Zipf exponent */
	uint64_t hold_ns;		/* how long a lock is held */
	uint64_t warmup_ms;		/* before the window */
	uint64_t window_ms;		/* the measuring window */
	uint64_t poll_ms;		/* direct-poll: the retry interval */
	uint64_t ttl_ms;		/* lease asked for; 0: dlockd's default;
					 * direct-etcd: the leases' TTL, rounded
					 * up to seconds */
	uint64_t seed;			/* of the clients' random keys */
	char prefix[128];		/* of every key */
	const char *label;		/* copied into the JSON, or NULL */
	struct addr addrs[MAX_ADDRS];	/* servers; clients go round-robin */
	int naddrs;
	struct watch watch[MAX_WATCH];	/* processes whose CPU is reported */
	int nwatch;
	bool hist;			/* print the histogram's buckets */
	int set_min, set_max;		/* set modes: keys per set (drawn between) */
	bool wait_given;		/* lock requests carry WAIT wait_ms */
	uint64_t wait_ms;		/* that WAIT */
	uint64_t margin_ms;		/* an answer later than WAIT + this: stuck */
	char **names;			/* --key-file: key n is names[n]; NULL:
					 * prefix + n */
	long nnames;			/* lines of the key file */
};

/* PH_DRAIN (set modes with WAIT): the window is over; clients finish the
 * set they are in and start no other, so that every request is answered or
 * known stuck. */
enum phase { PH_WARMUP, PH_MEASURE, PH_DRAIN, PH_DONE };

enum cstate {
	CS_SETUP,		/* SCRIPT LOAD sent (direct modes); direct-etcd:
				 * LeaseGrant sent, or waiting to send it again */
	CS_LOCKING,		/* LOCK or SET sent */
	CS_POLLING,		/* direct-poll: busy, waiting to ask again */
	CS_HOLDING,		/* granted, holding */
	CS_UNLOCKING,		/* UNLOCK or EVALSHA sent */
	CS_PINGING,		/* PING sent */
	CS_PAUSED,		/* after an error, waiting to start again */
	CS_IDLE,		/* PH_DRAIN: its last set done, starts no other */
	CS_DEAD			/* connection gone */
};

struct bench;

/* One client: one connection with at most one request out. */
struct client {
	struct bench *b;		/* the run it belongs to */
	int id;				/* 0 .. clients - 1 */
	int addr_ix;			/* the server it talks to */
	int fd;				/* its socket; -1 in hold mode or once dead */
	struct event *rd;		/* persistent read event */
	struct event *wr;		/* write event, while output is pending */
	struct event *timer;		/* hold, poll and retry timer */
	enum cstate st;			/* what it waits for */
	char in[IN_SIZE];		/* bytes read, not yet taken */
	size_t inlen;
	char out[OUT_SIZE];		/* the request being sent */
	size_t outlen, outoff;
	long key;			/* the key of the current acquisition */
	char token[40];			/* direct modes: its token */
	uint64_t seq;			/* acquisitions started, for tokens */
	uint64_t asked_ns;		/* when the first request for it left */
	uint64_t held_ns;		/* hold mode: when the hold began */
	uint64_t rng;			/* xorshift64* state */
	uint64_t ops_window;		/* acquisitions (pings) in the window */
	uint64_t ops_total;		/* since the start */
	/* direct-etcd */
	char ekey[ED_KEY_SIZE];		/* the etcd key of the acquisition */
	size_t ekeylen, epathlen;	/* its length, that of its range part */
	int64_t lease;			/* the client's lease, 0 none yet */
	bool abandon;			/* the release under way ends an acquisition
					 * that failed: pause after it */
	struct ed_call call;		/* the acquire or release out */
	struct ed_call lcall;		/* the LeaseGrant or LeaseRevoke out */
	struct ed_call kcall;		/* the LeaseKeepAlive out */
	struct event *keepalive;	/* the next LeaseKeepAlive */
	/* lockall, lockseq */
	long set[MAX_SET];		/* the keys of the current set, in order */
	int setlen;			/* how many */
	int held;			/* of them held (lockseq: set[0 .. held-1]) */
	uint64_t req_ns;		/* when the lock request out was sent */
	bool stuck;			/* it has been counted as stuck */
};

/* One run. */
struct bench {
	struct opts *o;
	struct event_base *base;
	struct event *phase_timer;	/* warm-up end, then window end */
	struct event *sigint;		/* SIGINT ends the window early */
	struct client *cl;		/* clients[o->clients] */
	int alive;			/* clients not dead */
	enum phase phase;
	uint64_t t_start, t0, t1;	/* start, window start and end (ns) */
	struct rusage ru0, ru1;		/* own CPU at the window's start and end */
	long long busy0_us, busy1_us;	/* the machine's busy CPU time, all cores */
	long long steal0_us, steal1_us;	/* time the hypervisor gave to others */
	struct hist wait;		/* waits granted in the window */
	double *zipf_cdf;		/* hot: cumulative probabilities of keys */
	char sha[41];			/* the unlock script's SHA1 */
	uint64_t attempts;		/* lock requests sent in the window */
	uint64_t errors;		/* error replies and broken connections */
	uint64_t lost;			/* direct unlocks that found the lease gone */
	struct ed *ed;			/* direct-etcd: the etcd client they share */
	uint64_t leases;		/* direct-etcd: leases granted */
	int revoking;			/* direct-etcd: revokes out at the end */
	int waiting_at_end;		/* clients still waiting for a grant at t1 */
	uint64_t longest_waiting_ns;	/* the longest wait among them so far */
	/* lockall, lockseq */
	struct hist cycle;		/* sets done in the window: from the first
					 * request to the last release answered */
	uint64_t not_granted;		/* nil answers (WAIT ran out) in the window */
	uint64_t not_granted_total;	/* since the start */
	uint64_t stuck;			/* requests unanswered after WAIT + margin */
	uint64_t longest_answer_ns;	/* the longest any lock request went
					 * unanswered (answered or not) */
	int unanswered_at_end;		/* lock requests out when the run stopped */
	int busy;			/* PH_DRAIN: clients not idle nor dead */
	uint64_t t_end;			/* when the drain ended (t1 without one) */
	char first_error[256];		/* the first of them */
};

static const char *progname = "dlock-bench";

/* ---- small helpers ---- */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Print "dlock-bench: message" and exit 1. */
static void
die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* calloc that never fails (the tool has nothing to do without memory). */
static void *
zalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (p == NULL)
		die("out of memory");
	return p;
}

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct timeval
tv_ns(uint64_t ns)
{
	struct timeval tv;

	tv.tv_sec = (time_t)(ns / 1000000000ull);
	tv.tv_usec = (suseconds_t)(ns % 1000000000ull / 1000);
	return tv;
}

static uint64_t
rng_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/* A uniform double in [0, 1). */
static double
rng_unit(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* A process's utime + stime in µs from /proc/PID/stat (clock ticks); -1 if
 * unreadable. */
static long long
proc_stat_cpu_us(long pid)
{
	char path[64], buf[1024];
	unsigned long long ut, st;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *p = strrchr(buf, ')');
	/* after the name: state (field 3) ... utime (14), stime (15) */
	if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
	    &ut, &st) != 2)
		return -1;
	long hz = sysconf(_SC_CLK_TCK);
	return (long long)((ut + st) * 1000000ull / (unsigned long long)(hz > 0 ? hz : 100));
}

/*
 * The CPU time a process has used, in µs: the sum over its threads of the
 * nanoseconds /proc/PID/task/TID/schedstat counts (threads that have ended
 * are left out), or, where the kernel has no schedstat, utime + stime from
 * /proc/PID/stat, which counts in clock ticks (10 ms). -1 if the process
 * is gone.
 */
static long long
proc_cpu_us(long pid)
{
	char path[64];
	unsigned long long sum = 0;
	int seen = 0;

	snprintf(path, sizeof(path), "/proc/%ld/task", pid);
	DIR *d = opendir(path);
	if (d == NULL)
		return -1;
	for (struct dirent *e; (e = readdir(d)) != NULL;) {
		char file[64 + sizeof(e->d_name) + 16];
		unsigned long long ns;
		if (e->d_name[0] == '.')
			continue;
		snprintf(file, sizeof(file), "%s/%s/schedstat", path, e->d_name);
		FILE *f = fopen(file, "r");
		if (f == NULL)
			continue;
		if (fscanf(f, "%llu", &ns) == 1) {
			sum += ns;
			seen++;
		}
		fclose(f);
	}
	closedir(d);
	if (seen == 0)
		return proc_stat_cpu_us(pid);
	return (long long)(sum / 1000);
}

/*
 * The CPU time all cores of the machine spent busy (user, nice, system, irq,
 * softirq) and stolen by the hypervisor, in µs, from /proc/stat; -1 if
 * unreadable.
 */
static int
machine_cpu_us(long long *busy, long long *steal)
{
	unsigned long long user, nice, sys, idle, iowait, irq, softirq, st;
	FILE *f = fopen("/proc/stat", "r");

	*busy = *steal = -1;
	if (f == NULL)
		return -1;
	int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys,
	    &idle, &iowait, &irq, &softirq, &st);
	fclose(f);
	if (n != 8)
		return -1;
	long hz = sysconf(_SC_CLK_TCK);
	unsigned long long us_per_tick = 1000000ull / (unsigned long long)(hz > 0 ? hz : 100);
	*busy = (long long)((user + nice + sys + irq + softirq) * us_per_tick);
	*steal = (long long)(st * us_per_tick);
	return 0;
}

static long long
rusage_us(const struct rusage *r)
{
	return (long long)r->ru_utime.tv_sec * 1000000 + r->ru_utime.tv_usec +
	    (long long)r->ru_stime.tv_sec * 1000000 + r->ru_stime.tv_usec;
}

/* Note an error: counted; the first one kept for the report. */
static void
note_error(struct bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
note_error(struct bench *b, const char *fmt, ...)
{
	va_list ap;

	b->errors++;
	if (b->first_error[0] != '\0')
		return;
	va_start(ap, fmt);
	vsnprintf(b->first_error, sizeof(b->first_error), fmt, ap);
	va_end(ap);
}

/* ---- requests ---- */

/* v in decimal at out (room for 20 digits), without a NUL; its length.
 * Requests are built for every acquisition: no printf on that path. */
static size_t
fmt_dec(char *out, unsigned long long v)
{
	char tmp[20];
	size_t n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	for (size_t i = 0; i < n; i++)
		out[i] = tmp[n - 1 - i];
	return n;
}

/* Append one RESP bulk string to the client's output. */
static void
put_bulk(struct client *c, const char *s, size_t len)
{
	if (c->outlen + 1 + 20 + 2 + len + 2 > OUT_SIZE)
		die("request too long (key prefix too long?)");
	c->out[c->outlen++] = '$';
	c->outlen += fmt_dec(c->out + c->outlen, len);
	memcpy(c->out + c->outlen, "\r\n", 2);
	c->outlen += 2;
	memcpy(c->out + c->outlen, s, len);
	c->outlen += len;
	memcpy(c->out + c->outlen, "\r\n", 2);
	c->outlen += 2;
}

/* Start a request of argc arguments in the client's output. */
static void
put_array(struct client *c, int argc)
{
	c->out[0] = '*';
	c->outlen = 1 + fmt_dec(c->out + 1, (unsigned long long)argc);
	memcpy(c->out + c->outlen, "\r\n", 2);
	c->outlen += 2;
	c->outoff = 0;
}

static void
put_str(struct client *c, const char *s)
{
	put_bulk(c, s, strlen(s));
}

static void
put_num(struct client *c, unsigned long long v)
{
	char num[20];
	put_bulk(c, num, fmt_dec(num, v));
}

/* Append the name of key n: line n of --key-file, or the prefix and n. */
static void
put_key_of(struct client *c, long n)
{
	const struct opts *o = c->b->o;
	char key[200];
	size_t plen = strlen(o->prefix);

	if (o->names != NULL) {
		put_str(c, o->names[n]);
		return;
	}
	if (plen + 20 > sizeof(key))
		die("key prefix too long");
	memcpy(key, o->prefix, plen);
	put_bulk(c, key, plen + fmt_dec(key + plen, (unsigned long long)n));
}

static void
put_key(struct client *c)
{
	put_key_of(c, c->key);
}

/* Whether the mode takes sets of keys. */
static bool
set_mode(const struct opts *o)
{
	return o->mode == MODE_LOCKALL || o->mode == MODE_LOCKSEQ;
}

/* Arguments of the options every lock request carries: TTL, WAIT. */
static int
lock_opts_argc(const struct opts *o)
{
	return (o->ttl_ms ? 2 : 0) + (o->wait_given ? 2 : 0);
}

static void
put_lock_opts(struct client *c)
{
	const struct opts *o = c->b->o;

	if (o->ttl_ms) {
		put_str(c, "TTL");
		put_num(c, o->ttl_ms);
	}
	if (o->wait_given) {
		put_str(c, "WAIT");
		put_num(c, o->wait_ms);
	}
}

static void client_dead(struct client *c, const char *why);

/* Write what is left of the client's output; wait for EV_WRITE if the socket
 * is full. */
static void
client_flush(struct client *c)
{
	while (c->outoff < c->outlen) {
		ssize_t n = send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL);
		if (n > 0) {
			c->outoff += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			event_add(c->wr, NULL);
			return;
		}
		client_dead(c, strerror(errno));
		return;
	}
}

/* ---- the cycle of one client ---- */

/* The key of the next acquisition. */
static long
next_key(struct client *c)
{
	const struct opts *o = c->b->o;

	switch (o->wl) {
	case WL_UNCONTENDED:
		return c->id;
	case WL_CONTENDED:
		return 0;
	case WL_HOT: {
		double u = rng_unit(&c->rng);
		long lo = 0, hi = o->keys - 1;
		while (lo < hi) {
			long mid = lo + (hi - lo) / 2;
			if (c->b->zipf_cdf[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		return lo;
	}
	case WL_COUNT:
		break;
	}
	return 0;
}

/* The keys of the next set: from set_min to set_max of them; uncontended,
 * the client's own (client i: i * set_max + j); contended, keys 0, 1, ...;
 * hot, distinct draws in the order drawn. */
static void
next_set(struct client *c)
{
	const struct opts *o = c->b->o;
	int n = o->set_min;

	if (o->set_max > o->set_min)
		n += (int)(rng_next(&c->rng) % (uint64_t)(o->set_max - o->set_min + 1));
	c->setlen = n;
	for (int i = 0; i < n; i++) {
		long k = i;
		bool again = o->wl == WL_HOT;
		if (o->wl == WL_UNCONTENDED)
			k = (long)c->id * o->set_max + i;
		while (again) {
			k = next_key(c);
			again = false;
			for (int j = 0; j < i; j++)
				again = again || c->set[j] == k;
		}
		c->set[i] = k;
	}
	c->held = 0;
}

static void on_ed_acquire(void *arg, enum ed_outcome out, int64_t value, const char *why);
static void on_ed_release(void *arg, enum ed_outcome out, int64_t value, const char *why);

/* Send the lock request for the current key (again, when polling). */
static void
send_lock(struct client *c)
{
	struct bench *b = c->b;
	const struct opts *o = b->o;

	if (o->mode == MODE_DIRECT_ETCD) {
		if (b->phase == PH_MEASURE)
			b->attempts++;
		c->st = CS_LOCKING;
		c->call.fn = on_ed_acquire;
		c->call.arg = c;
		ed_acquire(b->ed, c->ekey, c->ekeylen, c->epathlen, c->lease, &c->call);
		return;
	}
	if (o->mode == MODE_DLOCK || o->mode == MODE_LOCKSEQ) {
		put_array(c, 2 + lock_opts_argc(o));
		put_str(c, "LOCK");
		if (o->mode == MODE_LOCKSEQ)
			put_key_of(c, c->set[c->held]);
		else
			put_key(c);
		put_lock_opts(c);
	} else if (o->mode == MODE_LOCKALL) {
		put_array(c, 2 + c->setlen + lock_opts_argc(o));
		put_str(c, "LOCKALL");
		put_num(c, (unsigned long long)c->setlen);
		for (int i = 0; i < c->setlen; i++)
			put_key_of(c, c->set[i]);
		put_lock_opts(c);
	} else {
		put_array(c, 6);
		put_str(c, "SET");
		put_key(c);
		put_str(c, c->token);
		put_str(c, "NX");
		put_str(c, "PX");
		put_num(c, o->ttl_ms);
	}
	if (b->phase == PH_MEASURE)
		b->attempts++;
	c->st = CS_LOCKING;
	c->req_ns = now_ns();
	c->stuck = false;
	if (set_mode(o) && o->wait_given) {
		/* the watchdog: on_timer counts the request stuck */
		struct timeval tv = tv_ns((o->wait_ms + o->margin_ms) * NS_PER_MS);
		evtimer_add(c->timer, &tv);
	}
	client_flush(c);
}

static void
send_ping(struct client *c)
{
	put_array(c, 1);
	put_str(c, "PING");
	c->asked_ns = now_ns();
	c->st = CS_PINGING;
	client_flush(c);
}

static void client_pause(struct client *c);
static void client_idle(struct client *c);

/* Begin the next acquisition (or ping, or hold, or set). */
static void
client_start(struct client *c)
{
	const struct opts *o = c->b->o;

	if (c->b->phase == PH_DRAIN) {
		client_idle(c);
		return;
	}
	switch (o->mode) {
	case MODE_PING:
		send_ping(c);
		return;
	case MODE_HOLD: {
		struct timeval tv = tv_ns(o->hold_ns);
		c->held_ns = now_ns();
		c->st = CS_HOLDING;
		evtimer_add(c->timer, &tv);
		return;
	}
	case MODE_DIRECT:
	case MODE_DIRECT_POLL:
	case MODE_DIRECT_ETCD:
		/* 32 hex digits, as long as dlockd's tokens */
		snprintf(c->token, sizeof(c->token), "%08x%08x%016llx", (unsigned)getpid(),
		    (unsigned)c->id, (unsigned long long)c->seq);
		break;
	case MODE_DLOCK:
	case MODE_LOCKALL:
	case MODE_LOCKSEQ:
	case MODE_COUNT:
		break;
	}
	if (o->mode == MODE_DIRECT_ETCD && c->lease == 0) {
		client_pause(c);	/* the lease is being granted anew */
		return;
	}
	c->seq++;
	if (set_mode(o))
		next_set(c);
	else
		c->key = next_key(c);
	if (o->mode == MODE_DIRECT_ETCD) {
		char key[200];
		size_t plen = strlen(o->prefix);
		if (plen + 20 > sizeof(key))
			die("key prefix too long");
		memcpy(key, o->prefix, plen);
		plen += fmt_dec(key + plen, (unsigned long long)c->key);
		c->ekeylen = ed_key(c->ekey, key, plen, c->token, &c->epathlen);
		if (c->ekeylen == 0)
			die("key prefix too long");
	}
	c->asked_ns = now_ns();
	send_lock(c);
}

/* Count one acquisition (or ping, or hold) that took wait_ns. */
static void
count_op(struct client *c, uint64_t wait_ns)
{
	struct bench *b = c->b;

	c->ops_total++;
	if (b->phase == PH_MEASURE) {
		c->ops_window++;
		hist_record(&b->wait, wait_ns);
	}
}

static void
send_unlock(struct client *c)
{
	const struct opts *o = c->b->o;

	if (o->mode == MODE_DIRECT_ETCD) {
		c->st = CS_UNLOCKING;
		c->call.fn = on_ed_release;
		c->call.arg = c;
		ed_release(c->b->ed, c->ekey, c->ekeylen, &c->call);
		return;
	}
	if (o->mode == MODE_DLOCK || o->mode == MODE_LOCKSEQ) {
		put_array(c, 2);
		put_str(c, "UNLOCK");
		if (o->mode == MODE_LOCKSEQ)
			put_key_of(c, c->set[c->held - 1]);	/* the last taken first */
		else
			put_key(c);
	} else if (o->mode == MODE_LOCKALL) {
		put_array(c, 2 + c->setlen);
		put_str(c, "UNLOCKALL");
		put_num(c, (unsigned long long)c->setlen);
		for (int i = 0; i < c->setlen; i++)
			put_key_of(c, c->set[i]);
	} else {
		put_array(c, 5);
		put_str(c, "EVALSHA");
		put_str(c, c->b->sha);
		put_str(c, "1");
		put_key(c);
		put_str(c, c->token);
	}
	c->st = CS_UNLOCKING;
	client_flush(c);
}

/* The lock is granted: count it, then hold it or release it at once. */
static void
client_granted(struct client *c)
{
	const struct opts *o = c->b->o;

	count_op(c, now_ns() - c->asked_ns);
	if (o->hold_ns > 0) {
		struct timeval tv = tv_ns(o->hold_ns);
		c->st = CS_HOLDING;
		evtimer_add(c->timer, &tv);
	} else {
		send_unlock(c);
	}
}

/* After an error reply: start again a little later. */
static void
client_pause(struct client *c)
{
	struct timeval tv = tv_ns(RETRY_MS * NS_PER_MS);

	c->st = CS_PAUSED;
	evtimer_add(c->timer, &tv);
}

/* ---- lockall, lockseq: a set's answers ---- */

static void drain_end(struct bench *b);
static void describe(const struct reply *r, char *buf, size_t size);
static void client_unexpected(struct client *c, const struct reply *r, const char *what);

/* PH_DRAIN: the client's last set is done; the last one to get there ends
 * the drain. */
static void
client_idle(struct client *c)
{
	c->st = CS_IDLE;
	if (--c->b->busy == 0)
		drain_end(c->b);
}

/* The lock request out has an answer (any): stop its watchdog, and note how
 * long it went unanswered. */
static void
set_answered(struct client *c)
{
	struct bench *b = c->b;
	const struct opts *o = b->o;
	uint64_t d = now_ns() - c->req_ns;

	if (o->wait_given)
		evtimer_del(c->timer);
	if (d > b->longest_answer_ns)
		b->longest_answer_ns = d;
	if (o->wait_given && !c->stuck && d > (o->wait_ms + o->margin_ms) * NS_PER_MS) {
		c->stuck = true;	/* answered, but late */
		b->stuck++;
	}
}

/* The set was not had (a nil answer, or an error): lockseq releases what it
 * took, then the client starts again after a pause. */
static void
set_abandon(struct client *c)
{
	if (c->b->o->mode == MODE_LOCKSEQ && c->held > 0) {
		c->abandon = true;
		send_unlock(c);
	} else {
		client_pause(c);
	}
}

/* An answer to a set's lock request (LOCKALL, or one of lockseq's LOCKs). */
static void
set_lock_reply(struct client *c, const struct reply *r)
{
	struct bench *b = c->b;
	const struct opts *o = b->o;

	set_answered(c);
	if (o->mode == MODE_LOCKALL && r->kind == REPLY_ARRAY && r->integer == c->setlen) {
		c->held = c->setlen;
		client_granted(c);
	} else if (o->mode == MODE_LOCKSEQ && r->kind == REPLY_ARRAY && r->integer == 3) {
		if (++c->held < c->setlen)
			send_lock(c);
		else
			client_granted(c);
	} else if (r->kind == REPLY_NULL) {
		/* WAIT ran out: not an error, and a new set begins at once */
		b->not_granted_total++;
		if (b->phase == PH_MEASURE)
			b->not_granted++;
		if (o->mode == MODE_LOCKSEQ && c->held > 0)
			set_abandon(c);
		else
			client_start(c);
	} else {
		char d[220];
		describe(r, d, sizeof(d));
		note_error(b, "%s got %s", o->mode == MODE_LOCKALL ? "LOCKALL" : "LOCK", d);
		set_abandon(c);
	}
}

/* An answer to a set's release (UNLOCKALL, or one of lockseq's UNLOCKs). */
static void
set_unlock_reply(struct client *c, const struct reply *r)
{
	struct bench *b = c->b;
	bool all = b->o->mode == MODE_LOCKALL;

	if (all ? r->kind != REPLY_ARRAY || r->integer != c->setlen : r->kind != REPLY_INTEGER) {
		client_unexpected(c, r, all ? "UNLOCKALL" : "UNLOCK");
		return;
	}
	c->held = all ? 0 : c->held - 1;
	if (c->held > 0) {
		send_unlock(c);
		return;
	}
	if (c->abandon) {
		c->abandon = false;
		client_pause(c);
		return;
	}
	if (b->phase == PH_MEASURE)
		hist_record(&b->cycle, now_ns() - c->asked_ns);
	client_start(c);
}

/* ---- direct-etcd: the outcomes of the calls ---- */

/* The answer to an acquire's Txn. */
static void
on_ed_acquire(void *arg, enum ed_outcome out, int64_t value, const char *why)
{
	struct client *c = arg;
	struct bench *b = c->b;

	if (b->phase == PH_DONE)
		return;		/* the run is over: the client stops */
	if (out == ED_OK) {
		client_granted(c);
		return;
	}
	if (out == ED_BEHIND)
		note_error(b, "acquire Txn: %lld keys before the client's own (direct-etcd "
		    "expects no contention)", (long long)value);
	else
		note_error(b, "acquire Txn: %s", why != NULL ? why : "failed");
	/* whatever was put goes, then the client starts again a little later */
	c->abandon = true;
	send_unlock(c);
}

/* The answer to a release's Txn. */
static void
on_ed_release(void *arg, enum ed_outcome out, int64_t value, const char *why)
{
	struct client *c = arg;
	struct bench *b = c->b;
	(void)value;

	if (b->phase == PH_DONE)
		return;
	if (out == ED_FAILED) {
		/* the key may still be there, ahead of the next one: delete it
		 * again a little later */
		struct timeval tv = tv_ns(RETRY_MS * NS_PER_MS);
		note_error(b, "release Txn: %s", why != NULL ? why : "failed");
		c->abandon = true;
		c->st = CS_HOLDING;
		evtimer_add(c->timer, &tv);
		return;
	}
	if (out == ED_GONE && !c->abandon)
		b->lost++;
	if (c->abandon) {
		c->abandon = false;
		client_pause(c);
		return;
	}
	client_start(c);
}

static void ed_send_grant(struct client *c);
static void on_ed_keepalive(void *arg, enum ed_outcome out, int64_t value, const char *why);

/* Time to keep the client's lease alive. */
static void
on_keepalive_timer(evutil_socket_t fd, short what, void *arg)
{
	struct client *c = arg;
	(void)fd;
	(void)what;

	if (c->b->phase == PH_DONE)
		return;
	if (c->lease == 0) {
		ed_send_grant(c);
		return;
	}
	c->kcall.fn = on_ed_keepalive;
	c->kcall.arg = c;
	ed_keepalive(c->b->ed, c->lease, &c->kcall);
}

/* The next keepalive of the client's lease in ms. */
static void
ed_keepalive_in(struct client *c, uint64_t ms)
{
	struct timeval tv = tv_ns(ms * NS_PER_MS);
	evtimer_add(c->keepalive, &tv);
}

/* The lease TTL asked for, in seconds. */
static int64_t
ed_ttl_s(const struct opts *o)
{
	return (int64_t)((o->ttl_ms + 999) / 1000);
}

/* The answer to a LeaseKeepAlive: the next one a third of the TTL later; a
 * lease etcd has forgotten is granted anew. */
static void
on_ed_keepalive(void *arg, enum ed_outcome out, int64_t value, const char *why)
{
	struct client *c = arg;
	struct bench *b = c->b;
	(void)value;

	if (b->phase == PH_DONE)
		return;
	if (out == ED_OK) {
		ed_keepalive_in(c, (uint64_t)ed_ttl_s(b->o) * 1000 / 3);
		return;
	}
	note_error(b, "LeaseKeepAlive: %s", why != NULL ? why : "failed");
	if (out == ED_GONE) {
		c->lease = 0;	/* acquires fail until the new lease is there */
		ed_send_grant(c);
	} else {
		ed_keepalive_in(c, RETRY_MS * 10);
	}
}

/* The answer to the client's LeaseGrant: its acquisitions begin (once). */
static void
on_ed_grant(void *arg, enum ed_outcome out, int64_t value, const char *why)
{
	struct client *c = arg;
	struct bench *b = c->b;

	if (b->phase == PH_DONE)
		return;
	if (out != ED_OK) {
		struct timeval tv = tv_ns(RETRY_MS * NS_PER_MS);
		if (b->leases == 0)
			die("LeaseGrant to etcd at %s failed: %s", b->o->addrs[0].text,
			    why != NULL ? why : "no answer");
		note_error(b, "LeaseGrant: %s", why != NULL ? why : "failed");
		if (c->st == CS_SETUP)
			evtimer_add(c->timer, &tv);	/* on_timer asks again */
		else
			ed_keepalive_in(c, RETRY_MS);	/* the keepalive finds no lease */
		return;
	}
	b->leases++;
	c->lease = value;
	ed_keepalive_in(c, (uint64_t)ed_ttl_s(b->o) * 1000 / 3);
	if (c->st == CS_SETUP)
		client_start(c);
}

/* Ask etcd for the client's lease. */
static void
ed_send_grant(struct client *c)
{
	c->lcall.fn = on_ed_grant;
	c->lcall.arg = c;
	ed_grant(c->b->ed, ed_ttl_s(c->b->o), &c->lcall);
}

/* The answer to a LeaseRevoke at the end: the last one ends the loop. */
static void
on_ed_revoke(void *arg, enum ed_outcome out, int64_t value, const char *why)
{
	struct client *c = arg;
	(void)out;
	(void)value;
	(void)why;

	c->lease = 0;
	if (--c->b->revoking == 0)
		event_base_loopbreak(c->b->base);
}

static void
describe(const struct reply *r, char *buf, size_t size)
{
	switch (r->kind) {
	case REPLY_STATUS:
	case REPLY_ERROR:
	case REPLY_BULK:
		snprintf(buf, size, "%c%.*s", r->kind == REPLY_STATUS ? '+' :
		    r->kind == REPLY_ERROR ? '-' : '$', (int)(r->len > 200 ? 200 : r->len), r->str);
		break;
	case REPLY_INTEGER:
		snprintf(buf, size, ":%lld", r->integer);
		break;
	case REPLY_NULL:
		snprintf(buf, size, "null");
		break;
	case REPLY_ARRAY:
		snprintf(buf, size, "an array of %lld", r->integer);
		break;
	}
}

/* An unexpected reply in state st: counted, and the client starts again. */
static void
client_unexpected(struct client *c, const struct reply *r, const char *what)
{
	char d[220];

	describe(r, d, sizeof(d));
	note_error(c->b, "%s got %s", what, d);
	client_pause(c);
}

/* Act on one reply. */
static void
client_reply(struct client *c, const struct reply *r)
{
	struct bench *b = c->b;
	const struct opts *o = b->o;

	switch (c->st) {
	case CS_SETUP:
		if (r->kind != REPLY_BULK || r->len != 40) {
			char d[220];
			describe(r, d, sizeof(d));
			die("SCRIPT LOAD got %s", d);
		}
		memcpy(b->sha, r->str, 40);
		b->sha[40] = '\0';
		client_start(c);
		return;
	case CS_LOCKING:
		if (set_mode(o)) {
			set_lock_reply(c, r);
			return;
		}
		if (o->mode == MODE_DLOCK) {
			if (r->kind == REPLY_ARRAY && r->integer == 3)
				client_granted(c);
			else
				client_unexpected(c, r, "LOCK");
			return;
		}
		if (r->kind == REPLY_STATUS && r->len == 2 && memcmp(r->str, "OK", 2) == 0) {
			client_granted(c);
		} else if (r->kind == REPLY_NULL) {
			struct timeval tv = tv_ns(o->poll_ms * NS_PER_MS);
			if (o->mode == MODE_DIRECT)
				note_error(b, "SET NX found the key busy (direct mode expects no "
				    "contention)");
			c->st = CS_POLLING;
			evtimer_add(c->timer, &tv);
		} else {
			client_unexpected(c, r, "SET");
		}
		return;
	case CS_UNLOCKING:
		if (set_mode(o)) {
			set_unlock_reply(c, r);
			return;
		}
		if (r->kind != REPLY_INTEGER) {
			client_unexpected(c, r, o->mode == MODE_DLOCK ? "UNLOCK" : "EVALSHA");
			return;
		}
		if (o->mode != MODE_DLOCK && r->integer != 1)
			b->lost++;
		client_start(c);
		return;
	case CS_PINGING:
		if (r->kind == REPLY_STATUS || r->kind == REPLY_BULK) {
			count_op(c, now_ns() - c->asked_ns);
			client_start(c);
		} else {
			client_unexpected(c, r, "PING");
		}
		return;
	case CS_POLLING:
	case CS_HOLDING:
	case CS_PAUSED:
	case CS_IDLE:
	case CS_DEAD: {
		char d[220];
		describe(r, d, sizeof(d));
		note_error(b, "a reply nobody asked for: %s", d);
		return;
	}
	}
}

/* The connection is gone (or unusable): the client stops for good. */
static void
client_dead(struct client *c, const char *why)
{
	if (c->st == CS_DEAD)
		return;
	if (c->b->phase != PH_DONE)
		note_error(c->b, "client %d: connection to %s lost: %s", c->id,
		    c->b->o->addrs[c->addr_ix].text, why);
	bool was_busy = c->st != CS_IDLE;
	c->st = CS_DEAD;
	event_del(c->rd);
	event_del(c->wr);
	event_del(c->timer);
	close(c->fd);
	c->fd = -1;
	if (c->b->phase == PH_DRAIN && was_busy && --c->b->busy == 0)
		drain_end(c->b);
	if (--c->b->alive == 0)
		event_base_loopbreak(c->b->base);
}

static void
on_read(evutil_socket_t fd, short what, void *arg)
{
	struct client *c = arg;
	(void)what;

	ssize_t n = recv(fd, c->in + c->inlen, IN_SIZE - c->inlen, 0);
	if (n == 0) {
		client_dead(c, "closed by the server");
		return;
	}
	if (n < 0) {
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			client_dead(c, strerror(errno));
		return;
	}
	c->inlen += (size_t)n;
	size_t off = 0;
	while (off < c->inlen && c->st != CS_DEAD) {
		struct reply r;
		ssize_t got = reply_scan(c->in + off, c->inlen - off, &r);
		if (got < 0) {
			client_dead(c, "the server sent something that is not RESP");
			return;
		}
		if (got == 0)
			break;
		off += (size_t)got;
		client_reply(c, &r);
	}
	if (c->st == CS_DEAD)
		return;
	memmove(c->in, c->in + off, c->inlen - off);
	c->inlen -= off;
	if (c->inlen == IN_SIZE)
		client_dead(c, "a reply larger than the input buffer");
}

static void
on_write(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	client_flush(arg);
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
	struct client *c = arg;
	(void)fd;
	(void)what;

	if (c->b->phase == PH_DONE)
		return;		/* the run is over (direct-etcd revokes its leases) */
	switch (c->st) {
	case CS_HOLDING:
		if (c->b->o->mode == MODE_HOLD) {
			count_op(c, now_ns() - c->held_ns);
			client_start(c);
		} else {
			send_unlock(c);
		}
		return;
	case CS_POLLING:
		send_lock(c);
		return;
	case CS_PAUSED:
		client_start(c);
		return;
	case CS_SETUP:
		if (c->b->o->mode == MODE_DIRECT_ETCD)
			ed_send_grant(c);	/* the grant failed: ask again */
		return;
	case CS_LOCKING:
		/* the watchdog of a set's request: WAIT + margin and no answer */
		if (set_mode(c->b->o) && !c->stuck) {
			c->stuck = true;
			c->b->stuck++;
		}
		return;
	case CS_UNLOCKING:
	case CS_PINGING:
	case CS_IDLE:
	case CS_DEAD:
		return;
	}
}

/* ---- the run ---- */

static void
read_watch(struct opts *o, bool end)
{
	for (int i = 0; i < o->nwatch; i++) {
		long long v = proc_cpu_us(o->watch[i].pid);
		if (end)
			o->watch[i].cpu1_us = v;
		else
			o->watch[i].cpu0_us = v;
	}
}

/* Warm-up over: the window starts; window over: the run ends. */
static void
on_phase(evutil_socket_t fd, short what, void *arg)
{
	struct bench *b = arg;
	(void)fd;
	(void)what;

	if (b->phase == PH_WARMUP) {
		b->phase = PH_MEASURE;
		read_watch(b->o, false);
		machine_cpu_us(&b->busy0_us, &b->steal0_us);
		getrusage(RUSAGE_SELF, &b->ru0);
		b->t0 = now_ns();
		struct timeval tv = tv_ns(b->o->window_ms * NS_PER_MS);
		evtimer_add(b->phase_timer, &tv);
		return;
	}
	if (b->phase == PH_MEASURE) {
		b->t1 = now_ns();
		getrusage(RUSAGE_SELF, &b->ru1);
		machine_cpu_us(&b->busy1_us, &b->steal1_us);
		read_watch(b->o, true);
		/* waits the window cut short: not in the histogram, reported apart */
		for (int i = 0; i < b->o->clients; i++) {
			const struct client *c = &b->cl[i];
			if (c->st != CS_LOCKING && c->st != CS_POLLING)
				continue;
			b->waiting_at_end++;
			if (b->t1 - c->asked_ns > b->longest_waiting_ns)
				b->longest_waiting_ns = b->t1 - c->asked_ns;
		}
		if (set_mode(b->o) && b->o->wait_given) {
			/* the clients finish their sets; the drain ends when the
			 * last is done, or when the longest a set may take has
			 * passed */
			uint64_t ms = (uint64_t)(b->o->mode == MODE_LOCKSEQ ? b->o->set_max : 1) *
			    b->o->wait_ms + 2 * b->o->margin_ms;
			struct timeval tv = tv_ns(ms * NS_PER_MS);
			b->phase = PH_DRAIN;
			b->busy = 0;
			for (int i = 0; i < b->o->clients; i++)
				b->busy += b->cl[i].st != CS_DEAD;
			if (b->busy == 0) {
				drain_end(b);
				return;
			}
			evtimer_add(b->phase_timer, &tv);
			return;
		}
		drain_end(b);
		return;
	}
	if (b->phase == PH_DRAIN)
		drain_end(b);
}

/* The run stops: the lock requests still out count as unanswered; after a
 * drain (which waits for them longer than WAIT + margin) as stuck too, and
 * so do the releases still out. */
static void
drain_end(struct bench *b)
{
	const struct opts *o = b->o;
	bool drained = b->phase == PH_DRAIN;

	b->t_end = now_ns();
	for (int i = 0; i < o->clients; i++) {
		struct client *c = &b->cl[i];
		uint64_t d = b->t_end - c->req_ns;
		if (!set_mode(o))
			break;
		if (c->st == CS_UNLOCKING && drained && o->wait_given) {
			/* a release unanswered all the drain long: stuck too */
			b->unanswered_at_end++;
			b->stuck++;
			continue;
		}
		if (c->st != CS_LOCKING)
			continue;
		b->unanswered_at_end++;
		if (d > b->longest_answer_ns)
			b->longest_answer_ns = d;
		if (o->wait_given && !c->stuck &&
		    (drained || d > (o->wait_ms + o->margin_ms) * NS_PER_MS)) {
			c->stuck = true;
			b->stuck++;
		}
	}
	evtimer_del(b->phase_timer);
	b->phase = PH_DONE;
	event_base_loopbreak(b->base);
}

static void
on_sigint(evutil_socket_t fd, short what, void *arg)
{
	struct bench *b = arg;
	(void)fd;
	(void)what;

	/* from the warm-up: an empty window; a drain is cut short */
	while (b->phase != PH_DONE)
		on_phase(-1, 0, b);
}

/* A connected, non-blocking socket to a; exits on failure. */
static int
connect_to(const struct addr *a)
{
	int fd = -1;

	if (a->kind == ADDR_UNIX) {
		struct sockaddr_un sun;
		memset(&sun, 0, sizeof(sun));
		sun.sun_family = AF_UNIX;
		snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", a->path);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0)
			die("cannot connect to %s: %s", a->text, strerror(errno));
	} else {
		struct addrinfo hints, *res, *ai;
		char port[16];
		int err = 0;

		memset(&hints, 0, sizeof(hints));
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		snprintf(port, sizeof(port), "%d", a->port);
		int rc = getaddrinfo(a->host, port, &hints, &res);
		if (rc != 0)
			die("cannot resolve %s: %s", a->text, gai_strerror(rc));
		for (ai = res; ai != NULL; ai = ai->ai_next) {
			fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
			if (fd < 0) {
				err = errno;
				continue;
			}
			if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
				break;
			err = errno;
			close(fd);
			fd = -1;
		}
		freeaddrinfo(res);
		if (fd < 0)
			die("cannot connect to %s: %s", a->text, strerror(err));
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
		die("fcntl: %s", strerror(errno));
	return fd;
}

/* Connect every client and send its first request. */
static void
bench_setup(struct bench *b)
{
	const struct opts *o = b->o;

	b->cl = zalloc((size_t)o->clients, sizeof(*b->cl));
	b->alive = o->clients;
	if (o->mode == MODE_DIRECT_ETCD) {
		b->ed = ed_create(b->base, o->addrs[0].text, ETCD_TIMEOUT_MS);
		if (b->ed == NULL)
			die("cannot make a client of etcd at %s", o->addrs[0].text);
	}
	for (int i = 0; i < o->clients; i++) {
		struct client *c = &b->cl[i];
		c->b = b;
		c->id = i;
		c->fd = -1;
		c->rng = (o->seed + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)i + 1) * 0xBF58476D1CE4E5B9ull;
		if (c->rng == 0)
			c->rng = 1;
		c->timer = evtimer_new(b->base, on_timer, c);
		if (o->mode == MODE_HOLD)
			continue;
		if (o->mode == MODE_DIRECT_ETCD) {
			/* no socket of its own: its calls go through b->ed */
			c->keepalive = evtimer_new(b->base, on_keepalive_timer, c);
			if (c->timer == NULL || c->keepalive == NULL)
				die("cannot create the events of client %d", i);
			continue;
		}
		c->addr_ix = i % o->naddrs;
		c->fd = connect_to(&o->addrs[c->addr_ix]);
		c->rd = event_new(b->base, c->fd, EV_READ | EV_PERSIST, on_read, c);
		c->wr = event_new(b->base, c->fd, EV_WRITE, on_write, c);
		if (c->timer == NULL || c->rd == NULL || c->wr == NULL || event_add(c->rd, NULL) < 0)
			die("cannot create the events of client %d", i);
	}
	b->t_start = now_ns();
	for (int i = 0; i < o->clients; i++) {
		struct client *c = &b->cl[i];
		if (o->mode == MODE_DIRECT || o->mode == MODE_DIRECT_POLL) {
			put_array(c, 3);
			put_str(c, "SCRIPT");
			put_str(c, "LOAD");
			put_str(c, UNLOCK_SCRIPT);
			c->st = CS_SETUP;
			client_flush(c);
		} else if (o->mode == MODE_DIRECT_ETCD) {
			c->st = CS_SETUP;
			ed_send_grant(c);
		} else {
			client_start(c);
		}
	}
}

/* direct-etcd, after the report: revoke the clients' leases (their keys go
 * with them), waiting at most REVOKE_MS for etcd's answers, and free the
 * etcd client. */
static void
ed_finish(struct bench *b)
{
	struct timeval tv = tv_ns(REVOKE_MS * NS_PER_MS);

	for (int i = 0; i < b->o->clients; i++) {
		struct client *c = &b->cl[i];
		evtimer_del(c->keepalive);
		if (c->lease == 0)
			continue;
		c->lcall.fn = on_ed_revoke;
		c->lcall.arg = c;
		ed_revoke(b->ed, c->lease, &c->lcall);
		b->revoking++;
	}
	if (b->revoking > 0) {
		event_base_loopexit(b->base, &tv);
		event_base_dispatch(b->base);
	}
	ed_destroy(b->ed);
	b->ed = NULL;
}

/* The Zipf distribution of the hot workload, as cumulative probabilities. */
static double *
zipf_cdf(int keys, double s)
{
	double *cdf = zalloc((size_t)keys, sizeof(double));
	double sum = 0;

	for (int i = 0; i < keys; i++) {
		sum += 1.0 / pow((double)(i + 1), s);
		cdf[i] = sum;
	}
	for (int i = 0; i < keys; i++)
		cdf[i] /= sum;
	cdf[keys - 1] = 1.0;
	return cdf;
}

/* ---- the report ---- */

static void
json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

/* Jain's fairness index of n counts: (Σx)² / (n Σx²); -1 if all are 0. */
static double
jain(const uint64_t *x, int n)
{
	double s = 0, s2 = 0;

	for (int i = 0; i < n; i++) {
		s += (double)x[i];
		s2 += (double)x[i] * (double)x[i];
	}
	return s2 > 0 ? s * s / ((double)n * s2) : -1;
}

static void
print_jain(const char *name, double j)
{
	if (j < 0)
		printf(",\"%s\":null", name);
	else
		printf(",\"%s\":%.4f", name, j);
}

static double
us(uint64_t ns)
{
	return (double)ns / 1000.0;
}

/* Print the run as one JSON object on one line. */
static void
bench_report(const struct bench *b)
{
	const struct opts *o = b->o;
	double window = (double)(b->t1 - b->t0) / 1e9;
	uint64_t ops = 0, total = 0;
	uint64_t *per_client = zalloc((size_t)o->clients, sizeof(uint64_t));
	uint64_t per_addr[MAX_ADDRS] = { 0 };

	for (int i = 0; i < o->clients; i++) {
		per_client[i] = b->cl[i].ops_window;
		per_addr[b->cl[i].addr_ix] += b->cl[i].ops_window;
		ops += b->cl[i].ops_window;
		total += b->cl[i].ops_total;
	}
	printf("{\"tool\":\"dlock-bench\",\"mode\":\"%s\",\"workload\":\"%s\"",
	    mode_names[o->mode], workload_names[o->wl]);
	if (o->label != NULL) {
		printf(",\"label\":");
		json_str(o->label);
	}
	int per = set_mode(o) ? o->set_max : 1;
	printf(",\"clients\":%d,\"keys\":%d,\"zipf\":%.3f,\"hold_us\":%.1f", o->clients,
	    o->mode == MODE_PING || o->mode == MODE_HOLD ? 0 : o->wl == WL_HOT ? o->keys :
	    o->wl == WL_CONTENDED ? per : o->clients * per,
	    o->wl == WL_HOT ? o->zipf : 0.0, us(o->hold_ns));
	if (o->mode == MODE_DIRECT || o->mode == MODE_DIRECT_POLL)
		printf(",\"poll_ms\":%llu", (unsigned long long)o->poll_ms);
	printf(",\"addrs\":[");
	for (int i = 0; o->mode != MODE_HOLD && i < o->naddrs; i++) {
		printf(i ? "," : "");
		json_str(o->addrs[i].text);
	}
	printf("],\"warmup_s\":%.3f,\"window_s\":%.4f", (double)o->warmup_ms / 1000.0, window);
	printf(",\"unit\":\"%s\"", o->mode == MODE_PING ? "ping" : o->mode == MODE_HOLD ?
	    "hold" : set_mode(o) ? "set" : "acquisition");
	printf(",\"ops\":%llu,\"ops_total\":%llu,\"rate\":%.1f", (unsigned long long)ops,
	    (unsigned long long)total, window > 0 ? (double)ops / window : 0.0);
	if (o->mode != MODE_PING && o->mode != MODE_HOLD)
		printf(",\"lock_requests\":%llu", (unsigned long long)b->attempts);
	printf(",\"errors\":%llu,\"lost\":%llu,\"first_error\":", (unsigned long long)b->errors,
	    (unsigned long long)b->lost);
	json_str(b->first_error);
	printf(",\"wait_us\":{\"n\":%llu,\"mean\":%.1f,\"min\":%.1f,\"p50\":%.1f,\"p90\":%.1f,"
	    "\"p99\":%.1f,\"max\":%.1f}", (unsigned long long)b->wait.n,
	    b->wait.n ? us(b->wait.sum) / (double)b->wait.n : 0.0, us(b->wait.min),
	    us(hist_quantile(&b->wait, 0.5)), us(hist_quantile(&b->wait, 0.9)),
	    us(hist_quantile(&b->wait, 0.99)), us(b->wait.max));
	int starved = 0;
	for (int i = 0; i < o->clients; i++)
		starved += per_client[i] == 0;
	printf(",\"waiting_at_end\":%d,\"longest_waiting_us\":%.1f,\"starved_clients\":%d",
	    b->waiting_at_end, us(b->longest_waiting_ns), starved);
	if (set_mode(o)) {
		printf(",\"set_min\":%d,\"set_max\":%d", o->set_min, o->set_max);
		if (o->wait_given)
			printf(",\"wait_ms\":%llu", (unsigned long long)o->wait_ms);
		else
			printf(",\"wait_ms\":null");
		printf(",\"margin_ms\":%llu,\"not_granted\":%llu,\"not_granted_total\":%llu,"
		    "\"stuck\":%llu,\"longest_unanswered_us\":%.1f,\"unanswered_at_end\":%d,"
		    "\"drain_s\":%.3f", (unsigned long long)o->margin_ms,
		    (unsigned long long)b->not_granted, (unsigned long long)b->not_granted_total,
		    (unsigned long long)b->stuck, us(b->longest_answer_ns), b->unanswered_at_end,
		    (double)(b->t_end - b->t1) / 1e9);
		printf(",\"cycle_us\":{\"n\":%llu,\"p50\":%.1f,\"p99\":%.1f,\"max\":%.1f}",
		    (unsigned long long)b->cycle.n, us(hist_quantile(&b->cycle, 0.5)),
		    us(hist_quantile(&b->cycle, 0.99)), us(b->cycle.max));
	}
	print_jain("jain_clients", jain(per_client, o->clients));
	printf(",\"per_client\":[");
	for (int i = 0; i < o->clients; i++)
		printf("%s%llu", i ? "," : "", (unsigned long long)per_client[i]);
	printf("]");
	if (o->mode != MODE_HOLD) {
		print_jain("jain_addrs", jain(per_addr, o->naddrs));
		printf(",\"per_addr\":[");
		for (int i = 0; i < o->naddrs; i++)
			printf("%s%llu", i ? "," : "", (unsigned long long)per_addr[i]);
		printf("]");
	}
	long long tool_us = rusage_us(&b->ru1) - rusage_us(&b->ru0);
	printf(",\"tool_cpu_us\":%lld,\"tool_cpu_pct\":%.1f", tool_us,
	    window > 0 ? (double)tool_us / 1e4 / window : 0.0);
	if (b->busy0_us >= 0 && b->busy1_us >= 0)
		printf(",\"machine_busy_us\":%lld,\"machine_steal_us\":%lld",
		    b->busy1_us - b->busy0_us, b->steal1_us - b->steal0_us);
	else
		printf(",\"machine_busy_us\":null,\"machine_steal_us\":null");
	printf(",\"cpu_us\":{");
	for (int i = 0; i < o->nwatch; i++) {
		const struct watch *w = &o->watch[i];
		printf("%s", i ? "," : "");
		json_str(w->name);
		if (w->cpu0_us < 0 || w->cpu1_us < 0)
			printf(":null");
		else
			printf(":%lld", w->cpu1_us - w->cpu0_us);
	}
	printf("}");
	if (o->hist) {
		printf(",\"hist\":[");
		bool first = true;
		for (unsigned i = 0; i < HIST_BUCKETS; i++) {
			uint64_t lo, hi;
			if (b->wait.count[i] == 0)
				continue;
			hist_bounds(i, &lo, &hi);
			printf("%s[%.3f,%.3f,%llu]", first ? "" : ",", us(lo), us(hi + 1),
			    (unsigned long long)b->wait.count[i]);
			first = false;
		}
		printf("]");
	}
	printf("}\n");
	fflush(stdout);
	free(per_client);
}

/* ---- the command line ---- */

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: %s [options]\n"
	    "\n"
	    "Lock and unlock in a loop from many connections on one event loop, and print\n"
	    "one JSON object with acquisitions/s, wait times, fairness and CPU.\n"
	    "\n"
	    "  -m, --mode MODE        dlock (default), direct-poll, direct, direct-etcd, ping,\n"
	    "                         hold, lockall or lockseq\n"
	    "  -w, --workload W       uncontended (default), contended or hot\n"
	    "  -a, --addr ADDR        server, host:port or unix:/path (default 127.0.0.1:7480);\n"
	    "                         repeat it and the clients go round-robin over them\n"
	    "                         (direct-etcd: one, etcd's host:port, default\n"
	    "                         127.0.0.1:2379)\n"
	    "  -c, --clients N        connections, one client each (default 1; hot: 64)\n"
	    "  -k, --keys N           keys of the hot workload (default 1000)\n"
	    "  -z, --zipf S           Zipf exponent of the hot workload (default 1.1)\n"
	    "  -H, --hold-us US       how long each lock is held, µs (default 0; hot: 100)\n"
	    "  -d, --duration MS      the measuring window (default 2000)\n"
	    "  -W, --warmup MS        the warm-up before it (default 500)\n"
	    "  -p, --poll-ms MS       direct-poll: retry interval while busy (default 50)\n"
	    "  -t, --ttl MS           lease: PX of the direct modes (default 30000), the\n"
	    "                         leases' TTL of direct-etcd (rounded up to seconds);\n"
	    "                         dlock sends LOCK key TTL MS only when given\n"
	    "  -P, --prefix TEXT      prefix of every key (default bench/<pid>/)\n"
	    "  -s, --seed N           seed of the hot workload's key choice (default 1)\n"
	    "  -C, --cpu NAME=PID     report the CPU time process PID used in the window,\n"
	    "                         as cpu_us.NAME (repeatable)\n"
	    "  -l, --label TEXT       copied into the JSON\n"
	    "      --hist             add the wait histogram's buckets, [from_us, to_us, n]\n"
	    "      --set N[-M]        lockall, lockseq: keys per set, or drawn from N to M\n"
	    "                         (default 2; at most %d)\n"
	    "      --wait-ms MS       dlock, lockall, lockseq: lock requests carry WAIT MS\n"
	    "      --margin-ms MS     with --wait-ms in a set mode: a request answered later\n"
	    "                         than WAIT + MS, or never, counts as stuck (default %d)\n"
	    "      --key-file FILE    key n is line n of FILE (instead of prefix + n)\n"
	    "  -h, --help             this text\n"
	    "\n"
	    "Modes: dlock sends LOCK key / UNLOCK key to dlockd; direct-poll is a client-side\n"
	    "Redis lock (SET key token NX PX ttl, retried every --poll-ms while busy, unlock by\n"
	    "EVALSHA of a compare-and-delete script); direct is the same without contention;\n"
	    "direct-etcd is dlockd's etcd recipe sent to etcd over gRPC, without contention\n"
	    "(a lease per client; one Txn puts the key on it and reads the key's range, one\n"
	    "Txn deletes it; all clients share one HTTP/2 connection); ping sends PING after PING; hold needs no server: each client sleeps the hold\n"
	    "time in a loop; lockall takes a set of keys with LOCKALL n key... and releases it\n"
	    "with UNLOCKALL, lockseq takes the same sets with a LOCK per key and releases them\n"
	    "with an UNLOCK per key, the last taken first. Workloads: uncontended (client i\n"
	    "locks key i; in set modes keys of its own), contended (one key, or one set), hot\n"
	    "(--keys keys drawn from a Zipf distribution; sets of distinct draws, in the\n"
	    "order drawn).\n"
	    "\n"
	    "Exit status: 0 when the run ended (errors are counted in the JSON), 1 when it\n"
	    "could not run (a server refused the connection), 2 for a bad argument.\n",
	    progname, MAX_SET, MARGIN_MS);
}

static void bad_arg(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void
bad_arg(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help'.\n", progname);
	exit(2);
}

static long long
int_arg(const char *opt, const char *s, long long min, long long max)
{
	long long v;

	switch (num_parse(s, strlen(s), min, max, &v)) {
	case NUM_OK:
		return v;
	case NUM_SYNTAX:
		bad_arg("%s: '%s' is not an integer", opt, s);
	case NUM_RANGE:
		break;
	}
	bad_arg("%s: %s is out of range (%lld to %lld)", opt, s, min, max);
}

static int
name_arg(const char *opt, const char *s, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	char all[200] = "";
	for (int i = 0; i < n; i++)
		snprintf(all + strlen(all), sizeof(all) - strlen(all), "%s%s", i ? ", " : "",
		    names[i]);
	bad_arg("%s: unknown value '%s' (one of %s)", opt, s, all);
}

/* Read the key names of --key-file, one a line (empty lines too are names). */
static void
key_file(struct opts *o, const char *path)
{
	FILE *f = fopen(path, "r");
	char line[200];
	long cap = 0;

	if (f == NULL)
		bad_arg("--key-file '%s': %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f) != NULL) {
		size_t n = strcspn(line, "\n");
		if (line[n] != '\n' && !feof(f))
			bad_arg("--key-file '%s': line %ld longer than %zu bytes", path,
			    o->nnames + 1, sizeof(line) - 2);
		line[n] = '\0';
		if (o->nnames == cap) {
			cap = cap ? 2 * cap : 64;
			o->names = realloc(o->names, (size_t)cap * sizeof(char *));
			if (o->names == NULL)
				die("out of memory");
		}
		o->names[o->nnames] = strdup(line);
		if (o->names[o->nnames++] == NULL)
			die("out of memory");
	}
	fclose(f);
	if (o->nnames == 0)
		bad_arg("--key-file '%s': no names", path);
}

static void
parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "mode", required_argument, NULL, 'm' },
		{ "workload", required_argument, NULL, 'w' },
		{ "addr", required_argument, NULL, 'a' },
		{ "clients", required_argument, NULL, 'c' },
		{ "keys", required_argument, NULL, 'k' },
		{ "zipf", required_argument, NULL, 'z' },
		{ "hold-us", required_argument, NULL, 'H' },
		{ "duration", required_argument, NULL, 'd' },
		{ "warmup", required_argument, NULL, 'W' },
		{ "poll-ms", required_argument, NULL, 'p' },
		{ "ttl", required_argument, NULL, 't' },
		{ "prefix", required_argument, NULL, 'P' },
		{ "seed", required_argument, NULL, 's' },
		{ "cpu", required_argument, NULL, 'C' },
		{ "label", required_argument, NULL, 'l' },
		{ "hist", no_argument, NULL, 1 },
		{ "set", required_argument, NULL, 2 },
		{ "wait-ms", required_argument, NULL, 3 },
		{ "margin-ms", required_argument, NULL, 4 },
		{ "key-file", required_argument, NULL, 5 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int ch, clients = -1, keys = -1;
	long long hold_us = -1;
	bool ttl_given = false;
	const char *why;
	char *end;

	memset(o, 0, sizeof(*o));
	o->mode = MODE_DLOCK;
	o->margin_ms = MARGIN_MS;
	o->wl = WL_UNCONTENDED;
	o->zipf = 1.1;
	o->window_ms = 2000;
	o->warmup_ms = 500;
	o->poll_ms = 50;
	o->ttl_ms = 30000;
	o->seed = 1;
	snprintf(o->prefix, sizeof(o->prefix), "bench/%ld/", (long)getpid());

	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":m:w:a:c:k:z:H:d:W:p:t:P:s:C:l:h", longopts,
	    NULL)) != -1) {
		switch (ch) {
		case 'm':
			o->mode = (enum mode)name_arg("--mode", optarg, mode_names, MODE_COUNT);
			break;
		case 'w':
			o->wl = (enum workload)name_arg("--workload", optarg, workload_names,
			    WL_COUNT);
			break;
		case 'a':
			if (o->naddrs == MAX_ADDRS)
				bad_arg("--addr: at most %d addresses", MAX_ADDRS);
			if (addr_parse(optarg, ADDR_PORT_REQUIRED, &o->addrs[o->naddrs], &why) < 0)
				bad_arg("--addr '%s': %s", optarg, why);
			o->naddrs++;
			break;
		case 'c':
			clients = (int)int_arg("--clients", optarg, 1, MAX_CLIENTS);
			break;
		case 'k':
			keys = (int)int_arg("--keys", optarg, 1, MAX_KEYS);
			break;
		case 'z':
			errno = 0;
			o->zipf = strtod(optarg, &end);
			if (errno != 0 || end == optarg || *end != '\0' || !(o->zipf >= 0) ||
			    o->zipf > 100)
				bad_arg("--zipf: '%s' is not a number from 0 to 100", optarg);
			break;
		case 'H':
			hold_us = int_arg("--hold-us", optarg, 0, 3600LL * 1000000);
			break;
		case 'd':
			o->window_ms = (uint64_t)int_arg("--duration", optarg, 1, 3600LL * 1000);
			break;
		case 'W':
			o->warmup_ms = (uint64_t)int_arg("--warmup", optarg, 0, 3600LL * 1000);
			break;
		case 'p':
			o->poll_ms = (uint64_t)int_arg("--poll-ms", optarg, 1, 60000);
			break;
		case 't':
			o->ttl_ms = (uint64_t)int_arg("--ttl", optarg, 1, 86400000);
			ttl_given = true;
			break;
		case 'P':
			if (strlen(optarg) >= sizeof(o->prefix) || strlen(optarg) == 0)
				bad_arg("--prefix: 1 to %zu bytes", sizeof(o->prefix) - 1);
			snprintf(o->prefix, sizeof(o->prefix), "%s", optarg);
			break;
		case 's':
			o->seed = (uint64_t)int_arg("--seed", optarg, 0, INT64_MAX);
			break;
		case 'C': {
			const char *eq = strchr(optarg, '=');
			struct watch *w;
			if (o->nwatch == MAX_WATCH)
				bad_arg("--cpu: at most %d processes", MAX_WATCH);
			w = &o->watch[o->nwatch];
			if (eq == NULL || eq == optarg || (size_t)(eq - optarg) >= sizeof(w->name))
				bad_arg("--cpu '%s': expected NAME=PID (NAME up to %zu bytes)", optarg,
				    sizeof(w->name) - 1);
			memcpy(w->name, optarg, (size_t)(eq - optarg));
			w->pid = (long)int_arg("--cpu", eq + 1, 1, INT32_MAX);
			if (proc_cpu_us(w->pid) < 0)
				bad_arg("--cpu '%s': no process %ld (cannot read /proc/%ld/stat)",
				    optarg, w->pid, w->pid);
			o->nwatch++;
			break;
		}
		case 'l':
			o->label = optarg;
			break;
		case 1:
			o->hist = true;
			break;
		case 2: {
			const char *dash = strchr(optarg, '-');
			char lo[24];
			if (dash == NULL) {
				o->set_min = o->set_max = (int)int_arg("--set", optarg, 1, MAX_SET);
				break;
			}
			if ((size_t)(dash - optarg) >= sizeof(lo))
				bad_arg("--set: '%s' is not N or N-M", optarg);
			memcpy(lo, optarg, (size_t)(dash - optarg));
			lo[dash - optarg] = '\0';
			o->set_min = (int)int_arg("--set", lo, 1, MAX_SET);
			o->set_max = (int)int_arg("--set", dash + 1, o->set_min, MAX_SET);
			break;
		}
		case 3:
			o->wait_ms = (uint64_t)int_arg("--wait-ms", optarg, 0, 86400000);
			o->wait_given = true;
			break;
		case 4:
			o->margin_ms = (uint64_t)int_arg("--margin-ms", optarg, 0, 3600000);
			break;
		case 5:
			key_file(o, optarg);
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case ':':
			bad_arg("option %s needs a value", argv[optind - 1]);
		default:
			if (optopt != 0)
				bad_arg("unknown option -%c", optopt);
			bad_arg("unknown option %s", argv[optind - 1]);
		}
	}
	if (optind < argc)
		bad_arg("unexpected argument '%s'", argv[optind]);

	o->clients = clients > 0 ? clients : o->wl == WL_HOT ? 64 : 1;
	o->keys = keys > 0 ? keys : 1000;
	if (keys > 0 && o->wl != WL_HOT)
		bad_arg("--keys is for the hot workload");
	o->hold_ns = (uint64_t)(hold_us >= 0 ? hold_us : o->wl == WL_HOT ? 100 : 0) * NS_PER_US;
	if (o->mode == MODE_DIRECT && o->wl != WL_UNCONTENDED)
		bad_arg("--mode direct is for the uncontended workload (use direct-poll)");
	if (o->mode == MODE_DIRECT_ETCD && o->wl != WL_UNCONTENDED)
		bad_arg("--mode direct-etcd is for the uncontended workload");
	if (o->mode == MODE_DIRECT_ETCD && o->naddrs > 1)
		bad_arg("--mode direct-etcd takes one --addr");
	if (o->mode == MODE_DIRECT_ETCD && o->naddrs == 1 && o->addrs[0].kind == ADDR_UNIX)
		bad_arg("--mode direct-etcd needs etcd's host:port");
	if (o->mode == MODE_HOLD && o->hold_ns == 0)
		bad_arg("--mode hold needs --hold-us greater than 0");
	if (o->mode == MODE_PING && (o->wl != WL_UNCONTENDED || hold_us > 0))
		bad_arg("--mode ping takes neither a workload nor a hold time");
	if ((o->mode == MODE_DLOCK || set_mode(o)) && !ttl_given)
		o->ttl_ms = 0;
	if (o->set_max == 0)
		o->set_min = o->set_max = 2;
	else if (!set_mode(o))
		bad_arg("--set is for the lockall and lockseq modes");
	if (o->wait_given && o->mode != MODE_DLOCK && !set_mode(o))
		bad_arg("--wait-ms is for the dlock, lockall and lockseq modes");
	if (set_mode(o) && o->wl == WL_HOT && o->keys < o->set_max)
		bad_arg("--keys %d cannot make sets of %d distinct keys", o->keys, o->set_max);
	if (o->names != NULL) {
		long need = o->wl == WL_HOT ? o->keys : (long)(o->wl == WL_CONTENDED ? 1 :
		    o->clients) * (set_mode(o) ? o->set_max : 1);
		if (o->nnames < need)
			bad_arg("--key-file: %ld names, %ld needed", o->nnames, need);
	}
	if (o->naddrs == 0) {
		const char *def = o->mode == MODE_DIRECT_ETCD ? "127.0.0.1:2379" : "127.0.0.1:7480";
		if (addr_parse(def, ADDR_PORT_REQUIRED, &o->addrs[0], &why) < 0)
			die("the default address: %s", why);
		o->naddrs = 1;
	}
	if (o->mode != MODE_HOLD && o->clients < o->naddrs)
		bad_arg("%d clients cannot cover %d addresses", o->clients, o->naddrs);
}

int
main(int argc, char **argv)
{
	struct opts o;
	struct bench b;

	parse_args(argc, argv, &o);
	memset(&b, 0, sizeof(b));
	b.o = &o;
	signal(SIGPIPE, SIG_IGN);

	struct event_config *cfg = event_config_new();
	if (cfg == NULL)
		die("event_config_new failed");
	/* timerfd: holds of 100 µs must not round up to the next millisecond */
	event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
	b.base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	if (b.base == NULL)
		die("event_base_new failed");
	if (o.wl == WL_HOT)
		b.zipf_cdf = zipf_cdf(o.keys, o.zipf);
	b.phase_timer = evtimer_new(b.base, on_phase, &b);
	b.sigint = evsignal_new(b.base, SIGINT, on_sigint, &b);
	if (b.phase_timer == NULL || b.sigint == NULL || event_add(b.sigint, NULL) < 0)
		die("cannot create the phase timer");

	bench_setup(&b);
	if (o.warmup_ms == 0) {
		on_phase(-1, 0, &b);
	} else {
		struct timeval tv = tv_ns(o.warmup_ms * NS_PER_MS);
		evtimer_add(b.phase_timer, &tv);
	}
	event_base_dispatch(b.base);
	/* every client died before the run ended */
	while (b.phase != PH_DONE)
		on_phase(-1, 0, &b);
	bench_report(&b);
	if (b.ed != NULL)
		ed_finish(&b);

	for (int i = 0; i < o.clients; i++) {
		struct client *c = &b.cl[i];
		if (c->fd >= 0)
			close(c->fd);
		if (c->rd)
			event_free(c->rd);
		if (c->wr)
			event_free(c->wr);
		if (c->keepalive)
			event_free(c->keepalive);
		event_free(c->timer);
	}
	free(b.cl);
	free(b.zipf_cdf);
	event_free(b.phase_timer);
	event_free(b.sigint);
	event_base_free(b.base);
	return 0;
}
