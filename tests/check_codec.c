/*
 * check_codec — unit tests of the RESP request codec and the reply writers.
 *
 * Frames are compared through a printable representation: one line per
 * frame, "M" (multibulk) or "I" (inline), the argument count, then
 * "|<len>:<bytes>" per argument. The same byte stream must give the same
 * frames and the same final status whatever way it is split between feeds.
 */
#include <check.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "codec.h"
#include "suite.h"

/* A string literal with its length, embedded NULs included. */
#define LIT(s) (s), (sizeof(s) - 1)

/* ---- helpers ---- */

static struct codec *
mk(size_t max_frame, size_t max_args)
{
	struct codec *c = codec_create(max_frame, max_args);
	ck_assert_ptr_nonnull(c);
	return c;
}

static void
feed(struct codec *c, const void *data, size_t len)
{
	codec_feed(c, data, len);
}

static void
feeds(struct codec *c, const char *s)
{
	feed(c, s, strlen(s));
}

/* Append the representation of f to acc, checking the frame's invariants. */
static void
repr(struct evbuffer *acc, const struct codec_frame *f)
{
	if (f->argc < 1 || f->argv == NULL || f->argvlen == NULL)
		ck_abort_msg("empty frame");
	evbuffer_add_printf(acc, "%c%zu", f->is_inline ? 'I' : 'M', f->argc);
	for (size_t i = 0; i < f->argc; i++) {
		if (f->argv[i][f->argvlen[i]] != '\0')
			ck_abort_msg("argument %zu is not NUL-terminated", i);
		evbuffer_add_printf(acc, "|%zu:", f->argvlen[i]);
		evbuffer_add(acc, f->argv[i], f->argvlen[i]);
	}
	evbuffer_add(acc, "\n", 1);
}

/* Take every complete frame into acc; returns the status that stopped it. */
static enum codec_status
drain(struct codec *c, struct evbuffer *acc)
{
	struct codec_frame f;
	enum codec_status st;

	while ((st = codec_next(c, &f)) == CODEC_FRAME)
		repr(acc, &f);
	return st;
}

static void
assert_buf_eq(struct evbuffer *got, const char *want, size_t wantlen)
{
	size_t len = evbuffer_get_length(got);
	const unsigned char *p = evbuffer_pullup(got, -1);
	ck_assert_msg(len == wantlen, "length %zu, want %zu: \"%.*s\" vs \"%.*s\"",
	    len, wantlen, (int)(len > 300 ? 300 : len), p,
	    (int)(wantlen > 300 ? 300 : wantlen), want);
	if (len > 0)
		ck_assert_mem_eq(p, want, len);
}

static void
assert_bufs_eq(struct evbuffer *got, struct evbuffer *want)
{
	size_t len = evbuffer_get_length(want);
	assert_buf_eq(got, (const char *)evbuffer_pullup(want, -1), len);
}

/* The next result must be a frame with these NUL-terminated arguments. */
static void
expect_frame(struct codec *c, int is_inline, size_t argc, ...)
{
	struct codec_frame f;
	va_list ap;

	ck_assert_int_eq(codec_next(c, &f), CODEC_FRAME);
	ck_assert_int_eq(f.is_inline, is_inline);
	ck_assert_uint_eq(f.argc, argc);
	va_start(ap, argc);
	for (size_t i = 0; i < argc; i++) {
		const char *want = va_arg(ap, const char *);
		ck_assert_uint_eq(f.argvlen[i], strlen(want));
		ck_assert_str_eq(f.argv[i], want);
	}
	va_end(ap);
}

static void
expect_status(struct codec *c, enum codec_status want)
{
	struct codec_frame f;
	ck_assert_int_eq(codec_next(c, &f), want);
}

/*
 * Run data through a fresh codec, fed in the pieces cut at cuts[0..ncuts)
 * (increasing offsets), draining after every feed. Fills frames and returns
 * the final status; *err gets a copy of the error sentence or NULL.
 */
static enum codec_status
run_split(const char *data, size_t len, const size_t *cuts, size_t ncuts,
    size_t max_frame, size_t max_args, struct evbuffer *frames, char **err)
{
	struct codec *c = mk(max_frame, max_args);
	enum codec_status st = CODEC_MORE;
	size_t from = 0;

	for (size_t i = 0; i <= ncuts; i++) {
		size_t to = i < ncuts ? cuts[i] : len;
		feed(c, data + from, to - from);
		from = to;
		st = drain(c, frames);
	}
	*err = codec_error(c) != NULL ? strdup(codec_error(c)) : NULL;
	ck_assert_int_eq(st == CODEC_ERROR, *err != NULL);
	codec_destroy(c);
	return st;
}

/* Run data fed at once; see run_split. */
static enum codec_status
run_whole(const char *data, size_t len, size_t max_frame, size_t max_args,
    struct evbuffer *frames, char **err)
{
	return run_split(data, len, NULL, 0, max_frame, max_args, frames, err);
}

/* Run data fed one byte at a time; see run_split. */
static enum codec_status
run_bytes(const char *data, size_t len, size_t max_frame, size_t max_args,
    struct evbuffer *frames, char **err)
{
	size_t *cuts = malloc((len + 1) * sizeof(*cuts));
	ck_assert_ptr_nonnull(cuts);
	for (size_t i = 0; i < len; i++)
		cuts[i] = i + 1;
	enum codec_status st = run_split(data, len, cuts, len > 0 ? len - 1 : 0,
	    max_frame, max_args, frames, err);
	free(cuts);
	return st;
}

static void
assert_same_err(const char *got, const char *want)
{
	if (want == NULL)
		ck_assert_ptr_null(got);
	else
		ck_assert_str_eq(got, want);
}

/* A small deterministic generator (xorshift64*). */
static uint64_t rng = 88172645463325252ULL;

static uint32_t
rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (uint32_t)((rng * 2685821657736338717ULL) >> 32);
}

/* ---- multibulk frames ---- */

