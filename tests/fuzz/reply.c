/*
 * reply — fuzz libdlock's reading of the daemon's replies (client/dlock.c:
 * its RESP3 reader, pushes, "LOST" notices, and each command's reading of
 * its reply; client/dlock_elect.c: the election calls; client/dlock_multi.c:
 * the calls on several keys).
 *
 * The input is a few steering bytes, then the bytes "the daemon" sends. They
 * are written into one end of a socketpair, whose other end is handed to
 * libdlock (dlock_open_fd, with or without the handshake of dlock_connect);
 * then the steering bytes pick a series of calls (LOCK, UNLOCK, EXTEND,
 * STATUS, STATUS FULL, VALIDATE, PING, INFO, polls for lost locks; with bit
 * 4 of the first byte, CAMPAIGN, PROCLAIM, RESIGN, LEADER, OBSERVE and
 * polls; with bit 8, LOCKALL, UNLOCKALL and polls), each reading its reply
 * from those bytes until they run out. It checks that each
 * call returns what its documentation allows, that every failure has an error
 * code and text, that a closed connection stays failed with the same error,
 * and that a lost lock polled comes with its key NUL-terminated. ASan and
 * the leak check watch the reader.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dlock.h"
#include "dlock_internal.h"
#include "fuzz.h"

#define MAX_BYTES 65536		/* of the reply stream (the socket holds them) */

/* A call failed: it says why. */
static void
check_failed(dlock_t *d)
{
	const char *code = dlock_error_code(d), *err = dlock_error(d);
	FUZZ_CHECK(code != NULL && code[0] != '\0');
	FUZZ_CHECK(err != NULL && err[0] != '\0');
}

/* Poll for lost locks (b: the key's room): 2 if the connection failed (it
 * is dead), else 0. */
static int
poll_lost(dlock_t *d, unsigned b)
{
	char key[16];
	long long fence = 0;
	int r;

	while ((r = dlock_poll_lost(d, key, (b & 16) ? 2 : sizeof(key), &fence)) == 1)
		FUZZ_CHECK(memchr(key, '\0', (b & 16) ? 2 : sizeof(key)) != NULL);
	FUZZ_CHECK(r == 0 || r == -1);
	if (r == -1)
		check_failed(d);
	return r == -1 ? 2 : 0;
}

/* The end of a call that returned r (-1: failed, and it says why): 1 if it
 * failed, else 0. */
static int
call_done(dlock_t *d, int r)
{
	if (r == -1)
		check_failed(d);
	return r == -1;
}

/* A state of a key as dlock_leader and dlock_observe return it. */
static void
check_leader(const struct dlock_leader *l)
{
	FUZZ_CHECK(l->valuelen <= sizeof(l->value));
	FUZZ_CHECK(l->has_value || l->valuelen == 0);
	FUZZ_CHECK(l->valuelen == sizeof(l->value) || l->value[l->valuelen] == '\0');
	FUZZ_CHECK(l->term >= 0 && l->revision >= 0 && l->holders >= 0);
	FUZZ_CHECK(l->kind[0] != '\0' && memchr(l->kind, '\0', sizeof(l->kind)) != NULL);
}

/* One election call chosen by b. Returns as call() does. */
static int
call_elect(dlock_t *d, unsigned b)
{
	struct dlock_lock_opts o = DLOCK_LOCK_OPTS_INIT;
	struct dlock_leader l;
	struct dlock_grant g;
	long long rev = -1;
	int r;

	switch (b % 6) {
	case 0:
		o.ttl_ms = (b & 16) ? 1000 : 0;
		o.wait_ms = (b & 32) ? 0 : -1;
		o.detach = o.ttl_ms > 0 && (b & 64);
		r = dlock_campaign(d, "k", "v\0x", (b & 128) ? 3 : 0, &o, &g);
		FUZZ_CHECK(r == 1 || r == 0 || r == -1);
		if (r == 1)
			FUZZ_CHECK(g.token[0] != '\0' && memchr(g.token, '\0', sizeof(g.token)));
		break;
	case 1:
		r = dlock_proclaim(d, "k", "v", 1, &rev);
		FUZZ_CHECK((r == 0 && rev >= 0) || (r == -1 && rev == -1));
		break;
	case 2:
		r = dlock_resign(d, "k");
		FUZZ_CHECK(r >= -1);
		r = r < 0 ? -1 : 0;
		break;
	case 3:
		r = dlock_leader(d, "k", &l);
		FUZZ_CHECK(r == 0 || r == -1);
		if (r == 0)
			check_leader(&l);
		break;
	case 4:
		r = dlock_observe(d, "k", (b & 16) ? 7 : -1, (b & 32) ? 100 : -1, &l);
		FUZZ_CHECK(r == 1 || r == 0 || r == -1);
		FUZZ_CHECK(r != 0 || (b & 48) == 48);	/* nil only when it may wait */
		if (r == 1)
			check_leader(&l);
		break;
	default:
		return poll_lost(d, b);
	}
	return call_done(d, r);
}

