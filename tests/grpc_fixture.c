/*
 * grpc_fixture — a loop with a fake gRPC server on it, for the suites of
 * the gRPC transport and of etcd; see grpc_fixture.h.
 */
#include "grpc_fixture.h"

#include <check.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fake_grpc.h"
#include "log.h"

struct event_base *gf_base;
struct fake_grpc *gf_fake;
static struct event *tick;	/* wakes the loop every GF_TICK_MS */

static void
on_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
}

void
gf_setup(void)
{
	struct timeval tv = clock_tv(GF_TICK_MS);
	gf_base = event_base_new();
	ck_assert_ptr_nonnull(gf_base);
	tick = event_new(gf_base, -1, EV_PERSIST, on_tick, NULL);
	event_add(tick, &tv);
	gf_fake = fake_grpc_new(gf_base);
}

void
gf_teardown(void)
{
	fake_grpc_free(gf_fake);
	gf_fake = NULL;
	event_free(tick);
	event_base_free(gf_base);
	gf_base = NULL;
}

void
gf_pump(void)
{
	for (int i = 0; i < 8; i++)
		event_base_loop(gf_base, EVLOOP_NONBLOCK);
}

void
gf_settle(uint64_t ms)
{
	uint64_t until = clock_ms() + ms;
	while (clock_ms() < until)
		event_base_loop(gf_base, EVLOOP_ONCE);
}

void
gf_deliver(void)
{
	GF_RUN_UNTIL(fake_grpc_flushed(gf_fake));
	gf_settle(GF_TICK_MS);
	gf_pump();
}

int
gf_dead_port(void)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
	    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sin);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
	close(fd);
	return ntohs(sin.sin_port);
}

int
gf_main(Suite *s)
{
	signal(SIGPIPE, SIG_IGN);
	if (log_init(LOG_LEVEL_ERROR, NULL) != 0)
		return EXIT_FAILURE;
	return suite_run(s);
}
