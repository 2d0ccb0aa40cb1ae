/*
 * heap — a binary min-heap of deadlines (see heap.h).
 *
 * It owns the array of node pointers; it must not free, copy or look
 * inside anything but the heap_node its owner embeds.
 */
#include "heap.h"

#include <assert.h>
#include <stdlib.h>

#include "xmalloc.h"

void
heap_init(struct heap *h)
{
	h->v = NULL;
	h->len = 0;
	h->cap = 0;
}

void
heap_fini(struct heap *h)
{
	free(h->v);
	heap_init(h);
}

void
heap_node_init(struct heap_node *n)
{
	n->when = HEAP_NEVER;
	n->idx = 0;
}

/* Exchange the nodes at positions a and b, keeping their idx right. */
static void
heap_swap(struct heap *h, size_t a, size_t b)
{
	struct heap_node *t = h->v[a];
	h->v[a] = h->v[b];
	h->v[b] = t;
	h->v[a]->idx = a;
	h->v[b]->idx = b;
}

/* Move the node at i up while it is due before its parent. */
static void
heap_up(struct heap *h, size_t i)
{
	while (i > 0 && h->v[(i - 1) / 2]->when > h->v[i]->when) {
		heap_swap(h, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

/* Move the node at i down while a child is due before it. */
static void
heap_down(struct heap *h, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < h->len && h->v[l]->when < h->v[m]->when)
			m = l;
		if (r < h->len && h->v[r]->when < h->v[m]->when)
			m = r;
		if (m == i)
			return;
		heap_swap(h, i, m);
		i = m;
	}
}

void
heap_clear(struct heap *h, struct heap_node *n)
{
	if (n->when == HEAP_NEVER)
		return;
	size_t i = n->idx, last = h->len - 1;
	assert(i < h->len && h->v[i] == n);
	if (i != last) {
		heap_swap(h, i, last);
		h->len--;
		heap_up(h, i);
		heap_down(h, i);
	} else {
		h->len--;
	}
	n->when = HEAP_NEVER;
}

void
heap_set(struct heap *h, struct heap_node *n, uint64_t when)
{
	if (when == HEAP_NEVER) {
		heap_clear(h, n);
		return;
	}
	if (n->when != HEAP_NEVER) {
		assert(n->idx < h->len && h->v[n->idx] == n);
		n->when = when;
		heap_up(h, n->idx);
		heap_down(h, n->idx);
		return;
	}
	if (h->len == h->cap) {
		h->cap = h->cap ? h->cap * 2 : 64;
		h->v = xreallocarray(h->v, h->cap, sizeof(*h->v));
	}
	n->when = when;
	n->idx = h->len;
	h->v[h->len++] = n;
	heap_up(h, n->idx);
}

struct heap_node *
heap_earliest(const struct heap *h)
{
	return h->len > 0 ? h->v[0] : NULL;
}
