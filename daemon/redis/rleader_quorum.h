/*
 * rleader_quorum — who leads a key on redlock's N nodes, from each node's
 * answer to the look script (rscript.c): a pure function of those answers,
 * tested without a socket or a loop (check_rleader_quorum.c).
 *
 * Each node keeps its own lease of the key, its own election record and
 * its own version of it; no one node can be believed alone. The state is
 * what a majority of the N nodes agrees on:
 *   - an exclusive holder: the member whose lease a majority of the nodes
 *     holds (two cannot: a grant needs the key free on a majority). Its
 *     term is the largest that those of them whose record is the holder's
 *     give (the grant's fence F, written back to their records by the
 *     raise script; a node that missed the write-back recorded its own
 *     proposal, which is below F); with none, the fence counter a majority
 *     of them is at least at. Its value is that of the node with the most
 *     PROCLAIMs of it;
 *   - else shared or semaphore leases of one kind on a majority: held so,
 *     by the number of leases and with the term (the fence counter's) that
 *     a majority of the nodes shows at least;
 *   - else free.
 * Fewer than a majority answering decides nothing.
 */
#ifndef DLOCKD_RLEADER_QUORUM_H
#define DLOCKD_RLEADER_QUORUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One node's look, as the combining reads it. */
struct rlq_node {
	bool answered;			/* it answered the look (else: failed, late
					 * or not sent; the rest is not read) */
	char kind[8];			/* "x0", "s0", "n<limit>", "" when free */
	unsigned holders;		/* leases of the key there */
	const char *member;		/* the exclusive lease's member, or NULL */
	size_t memberlen;
	uint64_t term;			/* the term the node records (or its
					 * fence counter), 0 when free */
	const char *value;		/* the exclusive holder's value there, or
					 * NULL */
	size_t valuelen;
	long long proclaims;		/* PROCLAIMs of the holder's record there,
					 * -1 when the record is not the holder's */
	long long pttl;			/* ms until its first lease ends, -1: none */
};

/* What a majority agrees on. */
struct rlq_state {
	size_t answered;		/* nodes that answered */
	const char *kind;		/* one of the nodes' kinds ("" free) */
	unsigned holders;		/* 0 when free */
	uint64_t term;			/* 0 when free */
	const char *value;		/* an exclusive holder's value, or NULL */
	size_t valuelen;
	bool settled;			/* every node that holds the exclusive lease
					 * records the same term (false: the grant's
					 * write-back may be under way) */
	long long pttl;			/* the first end of a lease on any node
					 * that answered (-1: none) */
};

/* Combine n nodes' looks (quorum: how many make a majority) into *out
 * (pointing into nodes). 0, or -1 when fewer than quorum answered. */
int rlquorum_combine(const struct rlq_node *nodes, size_t n, size_t quorum,
    struct rlq_state *out) __attribute__((warn_unused_result));

/* A leader in a node's history: its term and value. */
struct rlq_past {
	uint64_t term;
	const char *value;		/* NULL: none */
	size_t valuelen;
};

/* The leaders of a key's histories (every node's, in any order, n of
 * them) that an observer who saw up to term after has not been told, before
 * the state read (before: its term, 0 when the key is not held exclusively:
 * any later), in order of term, each term once and only a term that quorum
 * nodes' histories hold (the grant's fence, written back; a term on fewer
 * is a node's own proposal): moved to the front of past. Their number. */
size_t rlquorum_history(struct rlq_past *past, size_t n, size_t quorum, uint64_t after,
    uint64_t before);

#endif
