/*
 * dlock_fixture — the canned server and the live tests' helpers of the
 * libdlock suites; see dlock_fixture.h.
 */
#include "dlock_fixture.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

/* ---- the live tests ---- */

/* Warn, as prog, when DLOCK_TEST_ADDR is unset. */
void
df_warn_addr(const char *prog)
{
	const char *addr = getenv("DLOCK_TEST_ADDR");

	if (addr == NULL || *addr == '\0')
		fprintf(stderr, "%s: DLOCK_TEST_ADDR is not set: the live "
		    "tests need a running dlockd and will fail\n", prog);
}

/* The daemon's address; fails the test when DLOCK_TEST_ADDR is unset. */
const char *
df_addr(void)
{
	const char *a = getenv("DLOCK_TEST_ADDR");

	if (a == NULL || *a == '\0')
		ck_abort_msg("DLOCK_TEST_ADDR is not set: start dlockd and set "
		    "DLOCK_TEST_ADDR to its address (e.g. 127.0.0.1:7480)");
	return a;
}

/* A new connection to the test daemon; fails the test if there is none. */
dlock_t *
df_conn(void)
{
	const char *addr = df_addr();
	char err[256];
	dlock_t *d;

	d = dlock_connect(addr, getenv("DLOCK_TEST_PASSWORD"), err, sizeof(err));
	ck_assert_msg(d != NULL, "cannot connect to dlockd at %s: %s", addr, err);
	return d;
}

/* A key no other test (or earlier run) uses: "check_dlock/<pid>.<ns>/name". */
void
df_key(char *buf, size_t len, const char *name)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(buf, len, "check_dlock/%ld.%ld/%s", (long)getpid(),
	    (long)ts.tv_nsec, name);
}

/* Options for one LOCK. */
struct dlock_lock_opts
df_opts(long long ttl_ms, long long wait_ms, int shared, int limit, int detach)
{
	struct dlock_lock_opts o = DLOCK_LOCK_OPTS_INIT;

	o.ttl_ms = ttl_ms;
	o.wait_ms = wait_ms;
	o.shared = shared;
	o.limit = limit;
	o.detach = detach;
	return o;
}

/*
 * Poll STATUS key on d until it shows n waiters, its status then in *st;
 * fails the test after 5 s.
 */
void
df_wait_waiters(dlock_t *d, const char *key, long long n, struct dlock_status *st)
{
	for (int i = 0; i < 500; i++) {
		ck_assert_int_eq(dlock_status(d, key, st), 0);
		if (st->waiters == n)
			return;
		usleep(10000);
	}
	ck_abort_msg("STATUS %s never showed %lld waiters", key, n);
}

/* Assert that d's last call failed with code. */
void
df_assert_code(const dlock_t *d, const char *code)
{
	ck_assert_msg(strcmp(dlock_error_code(d), code) == 0,
	    "expected error code %s, got \"%s\" (%s)", code,
	    dlock_error_code(d), dlock_error(d));
}

/* ---- the canned server ---- */

/* Wait until fd is readable, at most 5 s. 1 readable, 0 timeout. */
int
df_wait_readable(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int r;

	while ((r = poll(&pfd, 1, 5000)) < 0 && errno == EINTR)
		;
	return r > 0;
}

