/*
 * codec — RESP request frames in, RESP2/RESP3 replies out.
 *
 * The codec never touches a socket. The connection layer feeds it the bytes it
 * read (codec_feed) and asks for complete frames (codec_next), which yields a
 * frame, "need more" or a sticky protocol error. Requests are RESP arrays of
 * bulk strings, or inline commands: one line of words separated by blanks,
 * with "double" (C escapes \n \r \t \b \a \\ \" \xHH) and 'single' (only \')
 * quoting as redis-cli and Redis accept them; a closing quote must be followed
 * by a blank or the line end. Inline lines end with "\r\n" or "\n". A line
 * that starts with '$', ':', '+' or '-' is a RESP value outside an array,
 * not a command: a protocol error. Empty
 * lines and empty arrays (*0, *-1) are skipped, as Redis does.
 *
 * The reply writers append one RESP value to an evbuffer; proto is 2 or 3.
 */
#ifndef DLOCKD_CODEC_H
#define DLOCKD_CODEC_H

#include <stddef.h>

struct evbuffer;
struct codec;

enum codec_status {
	CODEC_ERROR = -1,	/* protocol error: see codec_error(); sticky */
	CODEC_MORE = 0,		/* no complete frame buffered yet */
	CODEC_FRAME = 1		/* *out holds a frame */
};

/* One request. Valid until the next codec_feed/codec_next/codec_destroy call. */
struct codec_frame {
	size_t argc;		/* number of arguments, at least 1 */
	char **argv;		/* arguments; each also NUL-terminated */
	size_t *argvlen;	/* their lengths (arguments are binary-safe) */
	int is_inline;		/* 1 if it came as an inline command */
};

/*
 * A new codec. max_frame_bytes bounds the wire size of one request (a larger
 * one is a protocol error as soon as that is known); max_args bounds argc.
 * 0 means no limit, for either. The caller owns it (codec_destroy).
 */
struct codec *codec_create(size_t max_frame_bytes, size_t max_args);
void codec_destroy(struct codec *c);

/* Append bytes read from the peer. After a protocol error the bytes are
 * dropped (the connection is to be closed). */
void codec_feed(struct codec *c, const void *data, size_t len);

/* The next complete frame, CODEC_MORE, or CODEC_ERROR (also on every later
 * call). */
enum codec_status codec_next(struct codec *c, struct codec_frame *out);

/* The error sentence, starting with "Protocol error: ", or NULL. */
const char *codec_error(const struct codec *c);

/* Bytes fed and not yet consumed by a returned frame (skipped empty lines and
 * arrays count as consumed). */
size_t codec_buffered(const struct codec *c);

/* Write the RESP header "<type><n>\r\n" (e.g. '*' and an argument count, '$'
 * and a length) at dst, which has room for 24 bytes; returns its length. The
 * redis backend builds its requests with it too. */
size_t codec_format_header(char *dst, char type, long long n);

/* Reply writers. Strings given to simple/error must not contain CR or LF
 * (codec_reply_error replaces them with spaces; so does codec_reply_simple,
 * as a safeguard). */
void codec_reply_simple(struct evbuffer *out, const char *s);
/* "-CODE message\r\n"; message is printf-formatted ("-message\r\n" when code
 * is NULL or ""). */
void codec_reply_error(struct evbuffer *out, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void codec_reply_int(struct evbuffer *out, long long v);
void codec_reply_bulk(struct evbuffer *out, const void *data, size_t len);
void codec_reply_cstr(struct evbuffer *out, const char *s);	/* bulk string of s */
/* Text for people: RESP3's verbatim string of format "txt", or a bulk string. */
void codec_reply_verbatim(struct evbuffer *out, const void *data, size_t len, int proto);
void codec_reply_null(struct evbuffer *out, int proto);		/* $-1 or _ */
void codec_reply_null_array(struct evbuffer *out, int proto);	/* *-1 or _ */
void codec_reply_array(struct evbuffer *out, size_t n);		/* *n header */
void codec_reply_map(struct evbuffer *out, size_t npairs, int proto); /* *2n or %n */
void codec_reply_push(struct evbuffer *out, size_t n, int proto);	/* *n or >n */

/* A copy of the len bytes at p written as one word of a reply's text, as
 * -LOST and CLIENT LIST write keys and names: printable ASCII stays, a
 * space, a backslash, a quote and any other byte become \xHH. The caller
 * frees it. */
char *codec_word(const void *p, size_t len);

#endif
