/*
 * num — decimal integers and hex digits from text (see num.h). It owns
 * nothing, allocates nothing, and must not know where the text came from.
 */
#include "num.h"

#include <limits.h>

enum num_status
num_parse(const char *s, size_t len, long long min, long long max, long long *out)
{
	unsigned long long v = 0, limit = (unsigned long long)LLONG_MAX;
	size_t i = 0;
	int neg = 0;

	if (len > 0 && s[0] == '-') {
		neg = 1;
		i = 1;
		limit += 1;	/* LLONG_MIN's magnitude */
	}
	if (i == len)
		return NUM_SYNTAX;
	for (size_t j = i; j < len; j++)
		if (s[j] < '0' || s[j] > '9')
			return NUM_SYNTAX;
	for (; i < len; i++) {
		unsigned d = (unsigned)(s[i] - '0');
		if (v > (limit - d) / 10)
			return NUM_RANGE;	/* digits, but beyond a long long */
		v = v * 10 + d;
	}
	long long r = neg ? (v == limit ? LLONG_MIN : -(long long)v) : (long long)v;
	if (r < min || r > max)
		return NUM_RANGE;
	*out = r;
	return NUM_OK;
}

int
num_hex_digit(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}