START_TEST(t_mb_whole)
{
	struct codec *c = mk(65536, 64);
	ck_assert_ptr_null(codec_error(c));
	ck_assert_uint_eq(codec_buffered(c), 0);
	expect_status(c, CODEC_MORE);
	feeds(c, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n");
	ck_assert_uint_eq(codec_buffered(c), 31);
	expect_frame(c, 0, 3, "SET", "k", "value");
	ck_assert_uint_eq(codec_buffered(c), 0);
	expect_status(c, CODEC_MORE);
	expect_status(c, CODEC_MORE);
	ck_assert_ptr_null(codec_error(c));
	codec_destroy(c);
}
END_TEST

/*
 * A frame that is not whole when codec_next first sees it is taken by the
 * state machine, which goes on from where it stopped; one that is whole is
 * taken in one pass, and a whole frame that turns out bad halfway leaves
 * the buffer as it was for the state machine's error.
 */
START_TEST(t_mb_whole_or_not)
{
	struct codec *c = mk(65536, 64);
	feeds(c, "*3\r\n$1\r\na\r\n$1\r\nb\r\n");	/* two of three */
	expect_status(c, CODEC_MORE);
	feeds(c, "$2\r\ncd\r\n*1\r\n$4\r\nPING\r\n");
	expect_frame(c, 0, 3, "a", "b", "cd");
	expect_frame(c, 0, 1, "PING");
	expect_status(c, CODEC_MORE);
	codec_destroy(c);

	c = mk(65536, 64);
	feeds(c, "*2\r\n$1\r\na\r\n$1\r\nbc\r\n");
	expect_status(c, CODEC_ERROR);
	ck_assert_str_eq(codec_error(c), "Protocol error: bulk string not terminated by CRLF");
	codec_destroy(c);

	/* a count of more arguments than the bytes could hold, and lengths of
	 * more digits than any whole frame: not whole, not errors yet */
	c = mk(0, 0);
	feeds(c, "*99999\r\n$1\r\na\r\n");
	expect_status(c, CODEC_MORE);
	codec_destroy(c);
	c = mk(0, 0);
	feeds(c, "*1\r\n$123456789012345678\r\nab\r\n");
	expect_status(c, CODEC_MORE);
	codec_destroy(c);
}
END_TEST

START_TEST(t_mb_empty_arg)
{
	struct codec *c = mk(65536, 64);
	feeds(c, "*3\r\n$4\r\nECHO\r\n$0\r\n\r\n$1\r\nx\r\n");
	expect_frame(c, 0, 3, "ECHO", "", "x");
	expect_status(c, CODEC_MORE);
	codec_destroy(c);
}
END_TEST

START_TEST(t_mb_binary)
{
	static const char wire[] = "*3\r\n$3\r\nSET\r\n$7\r\na\0b\r\nc*\r\n$4\r\n$\r\n\0\r\n";
	struct codec *c = mk(65536, 64);
	struct codec_frame f;

	feed(c, LIT(wire));
	ck_assert_int_eq(codec_next(c, &f), CODEC_FRAME);
	ck_assert_int_eq(f.is_inline, 0);
	ck_assert_uint_eq(f.argc, 3);
	ck_assert_uint_eq(f.argvlen[0], 3);
	ck_assert_str_eq(f.argv[0], "SET");
	ck_assert_uint_eq(f.argvlen[1], 7);
	ck_assert_mem_eq(f.argv[1], "a\0b\r\nc*", 8);	/* with the NUL after */
	ck_assert_uint_eq(f.argvlen[2], 4);
	ck_assert_mem_eq(f.argv[2], "$\r\n\0", 5);
	expect_status(c, CODEC_MORE);
	ck_assert_uint_eq(codec_buffered(c), 0);
	codec_destroy(c);
}
END_TEST

START_TEST(t_mb_large_bulk)
{
	size_t n = 1 << 20;
	char *wire = malloc(n + 64);
	ck_assert_ptr_nonnull(wire);
	int h = snprintf(wire, 64, "*2\r\n$4\r\nECHO\r\n$%zu\r\n", n);
	for (size_t i = 0; i < n; i++)
		wire[h + i] = (char)(i * 7 + 3);
	memcpy(wire + h + n, "\r\n", 2);

	struct codec *c = mk(2 * n, 4);
	struct codec_frame f;
	feed(c, wire, (size_t)h + n + 2);
	ck_assert_int_eq(codec_next(c, &f), CODEC_FRAME);
	ck_assert_uint_eq(f.argc, 2);
	ck_assert_uint_eq(f.argvlen[1], n);
	ck_assert_mem_eq(f.argv[1], wire + h, n);
	ck_assert_int_eq(f.argv[1][n], '\0');
	expect_status(c, CODEC_MORE);
	codec_destroy(c);
	free(wire);
}
END_TEST

START_TEST(t_pipeline)
{
	struct codec *c = mk(65536, 64);
	feeds(c, "*1\r\n$4\r\nPING\r\n"
	    "*2\r\n$4\r\nLOCK\r\n$1\r\na\r\n"
	    "UNLOCK a tok\r\n"
	    "*3\r\n$6\r\nEXTEND\r\n$1\r\na\r\n$3\r\n100\r\n"
	    "QUIT\n");
	expect_frame(c, 0, 1, "PING");
	expect_frame(c, 0, 2, "LOCK", "a");
	expect_frame(c, 1, 3, "UNLOCK", "a", "tok");
	expect_frame(c, 0, 3, "EXTEND", "a", "100");
	expect_frame(c, 1, 1, "QUIT");
	expect_status(c, CODEC_MORE);
	ck_assert_uint_eq(codec_buffered(c), 0);
	codec_destroy(c);
}
END_TEST

START_TEST(t_pipeline_partial_tail)
{
	struct codec *c = mk(65536, 64);
	feeds(c, "*1\r\n$4\r\nPING\r\nPING\r\n*2\r\n$4\r\nLOCK\r\n$3\r\nab");
	expect_frame(c, 0, 1, "PING");
	ck_assert_uint_eq(codec_buffered(c), 6 + 20);
	expect_frame(c, 1, 1, "PING");
	ck_assert_uint_eq(codec_buffered(c), 20);
	expect_status(c, CODEC_MORE);
	ck_assert_uint_eq(codec_buffered(c), 20);
	feeds(c, "c\r");
	expect_status(c, CODEC_MORE);
	ck_assert_uint_eq(codec_buffered(c), 22);
	feeds(c, "\nPI");
	expect_frame(c, 0, 2, "LOCK", "abc");
	ck_assert_uint_eq(codec_buffered(c), 2);
	expect_status(c, CODEC_MORE);
	feeds(c, "NG\n");
	expect_frame(c, 1, 1, "PING");
	ck_assert_uint_eq(codec_buffered(c), 0);
	codec_destroy(c);
}
END_TEST

START_TEST(t_pipeline_many)
{
	/* Many small frames in one buffer: linear, not quadratic. */
	static const char mb[] = "*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n";
	static const char il[] = "PING x\r\n";
	size_t n = 100000;
	struct evbuffer *wire = evbuffer_new();
	for (size_t i = 0; i < n; i++) {
		if (i % 2 == 0)
			evbuffer_add(wire, LIT(mb));
		else
			evbuffer_add(wire, LIT(il));
	}
	struct codec *c = mk(65536, 64);
	feed(c, evbuffer_pullup(wire, -1), evbuffer_get_length(wire));
	struct codec_frame f;
	size_t count = 0;
	while (codec_next(c, &f) == CODEC_FRAME) {
		if (f.argc != 2 || f.is_inline != (int)(count % 2) ||
		    strcmp(f.argv[1], count % 2 ? "x" : "hi") != 0)
			ck_abort_msg("frame %zu is wrong", count);
		count++;
	}
	ck_assert_uint_eq(count, n);
	ck_assert_uint_eq(codec_buffered(c), 0);
	codec_destroy(c);
	evbuffer_free(wire);
}
END_TEST

START_TEST(t_empty_skipped)
{
	struct codec *c = mk(65536, 64);
	feeds(c, "\r\n\n  \t \r\n*0\r\n*-1\r\nPING\r\n*0\r\n\n");
	expect_frame(c, 1, 1, "PING");
	expect_status(c, CODEC_MORE);
	ck_assert_uint_eq(codec_buffered(c), 0);
	/* Only skipped input: nothing comes out, nothing stays buffered. */
	feeds(c, "\r\n*0\r\n \t\n*-1\r\n");
	expect_status(c, CODEC_MORE);
	ck_assert_uint_eq(codec_buffered(c), 0);
	/* An incomplete *0 waits like any header. */
	feeds(c, "*0\r");
	expect_status(c, CODEC_MORE);
	ck_assert_uint_eq(codec_buffered(c), 3);
	feeds(c, "\n*1\r\n$1\r\nx\r\n");
	expect_frame(c, 0, 1, "x");
	ck_assert_uint_eq(codec_buffered(c), 0);
	codec_destroy(c);
}
END_TEST

/* ---- inline commands ---- */

START_TEST(t_inline_basic)
{
	struct codec *c = mk(65536, 64);
	feeds(c, "SET k v\r\n");
	expect_frame(c, 1, 3, "SET", "k", "v");
	feeds(c, "PING\n");
	expect_frame(c, 1, 1, "PING");
	feeds(c, "  \tLOCK   k  TTL\t\t100   \r\n");
	expect_frame(c, 1, 4, "LOCK", "k", "TTL", "100");
	feeds(c, "a\tb\n");
	expect_frame(c, 1, 2, "a", "b");
	/* A stray CR inside the line is a blank; only "\r\n" ends a line. */
	feeds(c, "a\rb\r\r\n");
	expect_frame(c, 1, 2, "a", "b");
	/* Only a '*' first makes a multibulk frame. */
	feeds(c, " *1\r\n $3\r\nfoo\r\n");
	expect_frame(c, 1, 1, "*1");
	expect_frame(c, 1, 1, "$3");
	expect_frame(c, 1, 1, "foo");
	expect_status(c, CODEC_MORE);
	ck_assert_uint_eq(codec_buffered(c), 0);
	codec_destroy(c);
}
END_TEST

START_TEST(t_inline_waits_for_newline)
{
	struct codec *c = mk(65536, 64);
	feeds(c, "SET k");
	expect_status(c, CODEC_MORE);
	ck_assert_uint_eq(codec_buffered(c), 5);
	feeds(c, " v\r");
	expect_status(c, CODEC_MORE);
	ck_assert_uint_eq(codec_buffered(c), 8);
	feeds(c, "\n");
	expect_frame(c, 1, 3, "SET", "k", "v");
	ck_assert_uint_eq(codec_buffered(c), 0);
	codec_destroy(c);
}
END_TEST

START_TEST(t_inline_double_quotes)
{
	struct codec *c = mk(65536, 64);
	feeds(c, "SET \"a b\" \"c\\\"d\" \"\" \"x\ty\"\r\n");
	expect_frame(c, 1, 5, "SET", "a b", "c\"d", "", "x\ty");
	feeds(c, "\"a\"\t\"b\" \"c\"\n");
	expect_frame(c, 1, 3, "a", "b", "c");
	/* Quotes may start inside a word: ab"c d" is one word. */
	feeds(c, "ab\"c d\" x\"\"\r\n");
	expect_frame(c, 1, 2, "abc d", "x");
	/* A quoted word ending the line, before "\r\n". */
	feeds(c, "ECHO \"end\"\r\n");
	expect_frame(c, 1, 2, "ECHO", "end");
	codec_destroy(c);
}
END_TEST

START_TEST(t_inline_escapes)
{
	static const char want[] = "\n\r\t\b\a\\\"Az" "\xff" "\0" "qqx4g" "\\";
	struct codec *c = mk(65536, 64);
	struct codec_frame f;

	feeds(c, "ECHO \"\\n\\r\\t\\b\\a\\\\\\\"\\x41\\x7a\\xFF\\x00q\\q\\x4g\\\\\"\r\n");
	ck_assert_int_eq(codec_next(c, &f), CODEC_FRAME);
	ck_assert_uint_eq(f.argc, 2);
	ck_assert_str_eq(f.argv[0], "ECHO");
	ck_assert_uint_eq(f.argvlen[1], sizeof(want) - 1);
	ck_assert_mem_eq(f.argv[1], want, sizeof(want));	/* with the NUL after */

	/* \x with fewer than two hex digits is not an escape of a byte. */
	feeds(c, "ECHO \"\\x4\" \"\\x\" \"\\xg1\"\n");
	expect_frame(c, 1, 4, "ECHO", "x4", "x", "xg1");
	/* Escapes mean nothing outside quotes. */
	feeds(c, "ECHO a\\nb\n");
	expect_frame(c, 1, 2, "ECHO", "a\\nb");
	codec_destroy(c);
}
END_TEST

START_TEST(t_inline_single_quotes)
{
	struct codec *c = mk(65536, 64);
	feeds(c, "SET 'a b' 'it\\'s' '\\n' '' 'say \"hi\"'\r\n");
	expect_frame(c, 1, 6, "SET", "a b", "it's", "\\n", "", "say \"hi\"");
	feeds(c, "x'y z' 'a'\t'b'\n");
	expect_frame(c, 1, 3, "xy z", "a", "b");
	feeds(c, "\"it's\" 'a\"b'\n");
	expect_frame(c, 1, 2, "it's", "a\"b");
	codec_destroy(c);
}
END_TEST

START_TEST(t_inline_binary)
{
	static const char wire[] = "\x01\xfe\x80 a\0b\r\n";
	struct codec *c = mk(65536, 64);
	struct codec_frame f;

	feed(c, LIT(wire));
	ck_assert_int_eq(codec_next(c, &f), CODEC_FRAME);
	ck_assert_uint_eq(f.argc, 2);
	ck_assert_uint_eq(f.argvlen[0], 3);
	ck_assert_mem_eq(f.argv[0], "\x01\xfe\x80", 4);
	ck_assert_uint_eq(f.argvlen[1], 3);
	ck_assert_mem_eq(f.argv[1], "a\0b", 4);
	codec_destroy(c);
}
END_TEST

/* ---- split invariance ---- */

/* A stream with every kind of input, and the frames it must give. */
static const char mixed[] =
	"*2\r\n$4\r\nECHO\r\n$5\r\na\0\r\nb\r\n"
	"PING\n"
	"\r\n"
	"*0\r\n"
	"SET \"a b\" 'c\\'d' \"\\x41\\n\"\r\n"
	"*1\r\n$0\r\n\r\n"
	"  LOCK\tk  TTL 100 \r\n"
	"*-1\r\n"
	"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n";
static const char mixed_frames[] =
	"M2|4:ECHO|5:a\0\r\nb\n"
	"I1|4:PING\n"
	"I4|3:SET|3:a b|3:c'd|2:A\n\n"
	"M1|0:\n"
	"I4|4:LOCK|1:k|3:TTL|3:100\n"
	"M3|3:SET|1:k|10:0123456789\n";

START_TEST(t_split_whole)
{
	struct evbuffer *got = evbuffer_new();
	char *err;
	ck_assert_int_eq(run_whole(LIT(mixed), 65536, 64, got, &err), CODEC_MORE);
	ck_assert_ptr_null(err);
	assert_buf_eq(got, LIT(mixed_frames));
	evbuffer_free(got);
}
END_TEST

START_TEST(t_split_every_boundary)
{
	size_t n = sizeof(mixed) - 1;
	for (size_t k = 0; k <= n; k++) {
		struct evbuffer *got = evbuffer_new();
		char *err;
		size_t cut = k;
		ck_assert_int_eq(run_split(mixed, n, &cut, 1, 65536, 64, got, &err), CODEC_MORE);
		ck_assert_ptr_null(err);
		assert_buf_eq(got, LIT(mixed_frames));
		evbuffer_free(got);
	}
}
END_TEST

START_TEST(t_split_every_pair)
{
	size_t n = sizeof(mixed) - 1;
	for (size_t i = 0; i <= n; i++) {
		for (size_t j = i; j <= n; j++) {
			struct evbuffer *got = evbuffer_new();
			char *err;
			size_t cuts[2] = { i, j };
			ck_assert_int_eq(run_split(mixed, n, cuts, 2, 65536, 64, got, &err),
			    CODEC_MORE);
			ck_assert_ptr_null(err);
			assert_buf_eq(got, LIT(mixed_frames));
			evbuffer_free(got);
		}
	}
}
END_TEST

START_TEST(t_one_byte_at_a_time)
{
	struct evbuffer *got = evbuffer_new();
	char *err;
	ck_assert_int_eq(run_bytes(LIT(mixed), 65536, 64, got, &err), CODEC_MORE);
	ck_assert_ptr_null(err);
	assert_buf_eq(got, LIT(mixed_frames));
	evbuffer_free(got);
}
END_TEST

START_TEST(t_one_byte_buffered)
{
	/* Until the last byte, every byte fed stays buffered. */
	static const char wire[] = "*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n";
	static const char il[] = "LOCK \"a b\" WAIT 0\r\n";
	struct codec *c = mk(65536, 64);
	for (size_t i = 0; i < sizeof(wire) - 1; i++) {
		feed(c, wire + i, 1);
		if (i + 1 < sizeof(wire) - 1) {
			expect_status(c, CODEC_MORE);
			ck_assert_uint_eq(codec_buffered(c), i + 1);
		}
	}
	expect_frame(c, 0, 2, "PING", "hi");
	ck_assert_uint_eq(codec_buffered(c), 0);
	for (size_t i = 0; i < sizeof(il) - 1; i++) {
		feed(c, il + i, 1);
		if (i + 1 < sizeof(il) - 1) {
			expect_status(c, CODEC_MORE);
			ck_assert_uint_eq(codec_buffered(c), i + 1);
		}
	}
	expect_frame(c, 1, 4, "LOCK", "a b", "WAIT", "0");
	ck_assert_uint_eq(codec_buffered(c), 0);
	codec_destroy(c);
}
END_TEST

START_TEST(t_large_bulk_in_pieces)
{
	/*
	 * A 2 MiB bulk fed one byte at a time, asking for a frame after each:
	 * a parser that rescanned from the frame start would take hours.
	 */
	size_t n = 2 << 20;
	char *body = malloc(n);
	ck_assert_ptr_nonnull(body);
	for (size_t i = 0; i < n; i++)
		body[i] = (char)(i * 131 + (i >> 9));
	struct codec *c = mk(n + 64, 4);
	char hdr[64];
	int h = snprintf(hdr, sizeof(hdr), "*2\r\n$3\r\nSET\r\n$%zu\r\n", n);
	feed(c, hdr, (size_t)h);
	expect_status(c, CODEC_MORE);
	for (size_t i = 0; i < n; i++) {
		feed(c, body + i, 1);
		struct codec_frame f;
		if (codec_next(c, &f) != CODEC_MORE)
			ck_abort_msg("not MORE after %zu body bytes", i + 1);
	}
	feeds(c, "\r");
	expect_status(c, CODEC_MORE);
	ck_assert_uint_eq(codec_buffered(c), (size_t)h + n + 1);
	feeds(c, "\n");
	struct codec_frame f;
	ck_assert_int_eq(codec_next(c, &f), CODEC_FRAME);
	ck_assert_uint_eq(f.argvlen[1], n);
	ck_assert_mem_eq(f.argv[1], body, n);
	ck_assert_uint_eq(codec_buffered(c), 0);
	/* The large buffer is given back; the codec still works. */
	feeds(c, "PING\r\n");
	expect_frame(c, 1, 1, "PING");
	codec_destroy(c);
	free(body);
}
END_TEST

/*
 * Append a random request to wire and the frame it must give (if any) to
 * want. Covers multibulk with binary arguments of all sizes, inline lines
 * with blanks, quotes and escapes, and the inputs that are skipped. Large
 * multibulk arguments are shorter than big.
 */
static void
gen_request(struct evbuffer *wire, struct evbuffer *want, size_t big)
{
	static const char word_chars[] =
	    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-:.*$";
	uint32_t kind = rnd() % 12;

	if (kind < 7) {
		size_t argc = 1 + rnd() % 6;
		evbuffer_add_printf(wire, "*%zu\r\n", argc);
		evbuffer_add_printf(want, "M%zu", argc);
		for (size_t i = 0; i < argc; i++) {
			size_t len = rnd() % 5 == 0 ? rnd() % big : rnd() % 24;
			char *arg = malloc(len + 1);
			ck_assert_ptr_nonnull(arg);
			for (size_t j = 0; j < len; j++)
				arg[j] = (char)rnd();
			evbuffer_add_printf(wire, "$%zu\r\n", len);
			evbuffer_add(wire, arg, len);
			evbuffer_add(wire, "\r\n", 2);
			evbuffer_add_printf(want, "|%zu:", len);
			evbuffer_add(want, arg, len);
			free(arg);
		}
		evbuffer_add(want, "\n", 1);
	} else if (kind < 10) {
		size_t argc = 1 + rnd() % 5;
		static const char *const blanks[] = { " ", "\t", "  ", " \t ", "\t\t" };
		if (rnd() % 2)
			evbuffer_add_printf(wire, "%s", blanks[rnd() % 5]);
		evbuffer_add_printf(want, "I%zu", argc);
		for (size_t i = 0; i < argc; i++) {
			char word[16];
			size_t len = 1 + rnd() % 12;
			for (size_t j = 0; j < len; j++)
				word[j] = word_chars[rnd() % (sizeof(word_chars) - 1)];
			/* '*' would start a multibulk frame; '$', ':', '+'
			 * and '-' first on a line are RESP garbage */
			if (strchr("*$:+-", word[0]) != NULL)
				word[0] = 'w';
			if (i > 0)
				evbuffer_add_printf(wire, "%s", blanks[rnd() % 5]);
			switch (rnd() % 4) {
			case 0:		/* "wo rd" */
				word[len / 2] = ' ';
				evbuffer_add_printf(wire, "\"%.*s\"", (int)len, word);
				break;
			case 1:		/* 'wo\'rd' */
				word[len / 2] = '\'';
				evbuffer_add(wire, "'", 1);
				evbuffer_add(wire, word, len / 2);
				evbuffer_add(wire, "\\'", 2);
				evbuffer_add(wire, word + len / 2 + 1, len - len / 2 - 1);
				evbuffer_add(wire, "'", 1);
				break;
			case 2:		/* "wo\x0ard" */
				word[len / 2] = '\n';
				evbuffer_add(wire, "\"", 1);
				evbuffer_add(wire, word, len / 2);
				evbuffer_add(wire, "\\x0a", 4);
				evbuffer_add(wire, word + len / 2 + 1, len - len / 2 - 1);
				evbuffer_add(wire, "\"", 1);
				break;
			default:
				evbuffer_add(wire, word, len);
				break;
			}
			evbuffer_add_printf(want, "|%zu:", len);
			evbuffer_add(want, word, len);
		}
		if (rnd() % 2)
			evbuffer_add(wire, " ", 1);
		if (rnd() % 2)
			evbuffer_add(wire, "\r\n", 2);
		else
			evbuffer_add(wire, "\n", 1);
		evbuffer_add(want, "\n", 1);
	} else if (kind == 10) {
		static const char *const blank[] = { "\r\n", "\n", "  \r\n", "\t\n" };
		evbuffer_add_printf(wire, "%s", blank[rnd() % 4]);
	} else {
		evbuffer_add_printf(wire, "%s", rnd() % 2 ? "*0\r\n" : "*-1\r\n");
	}
}

START_TEST(t_random_chunks)
{
	/*
	 * Thousands of random requests fed in random pieces (some large, so
	 * the buffer compacts and grows under a partial frame), draining
	 * after every feed or only now and then.
	 */
	rng = 0x9e3779b97f4a7c15ULL + (uint64_t)_i;
	struct evbuffer *wire = evbuffer_new(), *want = evbuffer_new();
	for (int i = 0; i < 3000; i++)
		gen_request(wire, want, 5000);
	size_t len = evbuffer_get_length(wire);
	const char *data = (const char *)evbuffer_pullup(wire, -1);

	for (int round = 0; round < 4; round++) {
		struct codec *c = mk(65536, 64);
		struct evbuffer *got = evbuffer_new();
		size_t off = 0;
		while (off < len) {
			size_t max = round == 0 ? 16 : round == 1 ? 700 : 9000;
			size_t n = 1 + rnd() % max;
			if (n > len - off)
				n = len - off;
			feed(c, data + off, n);
			off += n;
			if ((round < 3 || rnd() % 4 == 0 || off == len) &&
			    drain(c, got) != CODEC_MORE)
				ck_abort_msg("error at byte %zu: %s", off, codec_error(c));
		}
		ck_assert_uint_eq(codec_buffered(c), 0);
		assert_bufs_eq(got, want);
		evbuffer_free(got);
		codec_destroy(c);
	}
	evbuffer_free(wire);
	evbuffer_free(want);
}
END_TEST

/*
 * Whatever the bytes hold, the result (frames, final status, error
 * sentence) is the same fed whole, one byte at a time or in random pieces,
 * and every error is a "Protocol error: " sentence.
 */
static void
check_split_invariance(const char *data, size_t len, size_t max_frame, size_t max_args)
{
	struct evbuffer *a = evbuffer_new(), *b = evbuffer_new(), *d = evbuffer_new();
	char *ea, *eb, *ed;
	enum codec_status sa = run_whole(data, len, max_frame, max_args, a, &ea);
	enum codec_status sb = run_bytes(data, len, max_frame, max_args, b, &eb);
	size_t cuts[3];
	for (size_t k = 0; k < 3; k++)
		cuts[k] = rnd() % (len + 1);
	for (size_t k = 1; k < 3; k++)		/* sort the three cuts */
		for (size_t m = k; m > 0 && cuts[m - 1] > cuts[m]; m--) {
			size_t t = cuts[m];
			cuts[m] = cuts[m - 1];
			cuts[m - 1] = t;
		}
	enum codec_status sd = run_split(data, len, cuts, 3, max_frame, max_args, d, &ed);

	ck_assert_int_ne(sa, CODEC_FRAME);
	ck_assert_int_eq(sa, sb);
	ck_assert_int_eq(sa, sd);
	assert_bufs_eq(b, a);
	assert_bufs_eq(d, a);
	assert_same_err(eb, ea);
	assert_same_err(ed, ea);
	if (ea != NULL)
		ck_assert_int_eq(strncmp(ea, "Protocol error: ", 16), 0);
	free(ea);
	free(eb);
	free(ed);
	evbuffer_free(a);
	evbuffer_free(b);
	evbuffer_free(d);
}

START_TEST(t_random_garbage)
{
	/* Random bytes heavy in protocol characters. */
	static const char alphabet[] = "**$$$\r\n\r\n\r\n-0123456789 \t\"'\\xaZ:+_\0\xff";
	rng = 0x1234567ULL + (uint64_t)_i * 7919;
	for (int iter = 0; iter < 300; iter++) {
		size_t len = 1 + rnd() % 120;
		char data[128];
		for (size_t i = 0; i < len; i++)
			data[i] = alphabet[rnd() % (sizeof(alphabet) - 1)];
		check_split_invariance(data, len, 8 + rnd() % 64, 1 + rnd() % 6);
	}
}
END_TEST

START_TEST(t_random_mutations)
{
	/*
	 * Valid requests with a few bytes changed, inserted or removed: this
	 * reaches every error of the codec, at every stage of a frame.
	 */
	static const char alphabet[] = "*$\r\n-019 \t\"'\\x:\0";
	rng = 0xfeedULL + (uint64_t)_i * 104729;
	for (int iter = 0; iter < 300; iter++) {
		struct evbuffer *wire = evbuffer_new(), *want = evbuffer_new();
		size_t nreq = 1 + rnd() % 4;
		for (size_t i = 0; i < nreq; i++)
			gen_request(wire, want, 40);
		size_t len = evbuffer_get_length(wire);
		char *data = malloc(len + 8);
		ck_assert_ptr_nonnull(data);
		memcpy(data, evbuffer_pullup(wire, -1), len);
		size_t nmut = 1 + rnd() % 3;
		for (size_t m = 0; m < nmut && len > 0; m++) {
			size_t at = rnd() % len;
			char ch = alphabet[rnd() % (sizeof(alphabet) - 1)];
			switch (rnd() % 3) {
			case 0:
				data[at] = ch;
				break;
			case 1:
				memmove(data + at + 1, data + at, len - at);
				data[at] = ch;
				len++;
				break;
			default:
				memmove(data + at, data + at + 1, len - at - 1);
				len--;
				break;
			}
		}
		check_split_invariance(data, len, 16 + rnd() % 400, 1 + rnd() % 8);
		free(data);
		evbuffer_free(wire);
		evbuffer_free(want);
	}
}
END_TEST

/* ---- protocol errors ---- */

struct error_case {
	const char *in;		/* the bytes fed */
	size_t inlen;		/* their number */
	size_t max_frame;	/* codec limits */
	size_t max_args;
	size_t frames;		/* frames returned before the error */
	const char *err;	/* the expected sentence */
};

#define E_MB	"Protocol error: invalid multibulk length"
#define E_BULK	"Protocol error: invalid bulk length"
#define E_CRLF	"Protocol error: bulk string not terminated by CRLF"
#define E_ARGS	"Protocol error: too many arguments"
#define E_QUOTE	"Protocol error: unbalanced quotes in request"
#define E_BIG64	"Protocol error: request too large (limit 64 bytes)"
#define ECASE(s, mf, ma, fr, e) { (s), sizeof(s) - 1, (mf), (ma), (fr), (e) }

static const struct error_case error_cases[] = {
	/* bad multibulk length */
	ECASE("*abc\r\n", 65536, 64, 0, E_MB),
	ECASE("*-2\r\n", 65536, 64, 0, E_MB),
	ECASE("*-0\r\n", 65536, 64, 0, E_MB),
	ECASE("*-1x", 65536, 64, 0, E_MB),
	ECASE("*-", 65536, 64, 0, NULL),	/* not known yet: see below */
	ECASE("*01\r\n", 65536, 64, 0, E_MB),
	ECASE("*\r\n", 65536, 64, 0, E_MB),
	ECASE("*+1\r\n", 65536, 64, 0, E_MB),
	ECASE("*1 \r\n", 65536, 64, 0, E_MB),
	ECASE("* 1\r\n", 65536, 64, 0, E_MB),
	ECASE("*1\rX", 65536, 64, 0, E_MB),
	ECASE("*1\n", 65536, 64, 0, E_MB),
	ECASE("*12345678901234567890\r\n", 0, 0, 0, E_MB),
	ECASE("*\x80", 65536, 64, 0, E_MB),
	/* bad bulk length */
	ECASE("*1\r\n$-1\r\n", 65536, 64, 0, E_BULK),
	ECASE("*1\r\n$-5\r\n", 65536, 64, 0, E_BULK),
	ECASE("*1\r\n$abc\r\n", 65536, 64, 0, E_BULK),
	ECASE("*1\r\n$\r\n", 65536, 64, 0, E_BULK),
	ECASE("*1\r\n$3\rX", 65536, 64, 0, E_BULK),
	ECASE("*1\r\n$3\n", 65536, 64, 0, E_BULK),
	ECASE("*1\r\n$03\r\nfoo\r\n", 65536, 64, 0, E_BULK),
	ECASE("*1\r\n$ 3\r\n", 65536, 64, 0, E_BULK),
	ECASE("*1\r\n$3 \r\n", 65536, 64, 0, E_BULK),
	ECASE("*1\r\n$12345678901234567890", 0, 0, 0, E_BULK),
	/* missing '$' */
	ECASE("*2\r\n$3\r\nfoo\r\n:1\r\n", 65536, 64, 0, "Protocol error: expected '$', got ':'"),
	ECASE("*1\r\nPING\r\n", 65536, 64, 0, "Protocol error: expected '$', got 'P'"),
	ECASE("*1\r\n\x01", 65536, 64, 0, "Protocol error: expected '$', got '\\x01'"),
	ECASE("*1\r\n\r\n", 65536, 64, 0, "Protocol error: expected '$', got '\\x0d'"),
	ECASE("*1\r\n*1\r\n", 65536, 64, 0, "Protocol error: expected '$', got '*'"),
	/* a RESP value outside an array */
	ECASE("$5\r\nhello\r\n", 65536, 64, 0, "Protocol error: expected '*', got '$'"),
	ECASE(":1\r\n", 65536, 64, 0, "Protocol error: expected '*', got ':'"),
	ECASE("+OK\r\n", 65536, 64, 0, "Protocol error: expected '*', got '+'"),
	ECASE("PING\r\n-ERR x\r\n", 65536, 64, 1, "Protocol error: expected '*', got '-'"),
	/* bulk string not terminated by CRLF */
	ECASE("*1\r\n$3\r\nfooX", 65536, 64, 0, E_CRLF),
	ECASE("*1\r\n$3\r\nfoo\rX", 65536, 64, 0, E_CRLF),
	ECASE("*1\r\n$3\r\nfoo\n", 65536, 64, 0, E_CRLF),
	ECASE("*1\r\n$3\r\nfoobar\r\n", 65536, 64, 0, E_CRLF),
	ECASE("*1\r\n$0\r\nx\r\n", 65536, 64, 0, E_CRLF),
	ECASE("*2\r\n$1\r\na\r\n$1\r\nbc\r\n", 65536, 64, 0, E_CRLF),
	/* oversize, known from the headers alone */
	ECASE("*1\r\n$100\r\n", 64, 64, 0, E_BIG64),
	ECASE("*1\r\n$55\r\n", 64, 64, 0, E_BIG64),		/* 4+5+55+2 = 66 */
	ECASE("*2\r\n$48\r\n", 64, 64, 0, E_BIG64),		/* 4+5+50+6 = 65 */
	ECASE("*10\r\n", 64, 64, 0, E_BIG64),		/* 5+10*6 = 65 */
	ECASE("*1\r\n$99999999999999\r\n", 64, 64, 0, E_BIG64),
	ECASE("*1000000000\r\n", 64, 0, 0, E_BIG64),
	/* oversize, known from the bytes buffered */
	ECASE("*1\r\n$12345", 10, 64, 0, "Protocol error: request too large (limit 10 bytes)"),
	ECASE("*1\r\n$12345X", 10, 64, 0, "Protocol error: request too large (limit 10 bytes)"),
	ECASE("aaaaaaaaaaaaaaaa", 16, 64, 0, "Protocol error: request too large (limit 16 bytes)"),
	ECASE("aaaaaaaaaaaaaaa\r\n", 16, 64, 0, "Protocol error: request too large (limit 16 bytes)"),
	ECASE("PING\r\naaaaaaaaaaaaaaaa", 16, 64, 1, "Protocol error: request too large (limit 16 bytes)"),
	ECASE("\"unbalanced but too long", 16, 64, 0, "Protocol error: request too large (limit 16 bytes)"),
	/* too many arguments */
	ECASE("*3\r\n", 65536, 2, 0, E_ARGS),
	ECASE("*2\r\n$1\r\na\r\n$1\r\nb\r\n*3\r\n", 65536, 2, 1, E_ARGS),
	ECASE("a b c\r\n", 65536, 2, 0, E_ARGS),
	ECASE("a \"b\" 'c'\n", 65536, 2, 0, E_ARGS),
	ECASE("*1000000000\r\n", 0, 1000, 0, E_ARGS),
	/* unbalanced quotes */
	ECASE("SET \"abc\r\n", 65536, 64, 0, E_QUOTE),
	ECASE("SET 'abc\r\n", 65536, 64, 0, E_QUOTE),
	ECASE("\"a\"b\r\n", 65536, 64, 0, E_QUOTE),
	ECASE("'a'b\r\n", 65536, 64, 0, E_QUOTE),
	ECASE("\"a\"'b'\n", 65536, 64, 0, E_QUOTE),
	ECASE("SET \"a\nb\"\n", 65536, 64, 0, E_QUOTE),
	ECASE("ECHO \"abc\\\"\r\n", 65536, 64, 0, E_QUOTE),
	ECASE("ECHO 'abc\\'\r\n", 65536, 64, 0, E_QUOTE),
	ECASE("ECHO \"\\\r\n", 65536, 64, 0, E_QUOTE),
	ECASE("\"\n", 65536, 64, 0, E_QUOTE),
	/* garbage after good frames */
	ECASE("*1\r\n$3\r\nfoo\r\n*x", 65536, 64, 1, E_MB),
	ECASE("PING\r\n*\x80\r\n", 65536, 64, 1, E_MB),
	ECASE("PING\r\n\r\n*0\r\n*1\r\n$1\r\na\r\n*1\r\n$1\r\nab", 65536, 64, 2, E_CRLF),
	ECASE("*1\r\n$1\r\na\r\n*2\r\n$1\r\nb\r\n\x00", 65536, 64, 1,
	    "Protocol error: expected '$', got '\\x00'"),
};

START_TEST(t_error_cases)
{
	const struct error_case *ec = &error_cases[_i];
	struct evbuffer *a = evbuffer_new(), *b = evbuffer_new();
	char *ea, *eb;
	enum codec_status want = ec->err != NULL ? CODEC_ERROR : CODEC_MORE;

	ck_assert_int_eq(run_whole(ec->in, ec->inlen, ec->max_frame, ec->max_args, a, &ea), want);
	assert_same_err(ea, ec->err);
	ck_assert_msg(evbuffer_get_length(a) == 0 || ec->frames > 0, "unexpected frames");
	size_t nframes = 0;
	const char *p = (const char *)evbuffer_pullup(a, -1);
	for (size_t i = 0; i < evbuffer_get_length(a); i++) {
		/* Count frames by their "M<argc>|" / "I<argc>|" starts. */
		if ((i == 0 || p[i - 1] == '\n') && (p[i] == 'M' || p[i] == 'I'))
			nframes++;
	}
	ck_assert_uint_eq(nframes, ec->frames);

	/* The same fed one byte at a time. */
	ck_assert_int_eq(run_bytes(ec->in, ec->inlen, ec->max_frame, ec->max_args, b, &eb), want);
	assert_same_err(eb, ec->err);
	assert_bufs_eq(b, a);

	/* And cut at every single point. */
	for (size_t k = 0; k <= ec->inlen; k++) {
		struct evbuffer *d = evbuffer_new();
		char *ed;
		ck_assert_int_eq(run_split(ec->in, ec->inlen, &k, 1, ec->max_frame,
		    ec->max_args, d, &ed), want);
		assert_same_err(ed, ec->err);
		assert_bufs_eq(d, a);
		free(ed);
		evbuffer_free(d);
	}
	free(ea);
	free(eb);
	evbuffer_free(a);
	evbuffer_free(b);
}
END_TEST

START_TEST(t_error_sticky)
{
	struct codec *c = mk(65536, 64);
	feeds(c, "PING\r\n*1\r\n$x\r\nPING\r\n");
	expect_frame(c, 1, 1, "PING");
	ck_assert_ptr_null(codec_error(c));
	size_t before = codec_buffered(c);
	expect_status(c, CODEC_ERROR);
	ck_assert_str_eq(codec_error(c), E_BULK);
	expect_status(c, CODEC_ERROR);
	/* Good input after the error changes nothing. */
	feeds(c, "PING\r\n*1\r\n$4\r\nPING\r\n");
	expect_status(c, CODEC_ERROR);
	expect_status(c, CODEC_ERROR);
	ck_assert_str_eq(codec_error(c), E_BULK);
	ck_assert_uint_eq(codec_buffered(c), before);
	codec_destroy(c);
}
END_TEST

START_TEST(t_error_message_prefix)
{
	for (size_t i = 0; i < sizeof(error_cases) / sizeof(error_cases[0]); i++) {
		if (error_cases[i].err != NULL)
			ck_assert_int_eq(strncmp(error_cases[i].err, "Protocol error: ", 16), 0);
	}
}
END_TEST

/* ---- limits ---- */

START_TEST(t_limit_exact_frame)
{
	/* "*1\r\n$4\r\nPING\r\n" is 14 bytes: allowed at 14, not at 13. */
	struct codec *c = mk(14, 64);
	feeds(c, "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n");
	expect_frame(c, 0, 1, "PING");
	expect_frame(c, 0, 1, "PING");	/* the limit is per frame */
	expect_status(c, CODEC_MORE);
	codec_destroy(c);

	c = mk(13, 64);
	feeds(c, "*1\r\n$4\r\n");
	expect_status(c, CODEC_ERROR);
	ck_assert_str_eq(codec_error(c), "Protocol error: request too large (limit 13 bytes)");
	codec_destroy(c);

	/* "PING\r\n" is 6 bytes. */
	c = mk(6, 64);
	feeds(c, "PING\r");
	expect_status(c, CODEC_MORE);
	feeds(c, "\nPING\n");
	expect_frame(c, 1, 1, "PING");
	expect_frame(c, 1, 1, "PING");
	feeds(c, "PING\r\n");
	expect_frame(c, 1, 1, "PING");
	codec_destroy(c);

	c = mk(5, 64);
	feeds(c, "PING");
	expect_status(c, CODEC_MORE);
	feeds(c, "\r");
	expect_status(c, CODEC_ERROR);
	ck_assert_str_eq(codec_error(c), "Protocol error: request too large (limit 5 bytes)");
	codec_destroy(c);
}
END_TEST

START_TEST(t_limit_declared_count)
{
	/* 9 empty bulks after "*9\r\n" make 58 bytes: fits in 64. */
	struct codec *c = mk(64, 64);
	feeds(c, "*9\r\n");
	expect_status(c, CODEC_MORE);
	for (int i = 0; i < 9; i++)
		feeds(c, "$0\r\n\r\n");
	struct codec_frame f;
	ck_assert_int_eq(codec_next(c, &f), CODEC_FRAME);
	ck_assert_uint_eq(f.argc, 9);
	codec_destroy(c);
}
END_TEST

START_TEST(t_limit_args_exact)
{
	struct codec *c = mk(65536, 3);
	feeds(c, "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\na b c\r\n");
	expect_frame(c, 0, 3, "a", "b", "c");
	expect_frame(c, 1, 3, "a", "b", "c");
	codec_destroy(c);
}
END_TEST

START_TEST(t_no_limits)
{
	/* 0 means no limit, for both. */
	struct codec *c = mk(0, 0);
	size_t n = 20000;
	struct evbuffer *wire = evbuffer_new();
	evbuffer_add_printf(wire, "*%zu\r\n", n);
	for (size_t i = 0; i < n; i++)
		evbuffer_add_printf(wire, "$%zu\r\n%0*zu\r\n", (size_t)8, 8, i);
	feed(c, evbuffer_pullup(wire, -1), evbuffer_get_length(wire));
	struct codec_frame f;
	ck_assert_int_eq(codec_next(c, &f), CODEC_FRAME);
	ck_assert_uint_eq(f.argc, n);
	for (size_t i = 0; i < n; i++) {
		char want[16];
		snprintf(want, sizeof(want), "%08zu", i);
		ck_assert_str_eq(f.argv[i], want);
	}
	codec_destroy(c);
	evbuffer_free(wire);
}
END_TEST

/* ---- buffer accounting ---- */

START_TEST(t_buffered)
{
	struct codec *c = mk(65536, 64);
	ck_assert_uint_eq(codec_buffered(c), 0);
	feed(c, "", 0);
	ck_assert_uint_eq(codec_buffered(c), 0);
	feeds(c, "*1\r\n$4\r\nPI");
	ck_assert_uint_eq(codec_buffered(c), 10);
	expect_status(c, CODEC_MORE);
	ck_assert_uint_eq(codec_buffered(c), 10);
	feeds(c, "NG\r\nPING\r\nPI");
	ck_assert_uint_eq(codec_buffered(c), 22);
	expect_frame(c, 0, 1, "PING");
	ck_assert_uint_eq(codec_buffered(c), 8);
	expect_frame(c, 1, 1, "PING");
	ck_assert_uint_eq(codec_buffered(c), 2);
	expect_status(c, CODEC_MORE);
	ck_assert_uint_eq(codec_buffered(c), 2);
	/* Skipped input counts as consumed. */
	feeds(c, "NG\r\n\r\n*0\r\n\n");
	expect_frame(c, 1, 1, "PING");
	ck_assert_uint_eq(codec_buffered(c), 7);
	expect_status(c, CODEC_MORE);
	ck_assert_uint_eq(codec_buffered(c), 0);
	codec_destroy(c);
	codec_destroy(NULL);
}
END_TEST

START_TEST(t_compaction_under_partial_frame)
{
	/*
	 * Every feed completes a partial frame, brings a large one and starts
	 * another: the live bytes move or the buffer grows while a frame is
	 * half parsed, and each must still come out whole.
	 */
	static const char head[] = "*2\r\n$4\r\nLOCK\r\n$5\r\nab";
	struct codec *c = mk(1 << 20, 64);
	struct evbuffer *chunk = evbuffer_new();
	struct codec_frame f;

	feed(c, LIT(head));
	expect_status(c, CODEC_MORE);
	for (size_t round = 0; round < 60; round++) {
		size_t n = 500 + round * 377;
		evbuffer_add(chunk, LIT("cde\r\n"));
		evbuffer_add_printf(chunk, "*1\r\n$%zu\r\n", n);
		for (size_t i = 0; i < n; i++)
			evbuffer_add(chunk, (const char *)"0123456789" + (i + round) % 10, 1);
		evbuffer_add(chunk, LIT("\r\n"));
		evbuffer_add(chunk, LIT(head));
		feed(c, evbuffer_pullup(chunk, -1), evbuffer_get_length(chunk));
		evbuffer_drain(chunk, evbuffer_get_length(chunk));

		expect_frame(c, 0, 2, "LOCK", "abcde");
		ck_assert_int_eq(codec_next(c, &f), CODEC_FRAME);
		ck_assert_uint_eq(f.argc, 1);
		ck_assert_uint_eq(f.argvlen[0], n);
		for (size_t i = 0; i < n; i++)
			if (f.argv[0][i] != '0' + (int)((i + round) % 10))
				ck_abort_msg("byte %zu of round %zu is wrong", i, round);
		expect_status(c, CODEC_MORE);
		ck_assert_uint_eq(codec_buffered(c), sizeof(head) - 1);
	}
	codec_destroy(c);
	evbuffer_free(chunk);
}
END_TEST

/* ---- reply writers ---- */

static struct evbuffer *out;

static void
out_setup(void)
{
	out = evbuffer_new();
	ck_assert_ptr_nonnull(out);
}

static void
out_teardown(void)
{
	evbuffer_free(out);
	out = NULL;
}

/* The bytes written since the last check must be want. */
static void
expect_out(const char *want, size_t len)
{
	assert_buf_eq(out, want, len);
	evbuffer_drain(out, evbuffer_get_length(out));
}

START_TEST(t_reply_simple)
{
	codec_reply_simple(out, "OK");
	expect_out(LIT("+OK\r\n"));
	codec_reply_simple(out, "PONG");
	expect_out(LIT("+PONG\r\n"));
	codec_reply_simple(out, "");
	expect_out(LIT("+\r\n"));
	codec_reply_simple(out, "a\r\nb\nc\r");
	expect_out(LIT("+a  b c \r\n"));
}
END_TEST

START_TEST(t_reply_error)
{
	codec_reply_error(out, "ERR", "syntax error");
	expect_out(LIT("-ERR syntax error\r\n"));
	codec_reply_error(out, "ERR", "unknown command '%s', with %d args", "FOO", 2);
	expect_out(LIT("-ERR unknown command 'FOO', with 2 args\r\n"));
	codec_reply_error(out, "NOAUTH", "Authentication required.");
	expect_out(LIT("-NOAUTH Authentication required.\r\n"));
	codec_reply_error(out, "ERR", "%s", "Protocol error: invalid bulk length");
	expect_out(LIT("-ERR Protocol error: invalid bulk length\r\n"));
	/* CR and LF, from the format or the arguments, become spaces. */
	codec_reply_error(out, "ERR", "bad\r\nline\n%s", "x\ry\r\n");
	expect_out(LIT("-ERR bad  line x y  \r\n"));
	/* No code word. */
	codec_reply_error(out, NULL, "plain %d", 1);
	expect_out(LIT("-plain 1\r\n"));
	codec_reply_error(out, "", "plain");
	expect_out(LIT("-plain\r\n"));
	codec_reply_error(out, "LIMIT", "%s", "");
	expect_out(LIT("-LIMIT \r\n"));
}
END_TEST

START_TEST(t_reply_error_long)
{
	/* Longer than any stack buffer: formatted whole, CR/LF still replaced. */
	size_t n = 5000;
	char *arg = malloc(n + 1);
	char *want = malloc(n + 16);
	ck_assert_ptr_nonnull(arg);
	ck_assert_ptr_nonnull(want);
	for (size_t i = 0; i < n; i++)
		arg[i] = i % 100 == 99 ? '\n' : (char)('a' + i % 26);
	arg[n] = '\0';
	codec_reply_error(out, "ERR", "key %s", arg);
	memcpy(want, "-ERR key ", 9);
	for (size_t i = 0; i < n; i++)
		want[9 + i] = arg[i] == '\n' ? ' ' : arg[i];
	memcpy(want + 9 + n, "\r\n", 2);
	expect_out(want, n + 11);
	free(arg);
	free(want);
}
END_TEST

START_TEST(t_reply_int)
{
	codec_reply_int(out, 0);
	expect_out(LIT(":0\r\n"));
	codec_reply_int(out, 42);
	expect_out(LIT(":42\r\n"));
	codec_reply_int(out, -1);
	expect_out(LIT(":-1\r\n"));
	codec_reply_int(out, 1700000000123456LL);
	expect_out(LIT(":1700000000123456\r\n"));
	codec_reply_int(out, LLONG_MAX);
	expect_out(LIT(":9223372036854775807\r\n"));
	codec_reply_int(out, LLONG_MIN);
	expect_out(LIT(":-9223372036854775808\r\n"));
}
END_TEST

/* Every number of digits, both signs, at and around each power of ten, as
 * printf writes them. */
START_TEST(t_reply_int_digits)
{
	long long p = 1;
	for (int digits = 1; digits <= 19; digits++) {
		long long top = p <= LLONG_MAX / 10 ? p * 10 - 1 : LLONG_MAX;
		long long v[] = { p - 1, p, p + 1, p * 5 + 3, top };
		for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
			for (int sign = 1; sign >= -1; sign -= 2) {
				char want[32];
				int n = snprintf(want, sizeof(want), ":%lld\r\n", sign * v[i]);
				codec_reply_int(out, sign * v[i]);
				expect_out(want, (size_t)n);
			}
		}
		if (digits < 19)
			p *= 10;
	}
	codec_reply_array(out, 12345);
	expect_out(LIT("*12345\r\n"));
	codec_reply_bulk(out, "x", 1);
	expect_out(LIT("$1\r\nx\r\n"));
}
END_TEST

