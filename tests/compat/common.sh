# Sourced by tests/compat/run.sh and tests/compat/etcd35.sh (which set
# HERE, their directory, first): go to the top of the source tree (TOP)
# with BUILD made absolute, then run the integration tests in the
# background with their output shown as it comes (follow), stop them on
# SIGINT or SIGTERM once on_signals() ran, and read their result
# (read_result). The sourcing script sets its own EXIT trap.
TOP=$(cd "$HERE/../.." && pwd)
cd "$TOP" || exit 1
BUILD=${BUILD:-build}
mkdir -p "$BUILD" || exit 1
BUILD=$(cd "$BUILD" && pwd)
. "$HERE/../counts.sh"

child=""			# the integration run.sh running, if any

# stopped STATUS: a signal; the integration run.sh stops the servers and
# daemons it started (by their pids), then this exits with STATUS
stopped() {
	if [ -n "$child" ]; then
		kill -TERM "$child" 2>/dev/null
		wait "$child"
	fi
	exit "$1"
}

# on_signals: from now on SIGINT and SIGTERM go to stopped
on_signals() {
	trap 'stopped 130' INT
	trap 'stopped 143' TERM
}

# follow OUT COMMAND...: run COMMAND in the background (so that a signal is
# handled at once, see stopped), its output into the file OUT and shown as
# it comes; returns once it has ended
follow() {
	follow_out=$1
	shift
	"$@" </dev/null > "$follow_out" 2>&1 &
	child=$!
	tail -n +1 -f --pid=$child "$follow_out" &
	follow_tail=$!
	wait $child
	child=""
	wait $follow_tail
}

# read_result OUT: the integration tests' result in the file OUT: sets
# result ("N passed, M failed", or "no result"); returns 1 unless nothing
# failed
read_result() {
	if summary_counts integration "$(cat "$1")"; then
		result=$counts_line
		[ "$counts_failed" -eq 0 ]
	else
		result="no result"
		return 1
	fi
}