/* One call on several keys chosen by b. Returns as call() does. */
static int
call_multi(dlock_t *d, unsigned b)
{
	static const char *const keys[] = { "a", "b", "c" };
	struct dlock_lock_opts o = DLOCK_LOCK_OPTS_INIT;
	struct dlock_grant g[3];
	long long left[3] = { -1, -1, -1 };
	size_t n = 1 + (b >> 5) % 3;
	int r;

	switch (b % 3) {
	case 0:
		o.ttl_ms = (b & 16) ? 1000 : 0;
		o.wait_ms = (b & 8) ? 0 : -1;
		r = dlock_lockall(d, n, keys, &o, g);
		FUZZ_CHECK(r == 1 || r == 0 || r == -1);
		for (size_t i = 0; r == 1 && i < n; i++)
			FUZZ_CHECK(g[i].token[0] != '\0' &&
			    memchr(g[i].token, '\0', sizeof(g[i].token)));
		break;
	case 1:
		r = dlock_unlockall(d, n, keys, left);
		FUZZ_CHECK(r == 0 || r == -1);
		for (size_t i = 0; r == 0 && i < n; i++)
			FUZZ_CHECK(left[i] >= 0);
		break;
	default:
		return poll_lost(d, b);
	}
	return call_done(d, r);
}

/* One call chosen by b. Returns 1 if it failed, 2 if it was a poll for lost
 * locks that said the connection failed (it is dead), else 0. */
static int
call(dlock_t *d, unsigned b)
{
	struct dlock_lock_opts o = DLOCK_LOCK_OPTS_INIT;
	struct dlock_grant g;
	struct dlock_status st;
	struct dlock_status_full full;
	long long v;
	int r;

	switch (b % 9) {
	case 0:
		o.ttl_ms = (b & 16) ? 1000 : 0;
		o.wait_ms = (b & 32) ? 0 : -1;
		o.shared = (b & 64) != 0;
		o.limit = (b & 128) && !o.shared ? 3 : 0;
		o.detach = o.ttl_ms > 0 && (b & 32);
		r = dlock_lock(d, "k", &o, &g);
		FUZZ_CHECK(r == 1 || r == 0 || r == -1);
		if (r == 1)
			FUZZ_CHECK(g.token[0] != '\0' && memchr(g.token, '\0', sizeof(g.token)));
		break;
	case 1:
		v = dlock_unlock(d, "k", (b & 16) ? "tok" : NULL);
		r = v < 0 ? -1 : 0;
		FUZZ_CHECK(v >= -1);
		break;
	case 2:
		v = dlock_extend(d, "k", 5000, NULL);
		r = v < 0 ? -1 : 0;
		FUZZ_CHECK(v >= -1);
		break;
	case 3:
		r = dlock_status(d, "k", &st);
		FUZZ_CHECK(r == 0 || r == -1);
		if (r == 0)
			FUZZ_CHECK(memchr(st.mode, '\0', sizeof(st.mode)) &&
			    memchr(st.backend, '\0', sizeof(st.backend)));
		break;
	case 4:
		memset(&full, 0, sizeof(full));
		r = dlock_status_full(d, "k", &full);
		FUZZ_CHECK(r == 0 || r == -1);
		if (r == 0) {
			FUZZ_CHECK(full.nholders == 0 || full.holders != NULL);
			FUZZ_CHECK(full.nwaiters == 0 || full.waiters != NULL);
			for (size_t i = 0; i < full.nholders; i++)
				FUZZ_CHECK(memchr(full.holders[i].mode, '\0', 16) &&
				    memchr(full.holders[i].addr, '\0', 128));
		}
		dlock_status_full_free(&full);
		break;
	case 5:
		r = dlock_validate(d, "k", 7);
		FUZZ_CHECK(r == 1 || r == 0 || r == -1);
		break;
	case 6:
		r = dlock_ping(d);
		FUZZ_CHECK(r == 0 || r == -1);
		break;
	case 7: {
		char *info = dlock_info(d);
		r = info != NULL ? 0 : -1;
		free(info);
		break;
	}
	default:
		return poll_lost(d, b);
	}
	if (r == -1 && (dlock_error_code(d) == NULL || dlock_error_code(d)[0] == '\0'))
		fprintf(stderr, "call %u failed without a code\n", b % 9);
	if (r == -1)
		check_failed(d);
	return r == -1;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	unsigned flags = fuzz_byte(&in), ncalls = fuzz_byte(&in) % 24;
	const uint8_t *calls = in.p;
	char err[256], code[32];
	int sv[2];

	fuzz_quiet();
	ncalls = ncalls < in.n ? ncalls : (unsigned)in.n;
	in.p += ncalls;
	in.n -= ncalls;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		abort();
	int bufsize = 4 * MAX_BYTES;
	(void)setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof(bufsize));
	(void)fcntl(sv[1], F_SETFL, O_NONBLOCK);
	size_t n = in.n < MAX_BYTES ? in.n : MAX_BYTES, off = 0;
	while (off < n) {
		ssize_t w = write(sv[1], in.p + off, n - off);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	shutdown(sv[1], SHUT_WR);	/* then the daemon closes */

	dlock_t *d = dlock_open_fd(sv[0], flags & 1, (flags & 2) ? "secret" : NULL, err,
	    sizeof(err));
	if (d == NULL) {
		FUZZ_CHECK(err[0] != '\0');
		close(sv[1]);
		return 0;
	}
	FUZZ_CHECK(dlock_set_timeout(d, 2000) == 0);
	bool dead = false;
	code[0] = '\0';
	for (unsigned i = 0; i < ncalls; i++) {
		int r = (flags & 8) ? call_multi(d, calls[i]) :
		    (flags & 4) ? call_elect(d, calls[i]) : call(d, calls[i]);
		if (dead) {
			/* every call fails at once, with the same error */
			FUZZ_CHECK(r != 0 && strcmp(dlock_error_code(d), code) == 0);
		} else if (r == 2) {
			dead = true;
			snprintf(code, sizeof(code), "%s", dlock_error_code(d));
		}
	}
	dlock_close(d);
	close(sv[1]);
	return 0;
}