/* Text for people: a bulk string in RESP2, a verbatim string of format txt
 * (its length counting "txt:") in RESP3. */
START_TEST(t_reply_verbatim)
{
	codec_reply_verbatim(out, "id=1\n", 5, 2);
	expect_out(LIT("$5\r\nid=1\n\r\n"));
	codec_reply_verbatim(out, "id=1\n", 5, 3);
	expect_out(LIT("=9\r\ntxt:id=1\n\r\n"));
	codec_reply_verbatim(out, "", 0, 3);
	expect_out(LIT("=4\r\ntxt:\r\n"));
}
END_TEST

START_TEST(t_reply_bulk)
{
	codec_reply_bulk(out, "", 0);
	expect_out(LIT("$0\r\n\r\n"));
	codec_reply_bulk(out, NULL, 0);
	expect_out(LIT("$0\r\n\r\n"));
	codec_reply_bulk(out, "hello", 5);
	expect_out(LIT("$5\r\nhello\r\n"));
	codec_reply_bulk(out, "a\0\r\nb", 5);
	expect_out(LIT("$5\r\na\0\r\nb\r\n"));
	codec_reply_cstr(out, "dlockd");
	expect_out(LIT("$6\r\ndlockd\r\n"));
	codec_reply_cstr(out, "");
	expect_out(LIT("$0\r\n\r\n"));

	/* Lengths around every internal size, up to a large one. */
	static const size_t sizes[] = { 9, 10, 99, 100, 200, 221, 222, 223, 224, 255, 256,
	    257, 1000, 4096, 100000 };
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k];
		char *data = malloc(n);
		char *want = malloc(n + 32);
		ck_assert_ptr_nonnull(data);
		ck_assert_ptr_nonnull(want);
		for (size_t i = 0; i < n; i++)
			data[i] = (char)(i * 13);
		int h = snprintf(want, 32, "$%zu\r\n", n);
		memcpy(want + h, data, n);
		memcpy(want + h + n, "\r\n", 2);
		codec_reply_bulk(out, data, n);
		expect_out(want, (size_t)h + n + 2);
		free(data);
		free(want);
	}
}
END_TEST