/* The body of a canned server: serve one connection, then _exit. */
static void
canned_serve(int lfd, const struct df_step *steps, size_t nsteps, int drip,
    int close_at_end)
{
	char buf[4096];
	int fd, one = 1;

	if (!df_wait_readable(lfd) || (fd = accept(lfd, NULL, NULL)) < 0)
		_exit(1);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	for (size_t i = 0; i < nsteps; i++) {
		const char *r = steps[i].reply;
		size_t len = r == NULL ? 0 : steps[i].len ? steps[i].len : strlen(r);
		size_t got = 0;
		ssize_t rn;

		if (steps[i].eof) {
			/* Whatever comes, the connection must end. */
			while (df_wait_readable(fd) && (rn = read(fd, buf, sizeof(buf))) > 0)
				;
			if (!df_wait_readable(fd) || read(fd, buf, sizeof(buf)) != 0)
				_exit(3);
			continue;
		}
		/* A request, whole when an expectation says what it is. */
		while (!steps[i].no_read) {
			if (!df_wait_readable(fd) ||
			    (rn = read(fd, buf + got, sizeof(buf) - 1 - got)) <= 0)
				_exit(1);
			got += (size_t)rn;
			buf[got] = '\0';
			if (steps[i].expect == NULL || strstr(buf, steps[i].expect) != NULL)
				break;
			if (got == sizeof(buf) - 1)
				_exit(2);	/* not the request expected */
		}
		if (steps[i].delay_ms > 0)
			usleep((useconds_t)steps[i].delay_ms * 1000);
		for (size_t off = 0; off < len; ) {
			size_t n = drip || steps[i].gap_ms ? 1 : len - off;
			ssize_t w = send(fd, r + off, n, MSG_NOSIGNAL);

			if (w <= 0 && steps[i].gap_ms > 0)
				break;	/* the client gave up on a slow reply */
			if (w <= 0)
				_exit(1);
			off += (size_t)w;
			if (steps[i].gap_ms > 0)
				usleep((useconds_t)steps[i].gap_ms * 1000);
			else if (drip)
				usleep(300);
		}
	}
	if (!close_at_end)
		while (df_wait_readable(fd) && read(fd, buf, sizeof(buf)) > 0)
			;
	close(fd);
	_exit(0);
}

/*
 * Start a canned server on a free loopback port that accepts one
 * connection and plays steps: for each, it reads a request (unless no_read)
 * and writes the reply (one byte at a time when drip). Then it closes at
 * once (close_at_end) or when the client does.
 */
void
df_canned_start(struct df_canned *c, const struct df_step *steps, size_t nsteps,
    int drip, int close_at_end)
{
	struct sockaddr_in sin;
	socklen_t slen = sizeof(sin);
	int lfd;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(lfd, 0);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(listen(lfd, 1), 0);
	ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&sin, &slen), 0);
	snprintf(c->addr, sizeof(c->addr), "127.0.0.1:%d", ntohs(sin.sin_port));
	c->dir[0] = '\0';
	c->pid = fork();
	ck_assert_int_ge(c->pid, 0);
	if (c->pid == 0)
		canned_serve(lfd, steps, nsteps, drip, close_at_end);
	close(lfd);
}

/* df_canned_start on a Unix socket in a new temporary directory. */
void
df_canned_start_unix(struct df_canned *c, const struct df_step *steps, size_t nsteps)
{
	struct sockaddr_un sun;
	int lfd;

	snprintf(c->dir, sizeof(c->dir), "/tmp/check_dlock.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(c->dir));
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s/s", c->dir);
	snprintf(c->addr, sizeof(c->addr), "unix:%s", sun.sun_path);
	lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_ge(lfd, 0);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	ck_assert_int_eq(listen(lfd, 1), 0);
	c->pid = fork();
	ck_assert_int_ge(c->pid, 0);
	if (c->pid == 0)
		canned_serve(lfd, steps, nsteps, 0, 1);
	close(lfd);
}

/*
 * Wait for the canned server (5 s at most, else it is killed); assert that
 * it played every step.
 */
void
df_canned_wait(struct df_canned *c)
{
	int status = 0;
	pid_t w = 0;

	for (int i = 0; i < 500 && (w = waitpid(c->pid, &status, WNOHANG)) == 0; i++)
		usleep(10000);
	if (w == 0) {
		kill(c->pid, SIGKILL);
		waitpid(c->pid, &status, 0);
	}
	if (c->dir[0] != '\0') {
		char path[sizeof(c->dir) + 2];

		snprintf(path, sizeof(path), "%s/s", c->dir);
		unlink(path);
		rmdir(c->dir);
	}
	ck_assert_msg(w == c->pid, "canned server still running after 5 s");
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "canned server failed (status 0x%x)", status);
}

/* A free loopback TCP port nothing listens on. */
int
df_free_port(void)
{
	struct sockaddr_in sin;
	socklen_t slen = sizeof(sin);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sin, &slen), 0);
	close(fd);
	return ntohs(sin.sin_port);
}
