/*
 * codec — fuzz the RESP request codec (daemon/codec.c).
 *
 * The input is a few steering bytes and then the bytes of a connection. The
 * bytes are fed twice: whole, and in pieces (random cuts seeded by the
 * input, or one byte at a time), each codec drained after every feed. It
 * checks the codec's own promises:
 *   - a frame yields the same whatever the cuts: both runs give the same
 *     frames, the same error and the same bytes left buffered;
 *   - a frame has 1 to max_args arguments, each NUL-terminated, and a
 *     multibulk frame's arguments are bytes of its own stretch of input, in
 *     order;
 *   - a protocol error is sticky: later calls and feeds change nothing, and
 *     its sentence starts with "Protocol error: ";
 *   - no allocation is larger than what was fed calls for (an announced
 *     length is never allocated ahead of its bytes), watched through the
 *     sanitizer's malloc hook when there is one;
 *   - an error reply built from an argument is one line.
 */
#include <stdbool.h>
#include <string.h>

#include <event2/buffer.h>

#include "codec.h"
#include "fuzz.h"

/* The sanitizers' malloc hook, when the harness runs under one. */
int __sanitizer_install_malloc_and_free_hooks(void (*)(const volatile void *, size_t),
    void (*)(const volatile void *)) __attribute__((weak));

static size_t watch_bound;	/* while not 0: the largest allocation allowed */

/* Every allocation while the codec runs: none may exceed watch_bound. */
static void
on_malloc(const volatile void *p, size_t size)
{
	(void)p;
	if (watch_bound != 0 && size > watch_bound) {
		fprintf(stderr, "codec allocated %zu bytes, more than %zu\n", size, watch_bound);
		abort();
	}
}

/* What one run saw, to compare the runs. */
struct run {
	struct evbuffer *frames;	/* every frame, serialized */
	size_t nframes;			/* how many */
	char err[160];			/* the error, or "" */
	size_t buffered;		/* bytes left at the end */
};

static const uint8_t *data;	/* the connection's bytes */
static size_t size;		/* how many */
static size_t max_frame, max_args; /* the codec's limits (0: none) */

/* Drain c after fed bytes were fed in all; consumed is how many of them
 * frames and skipped lines used before. */
static void
drain(struct codec *c, struct run *r, size_t fed, size_t *consumed)
{
	struct codec_frame f;
	enum codec_status st;

	for (;;) {
		watch_bound = 8192 + 4 * fed;
		st = codec_next(c, &f);
		watch_bound = 0;
		if (st != CODEC_FRAME)
			break;
		size_t now = fed - codec_buffered(c), total = 0;
		FUZZ_CHECK(now > *consumed && now <= fed);
		FUZZ_CHECK(f.argc >= 1);
		FUZZ_CHECK(max_args == 0 || f.argc <= max_args);
		const uint8_t *at = data + *consumed, *end = data + now;
		for (size_t i = 0; i < f.argc; i++) {
			FUZZ_CHECK(f.argv[i][f.argvlen[i]] == '\0');
			total += f.argvlen[i];
			if (!f.is_inline) {
				/* the argument and its CRLF, further on in the stretch */
				const uint8_t *hit = NULL;
				for (const uint8_t *s = at; s + f.argvlen[i] + 2 <= end; s++)
					if (memcmp(s, f.argv[i], f.argvlen[i]) == 0 &&
					    s[f.argvlen[i]] == '\r' && s[f.argvlen[i] + 1] == '\n') {
						hit = s;
						break;
					}
				FUZZ_CHECK(hit != NULL);
				at = hit + f.argvlen[i] + 2;
			}
			evbuffer_add_printf(r->frames, "%zu:", f.argvlen[i]);
			evbuffer_add(r->frames, f.argv[i], f.argvlen[i]);
		}
		FUZZ_CHECK(total <= now - *consumed);
		evbuffer_add_printf(r->frames, "|%d\n", f.is_inline);
		r->nframes++;
		*consumed = now;

		/* an error reply quoting the argument stays one line */
		struct evbuffer *out = evbuffer_new();
		codec_reply_error(out, "ERR", "unknown command '%.*s'", (int)f.argvlen[0],
		    f.argv[0]);
		size_t len = evbuffer_get_length(out);
		const char *line = (const char *)evbuffer_pullup(out, -1);
		FUZZ_CHECK(len >= 3 && line[0] == '-' && memcmp(line + len - 2, "\r\n", 2) == 0);
		FUZZ_CHECK(memchr(line, '\n', len - 1) == NULL);
		evbuffer_free(out);
	}
	if (st == CODEC_ERROR) {
		const char *e = codec_error(c);
		FUZZ_CHECK(e != NULL && strncmp(e, "Protocol error: ", 16) == 0);
		snprintf(r->err, sizeof(r->err), "%s", e);
		/* sticky: another call, more bytes, and nothing moves */
		size_t before = codec_buffered(c);
		codec_feed(c, "PING\r\n", 6);
		FUZZ_CHECK(codec_next(c, &f) == CODEC_ERROR);
		FUZZ_CHECK(codec_buffered(c) == before);
		FUZZ_CHECK(strcmp(codec_error(c), r->err) == 0);
	} else {
		FUZZ_CHECK(st == CODEC_MORE && codec_error(c) == NULL);
	}
}