START_TEST(t_reply_null)
{
	codec_reply_null(out, 2);
	expect_out(LIT("$-1\r\n"));
	codec_reply_null(out, 3);
	expect_out(LIT("_\r\n"));
	codec_reply_null_array(out, 2);
	expect_out(LIT("*-1\r\n"));
	codec_reply_null_array(out, 3);
	expect_out(LIT("_\r\n"));
}
END_TEST

START_TEST(t_reply_aggregates)
{
	codec_reply_array(out, 0);
	expect_out(LIT("*0\r\n"));
	codec_reply_array(out, 3);
	expect_out(LIT("*3\r\n"));
	codec_reply_array(out, 1000000);
	expect_out(LIT("*1000000\r\n"));
	codec_reply_map(out, 6, 2);
	expect_out(LIT("*12\r\n"));
	codec_reply_map(out, 6, 3);
	expect_out(LIT("%6\r\n"));
	codec_reply_map(out, 0, 2);
	expect_out(LIT("*0\r\n"));
	codec_reply_map(out, 0, 3);
	expect_out(LIT("%0\r\n"));
	codec_reply_push(out, 4, 2);
	expect_out(LIT("*4\r\n"));
	codec_reply_push(out, 4, 3);
	expect_out(LIT(">4\r\n"));
}
END_TEST

