/*
 * metrics — the daemon's own counters for INFO, declared once.
 */
#ifndef DLOCKD_METRICS_H
#define DLOCKD_METRICS_H

#include <stdint.h>

/* X(name, help) for every counter. */
#define METRICS(X) \
	X(total_connections, "connections accepted") \
	X(rejected_connections, "connections refused at max_clients") \
	X(commands_total, "commands processed") \
	X(protocol_errors_total, "connections closed for a protocol error") \
	X(idle_timeouts_total, "sessions closed for sessions.idle_timeout_ms")

struct metrics {
#define METRICS_FIELD(name, help) uint64_t name;
	METRICS(METRICS_FIELD)
#undef METRICS_FIELD
};

extern struct metrics metrics;

#endif
