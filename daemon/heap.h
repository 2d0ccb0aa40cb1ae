/*
 * heap — a binary min-heap of deadlines, intrusive.
 *
 * It owns the order of deadlines and nothing else: the owner embeds a
 * struct heap_node in whatever has a deadline and keeps it alive while it
 * is on the heap; the heap stores pointers to the nodes and never frees
 * them. It knows nothing of clocks, timers or what a deadline is for, and
 * it never calls back.
 *
 * Set (insert or move) and clear are O(log n), the earliest is O(1). The
 * array of pointers grows by doubling and never fails (xmalloc).
 */
#ifndef DLOCKD_HEAP_H
#define DLOCKD_HEAP_H

#include <stddef.h>
#include <stdint.h>

#define HEAP_NEVER UINT64_MAX	/* no deadline: a node with it is off the heap */

/* What an owner embeds: its deadline and where it sits on the heap. */
struct heap_node {
	uint64_t when;		/* due time; HEAP_NEVER while off the heap */
	size_t idx;		/* its position on the heap while on it */
};

/* A heap of nodes, earliest first. */
struct heap {
	struct heap_node **v;	/* the nodes, a binary heap on when */
	size_t len;		/* nodes on it */
	size_t cap;		/* allocated entries of v */
};

/* An empty heap (allocates nothing yet). */
void heap_init(struct heap *h);
/* Free the heap's array; the nodes still on it are forgotten, not freed. */
void heap_fini(struct heap *h);

/* A node off every heap: call before its first heap_set. */
void heap_node_init(struct heap_node *n);

/* Put n on h due at when, or move it there if it is on h already;
 * HEAP_NEVER takes it off (heap_clear). */
void heap_set(struct heap *h, struct heap_node *n, uint64_t when);
/* Take n off h if it is on it (a node off the heap is left as it is). */
void heap_clear(struct heap *h, struct heap_node *n);
/* The node due first, or NULL when h is empty. */
struct heap_node *heap_earliest(const struct heap *h);

#endif