START_TEST(t_reply_composite)
{
	/* A LOCK grant, a STATUS map and a lost-lock push, in both protocols. */
	for (int proto = 2; proto <= 3; proto++) {
		codec_reply_array(out, 3);
		codec_reply_cstr(out, "0123456789abcdef0123456789abcdef");
		codec_reply_int(out, 17);
		codec_reply_int(out, 30000);
		expect_out(LIT("*3\r\n$32\r\n0123456789abcdef0123456789abcdef\r\n:17\r\n:30000\r\n"));

		codec_reply_map(out, 2, proto);
		codec_reply_cstr(out, "mode");
		codec_reply_cstr(out, "free");
		codec_reply_cstr(out, "ttl_ms");
		codec_reply_int(out, -1);
		if (proto == 2)
			expect_out(LIT("*4\r\n$4\r\nmode\r\n$4\r\nfree\r\n$6\r\nttl_ms\r\n:-1\r\n"));
		else
			expect_out(LIT("%2\r\n$4\r\nmode\r\n$4\r\nfree\r\n$6\r\nttl_ms\r\n:-1\r\n"));

		codec_reply_push(out, 4, proto);
		codec_reply_cstr(out, "lost");
		codec_reply_bulk(out, "k\0", 2);
		codec_reply_int(out, 9);
		codec_reply_simple(out, "renew failed");
		if (proto == 2)
			expect_out(LIT("*4\r\n$4\r\nlost\r\n$2\r\nk\0\r\n:9\r\n+renew failed\r\n"));
		else
			expect_out(LIT(">4\r\n$4\r\nlost\r\n$2\r\nk\0\r\n:9\r\n+renew failed\r\n"));

		codec_reply_null_array(out, proto);
		codec_reply_null(out, proto);
		if (proto == 2)
			expect_out(LIT("*-1\r\n$-1\r\n"));
		else
			expect_out(LIT("_\r\n_\r\n"));
	}
}
END_TEST