/* Feed the bytes in pieces: cut 0 whole, 1 random cuts (seed), 2 one byte
 * at a time. */
static void
run(struct run *r, int cut, uint32_t seed)
{
	struct codec *c = codec_create(max_frame, max_args);
	size_t off = 0, consumed = 0;

	r->frames = evbuffer_new();
	while (off < size && r->err[0] == '\0') {
		size_t n = size - off;
		if (cut == 2) {
			n = 1;
		} else if (cut == 1) {
			seed = seed * 1103515245u + 12345u;
			n = 1 + (seed >> 16) % (n < 64 ? n : 64);
		}
		watch_bound = 8192 + 4 * (off + n);
		codec_feed(c, data + off, n);
		watch_bound = 0;
		off += n;
		drain(c, r, off, &consumed);
	}
	r->buffered = r->err[0] != '\0' ? 0 : codec_buffered(c);
	FUZZ_CHECK(r->err[0] != '\0' || r->buffered <= size - consumed);
	codec_destroy(c);
}

int
LLVMFuzzerTestOneInput(const uint8_t *in, size_t len)
{
	static const size_t frames[] = { 0, 16, 64, 100, 1024, 65536, 0, 4096 };
	static const size_t args[] = { 0, 1, 3, 1024 };
	static bool hooked;
	struct fuzz_in f = { in, len };
	struct run whole = { 0 }, parts = { 0 };

	fuzz_quiet();
	if (!hooked && __sanitizer_install_malloc_and_free_hooks != NULL)
		(void)__sanitizer_install_malloc_and_free_hooks(on_malloc, NULL);
	hooked = true;
	unsigned mode = fuzz_byte(&f);
	uint32_t seed = fuzz_u16(&f);
	max_frame = frames[mode & 7];
	max_args = args[mode >> 3 & 3];
	data = f.p;
	size = f.n;

	run(&whole, 0, 0);
	run(&parts, (mode >> 5 & 1) ? 2 : 1, seed);
	FUZZ_CHECK(whole.nframes == parts.nframes);
	FUZZ_CHECK(strcmp(whole.err, parts.err) == 0);
	FUZZ_CHECK(whole.buffered == parts.buffered);
	size_t n = evbuffer_get_length(whole.frames);
	FUZZ_CHECK(n == evbuffer_get_length(parts.frames));
	FUZZ_CHECK(n == 0 || memcmp(evbuffer_pullup(whole.frames, -1),
	    evbuffer_pullup(parts.frames, -1), n) == 0);
	evbuffer_free(whole.frames);
	evbuffer_free(parts.frames);
	return 0;
}
