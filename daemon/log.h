/*
 * log — leveled logging to stderr or a file.
 *
 * log_debug() costs one branch when debug is off. Messages from libevent are
 * routed here too (log_init installs event_set_log_callback).
 */
#ifndef DLOCKD_LOG_H
#define DLOCKD_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum log_level { LOG_LEVEL_DEBUG, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

/* The level below which messages are dropped; read by the macros. */
extern enum log_level log_min_level;

/* Parse "debug", "info", "warn" or "error"; -1 if it is none of them. */
int log_level_parse(const char *name);
const char *log_level_name(enum log_level level);

/* Set the level and the destination (NULL or "" or "-": stderr). 0 or -1. */
int log_init(enum log_level level, const char *path) __attribute__((warn_unused_result));
/* Set the level from now on. */
void log_set_level(enum log_level level);
/* Write to path from now on (NULL or "" or "-": stderr), opened anew even if
 * it is the file in use (a log rotated by renaming it). If it cannot be
 * opened, the destination stays as it was: -1 after logging why there. */
int log_open(const char *path) __attribute__((warn_unused_result));
void log_close(void);

void log_write(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void log_vwrite(enum log_level level, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));
/* Log at error level and exit(1). */
void log_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* log_escape() flags. */
#define LOG_ESC_SPACE 1		/* escape spaces too (a key inside a reply's words) */

/* Bytes a caller should give log_escape() for a key in a log line. */
#define LOG_KEY_BUF 256

/*
 * Write len bytes of s into buf (size bytes, NUL included) so that they cannot
 * break a line or be mistaken for other text: printable ASCII stays, every
 * other byte, a backslash and a quote become \xHH. What does not fit ends in
 * "...". Returns buf. A key a client chose is always logged through it: a CR
 * or LF in a key must not forge log lines.
 */
const char *log_escape(char *buf, size_t size, const void *s, size_t len, int flags);

#define log_debug(...) do { if (log_min_level <= LOG_LEVEL_DEBUG) \
	log_write(LOG_LEVEL_DEBUG, __VA_ARGS__); } while (0)
#define log_info(...) do { if (log_min_level <= LOG_LEVEL_INFO) \
	log_write(LOG_LEVEL_INFO, __VA_ARGS__); } while (0)
#define log_warn(...) log_write(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_error(...) log_write(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
