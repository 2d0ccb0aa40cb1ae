/*
 * log — leveled logging to stderr or a file (see log.h).
 *
 * It owns the log stream and the level. It must not allocate, so that it
 * can report running out of memory.
 */
#include "log.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

enum log_level log_min_level = LOG_LEVEL_INFO;
static FILE *log_fp;	/* destination; NULL means stderr */

static const char *const level_names[] = { "debug", "info", "warn", "error" };

int
log_level_parse(const char *name)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
		if (strcmp(name, level_names[i]) == 0)
			return (int)i;
	return -1;
}

const char *
log_level_name(enum log_level level)
{
	return level_names[level];
}

/* libevent's own messages, at the matching level. */
static void
log_event_cb(int severity, const char *msg)
{
	switch (severity) {
	case EVENT_LOG_DEBUG: log_debug("libevent: %s", msg); break;
	case EVENT_LOG_MSG: log_info("libevent: %s", msg); break;
	case EVENT_LOG_WARN: log_warn("libevent: %s", msg); break;
	default: log_error("libevent: %s", msg); break;
	}
}

int
log_init(enum log_level level, const char *path)
{
	log_set_level(level);
	event_set_log_callback(log_event_cb);
	return log_open(path);
}

void
log_set_level(enum log_level level)
{
	log_min_level = level;
}

int
log_open(const char *path)
{
	if (path == NULL || *path == '\0' || strcmp(path, "-") == 0) {
		log_close();
		return 0;
	}
	FILE *fp = fopen(path, "ae");
	if (fp == NULL) {
		log_error("cannot open log file %s: %s", path, strerror(errno));
		return -1;
	}
	setvbuf(fp, NULL, _IOLBF, 0);
	log_close();
	log_fp = fp;
	return 0;
}

void
log_close(void)
{
	if (log_fp != NULL)
		fclose(log_fp);
	log_fp = NULL;
}

void
log_vwrite(enum log_level level, const char *fmt, va_list ap)
{
	if (level < log_min_level)
		return;
	FILE *fp = log_fp != NULL ? log_fp : stderr;
	struct timespec ts;
	struct tm tm;
	char stamp[32];
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
	flockfile(fp);
	fprintf(fp, "%s.%03ldZ %-5s ", stamp, ts.tv_nsec / 1000000, level_names[level]);
	vfprintf(fp, fmt, ap);
	fputc('\n', fp);
	funlockfile(fp);
}

void
log_write(enum log_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_vwrite(level, fmt, ap);
	va_end(ap);
}

const char *
log_escape(char *buf, size_t size, const void *s, size_t len, int flags)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = s;
	size_t o = 0;
	if (size == 0)
		return buf;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = p[i];
		bool plain = c > 0x20 && c < 0x7f && c != '\\' && c != '\'' && c != '"';
		if (c == ' ' && !(flags & LOG_ESC_SPACE))
			plain = true;
		size_t need = plain ? 1 : 4;
		/* keep room for "..." unless this is the last byte */
		if (o + need + (i + 1 < len ? 3 : 0) >= size) {
			if (o + 3 < size) {
				memcpy(buf + o, "...", 3);
				o += 3;
			}
			break;
		}
		if (plain) {
			buf[o++] = (char)c;
		} else {
			buf[o++] = '\\';
			buf[o++] = 'x';
			buf[o++] = hex[c >> 4];
			buf[o++] = hex[c & 15];
		}
	}
	buf[o] = '\0';
	return buf;
}

void
log_fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_vwrite(LOG_LEVEL_ERROR, fmt, ap);
	va_end(ap);
	exit(1);
}
