/*
 * rleader_quorum — who leads a key on redlock's nodes, combined from their
 * looks (rleader_quorum.h).
 */
#include "rleader_quorum.h"

#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

static bool
same_member(const struct rlq_node *a, const struct rlq_node *b)
{
	return a->member != NULL && b->member != NULL && a->memberlen == b->memberlen &&
	    memcmp(a->member, b->member, a->memberlen) == 0;
}

static int
by_term_down(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

/* The term that quorum of the on terms (sorted in place) are at least. */
static uint64_t
majority_term(uint64_t *terms, size_t on, size_t quorum)
{
	qsort(terms, on, sizeof(*terms), by_term_down);
	return terms[quorum - 1];
}

/* The exclusive holder on a majority, if any: *out filled, true. Its term
 * is the largest that a node whose record is the holder's gives; with no
 * such node (a lock granted before the key was observed), the fence
 * counter a majority of its nodes is at least at (a node's counter alone
 * may have moved on with grants that no quorum made). */
static bool
exclusive(const struct rlq_node *nodes, size_t n, size_t quorum, struct rlq_state *out,
    uint64_t *terms)
{
	for (size_t i = 0; i < n; i++) {
		const struct rlq_node *a = &nodes[i], *best = NULL;
		size_t on = 0, recorded = 0;
		uint64_t first = 0, top = 0;
		bool same = true;
		if (!a->answered || a->member == NULL || a->holders == 0)
			continue;
		for (size_t j = 0; j < n; j++) {
			const struct rlq_node *b = &nodes[j];
			if (!b->answered || !same_member(a, b))
				continue;
			terms[on++] = b->term;
			if (b->proclaims < 0)
				continue;	/* its record is another's */
			if (recorded++ == 0)
				first = b->term;
			same = same && b->term == first;
			if (b->term > top)
				top = b->term;
			if (best == NULL || b->proclaims > best->proclaims)
				best = b;
		}
		if (on < quorum)
			continue;
		out->kind = a->kind;
		out->holders = 1;
		out->settled = same;
		out->term = recorded > 0 ? top : majority_term(terms, on, quorum);
		if (best != NULL && best->value != NULL) {
			out->value = best->value;
			out->valuelen = best->valuelen;
		}
		return true;
	}
	return false;
}

static int
by_holders_down(const void *a, const void *b)
{
	unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

/* Leases of one shared kind on a majority, if any: *out filled, true. */
static bool
shared(const struct rlq_node *nodes, size_t n, size_t quorum, struct rlq_state *out,
    uint64_t *terms)
{
	unsigned *counts = xcalloc(n, sizeof(*counts));
	bool found = false;
	for (size_t i = 0; i < n && !found; i++) {
		const struct rlq_node *a = &nodes[i];
		size_t on = 0;
		if (!a->answered || a->holders == 0 || a->member != NULL)
			continue;
		for (size_t j = 0; j < n; j++) {
			const struct rlq_node *b = &nodes[j];
			if (!b->answered || b->holders == 0 || b->member != NULL ||
			    strcmp(a->kind, b->kind) != 0)
				continue;
			counts[on++] = b->holders;
		}
		if (on < quorum)
			continue;
		qsort(counts, on, sizeof(*counts), by_holders_down);
		out->kind = a->kind;
		out->holders = counts[quorum - 1];
		/* the largest term a majority shows at least: a node that granted
		 * after the quorum (its own larger fence) is not the grant's */
		on = 0;
		for (size_t j = 0; j < n; j++)
			if (nodes[j].answered && nodes[j].holders > 0 && nodes[j].member == NULL &&
			    strcmp(a->kind, nodes[j].kind) == 0)
				terms[on++] = nodes[j].term;
		out->term = majority_term(terms, on, quorum);
		out->settled = true;
		found = true;
	}
	free(counts);
	return found;
}

int
rlquorum_combine(const struct rlq_node *nodes, size_t n, size_t quorum,
    struct rlq_state *out)
{
	*out = (struct rlq_state){ .kind = "", .pttl = -1, .settled = true };
	for (size_t i = 0; i < n; i++) {
		if (!nodes[i].answered)
			continue;
		out->answered++;
		if (nodes[i].pttl >= 0 && (out->pttl < 0 || nodes[i].pttl < out->pttl))
			out->pttl = nodes[i].pttl;
	}
	if (quorum == 0 || out->answered < quorum)
		return -1;
	uint64_t *terms = xcalloc(n, sizeof(*terms));
	if (!exclusive(nodes, n, quorum, out, terms) && !shared(nodes, n, quorum, out, terms)) {
		out->kind = "";
		out->holders = 0;
		out->term = 0;
	}
	free(terms);
	return 0;
}

static int
by_term(const void *a, const void *b)
{
	uint64_t x = ((const struct rlq_past *)a)->term, y = ((const struct rlq_past *)b)->term;
	return x < y ? -1 : x > y ? 1 : 0;
}

size_t
rlquorum_history(struct rlq_past *past, size_t n, size_t quorum, uint64_t after,
    uint64_t before)
{
	size_t kept = 0;
	for (size_t i = 0; i < n; i++)
		if (past[i].term > after && (before == 0 || past[i].term < before))
			past[kept++] = past[i];
	qsort(past, kept, sizeof(*past), by_term);
	n = kept;
	kept = 0;
	for (size_t i = 0, j; i < n; i = j) {
		/* the same leader on several nodes: a value any of them has */
		struct rlq_past one = past[i];
		for (j = i + 1; j < n && past[j].term == one.term; j++)
			if (one.value == NULL)
				one = past[j];
		/* on fewer than a majority: a node's own proposal, never the
		 * term of a grant (its write-back did not reach the node) */
		if (j - i >= quorum)
			past[kept++] = one;
	}
	return kept;
}
