/*
 * conn — one buffered client connection on libevent.
 *
 * It owns the socket and its two buffers, and tells its owner everything
 * through one callback with an event kind (bytes arrived, output written,
 * peer gone). It must not parse what it carries nor decide when to close:
 * that is the session's job.
 */
#include "conn.h"

#include <stdbool.h>
#include <stdlib.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "xmalloc.h"

struct conn {
	struct bufferevent *bev;	/* socket and buffers */
	struct event *ev_gone;		/* delivers CONN_GONE from the loop */
	conn_cb *cb;			/* the owner */
	void *arg;
	bool closing;			/* conn_close() was called */
};

static void
on_read(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	(void)bev;
	c->cb(c->arg, CONN_READ);
}

static void
on_write(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	(void)bev;
	if (c->closing)
		event_active(c->ev_gone, EV_TIMEOUT, 0);
	else
		c->cb(c->arg, CONN_WRITTEN);
}

static void
on_event(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	(void)bev;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		c->cb(c->arg, CONN_GONE);
}

static void
on_gone(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	(void)fd;
	(void)what;
	c->cb(c->arg, CONN_GONE);
}

struct conn *
conn_create(struct event_base *base, evutil_socket_t fd, conn_cb *cb, void *arg)
{
	struct conn *c = xcalloc(1, sizeof(*c));
	c->cb = cb;
	c->arg = arg;
	c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	c->ev_gone = event_new(base, -1, 0, on_gone, c);
	bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	return c;
}

void
conn_destroy(struct conn *c)
{
	bufferevent_free(c->bev);
	event_free(c->ev_gone);
	free(c);
}

struct evbuffer *
conn_input(struct conn *c)
{
	return bufferevent_get_input(c->bev);
}

struct evbuffer *
conn_output(struct conn *c)
{
	return bufferevent_get_output(c->bev);
}

void
conn_read_enable(struct conn *c, int on)
{
	if (c->closing)
		return;
	if (on)
		bufferevent_enable(c->bev, EV_READ);
	else
		bufferevent_disable(c->bev, EV_READ);
}

void
conn_close(struct conn *c)
{
	if (c->closing)
		return;
	c->closing = true;
	bufferevent_disable(c->bev, EV_READ);
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		event_active(c->ev_gone, EV_TIMEOUT, 0);
}