START_TEST(t_reply_roundtrip)
{
	/* An array of bulks the writers produce is a request the codec reads. */
	codec_reply_array(out, 3);
	codec_reply_cstr(out, "LOCK");
	codec_reply_bulk(out, "a\r\nb\0", 5);
	codec_reply_cstr(out, "SHARED");
	struct codec *c = mk(65536, 64);
	feed(c, evbuffer_pullup(out, -1), evbuffer_get_length(out));
	struct codec_frame f;
	ck_assert_int_eq(codec_next(c, &f), CODEC_FRAME);
	ck_assert_uint_eq(f.argc, 3);
	ck_assert_str_eq(f.argv[0], "LOCK");
	ck_assert_uint_eq(f.argvlen[1], 5);
	ck_assert_mem_eq(f.argv[1], "a\r\nb\0", 6);
	ck_assert_str_eq(f.argv[2], "SHARED");
	codec_destroy(c);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("codec");
	TCase *tc;

	suite_case(s, "multibulk", NULL, NULL, 0, SUITE_TESTS(t_mb_whole, t_mb_whole_or_not,
	    t_mb_empty_arg, t_mb_binary, t_mb_large_bulk, t_pipeline, t_pipeline_partial_tail,
	    t_empty_skipped));
	suite_case(s, "inline", NULL, NULL, 0, SUITE_TESTS(t_inline_basic,
	    t_inline_waits_for_newline, t_inline_double_quotes, t_inline_escapes,
	    t_inline_single_quotes, t_inline_binary));
	tc = suite_case(s, "split", NULL, NULL, 120, SUITE_TESTS(t_split_whole,
	    t_split_every_boundary, t_split_every_pair, t_one_byte_at_a_time,
	    t_one_byte_buffered));
	tcase_add_loop_test(tc, t_random_chunks, 0, 3);
	tcase_add_loop_test(tc, t_random_garbage, 0, 10);
	tcase_add_loop_test(tc, t_random_mutations, 0, 10);
	tc = suite_case(s, "errors", NULL, NULL, 60, SUITE_TESTS(t_error_sticky,
	    t_error_message_prefix));
	tcase_add_loop_test(tc, t_error_cases, 0,
	    (int)(sizeof(error_cases) / sizeof(error_cases[0])));
	suite_case(s, "limits", NULL, NULL, 0, SUITE_TESTS(t_limit_exact_frame,
	    t_limit_declared_count, t_limit_args_exact, t_no_limits));
	suite_case(s, "buffer", NULL, NULL, 300, SUITE_TESTS(t_buffered,
	    t_compaction_under_partial_frame, t_pipeline_many, t_large_bulk_in_pieces));
	suite_case(s, "replies", out_setup, out_teardown, 0, SUITE_TESTS(t_reply_simple,
	    t_reply_error, t_reply_error_long, t_reply_int, t_reply_int_digits, t_reply_bulk,
	    t_reply_verbatim, t_reply_null, t_reply_aggregates, t_reply_composite,
	    t_reply_roundtrip));
	return suite_run(s);
}
