/*
 * dlock_cli — what the files of the dlock command share: its exit statuses,
 * its table of subcommands, and the helpers that parse, connect and report
 * for every subcommand (dlock_cli.c). dlock_cli_elect.c holds the election
 * commands that only look (leader, observe); campaign runs a command as
 * "run" does, in dlock_cli.c. dlock_cli_multi.c holds what run and lock do
 * with several keys (-k KEY -k KEY...) and the keys' environment of run's
 * COMMAND.
 */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include "dlock.h"

/*
 * dlock's own exit statuses: name, value, what it means (for --help). Keep
 * dlock.1's EXIT STATUS in step.
 */
#define EXIT_CODES \
	X(EXIT_INVALID,	1,  "validate: the fence is not a current holding") \
	X(EXIT_USAGE,	64, "usage error (EX_USAGE)") \
	X(EXIT_REFUSED,	65, "dlockd refused the request: ERR, NOTHELD, LIMIT... (EX_DATAERR)") \
	X(EXIT_NOHOST,	68, "cannot reach dlockd, or the connection failed (EX_NOHOST)") \
	X(EXIT_UNAVAIL,	69, "dlockd's backend is unavailable (BACKEND), or dlockd is full "\
	    "(EX_UNAVAILABLE)") \
	X(EXIT_OSERR,	71, "a system call failed in dlock (EX_OSERR)") \
	X(EXIT_IOERR,	74, "cannot write the output (EX_IOERR)") \
	X(EXIT_TEMPFAIL, 75, "not granted within --wait (EX_TEMPFAIL)") \
	X(EXIT_PROTOCOL, 76, "an unexpected reply from dlockd (EX_PROTOCOL)") \
	X(EXIT_NOPERM,	77, "wrong or missing password: NOAUTH, WRONGPASS, NOPERM "\
	    "(EX_NOPERM)") \
	X(EXIT_LOST,	79, "run, campaign: the lock was lost while COMMAND ran")

enum {
#define X(name, value, text) name = value,
	EXIT_CODES
#undef X
};

/* A subcommand: its name, usage line and handler. */
struct command {
	const char *name;	/* first word */
	const char *usage;	/* what follows "dlock NAME" in usage lines */
	/* run, lock, campaign, leader, observe: parse the arguments
	 * themselves; returns the exit status */
	int (*run)(const struct command *, int, char **);
	/* the others: exactly nargs non-empty arguments; argument num_arg (0:
	 * none) a number in [num_min, num_max], else "num_what: ARG" */
	int nargs;
	int num_arg;
	long long num_min, num_max;
	const char *num_what;
	/* after connecting: print the result; returns the exit status, or -1
	 * when the call failed (dlock_error says why) */
	int (*call)(dlock_t *d, char **argv, long long num);
};

/*
 * Print "dlock: MESSAGE" (printf-formatted) and the usage line of cmd (or
 * the general one) to stderr. Returns EXIT_USAGE.
 */
int usage_error(const struct command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Parse a decimal integer in [min, max]. 0, or -1. */
int parse_num(const char *s, long long min, long long max, long long *out);
/* 1 if s asks for help. */
int is_help(const char *s);
/*
 * The value of option name at argv[*i] ("--name VALUE" or "--name=VALUE"),
 * moving *i past it. NULL if argv[*i] is not that option; *missing is set
 * when the option is there without a value.
 */
const char *opt_value(int argc, char **argv, int *i, const char *name, int *missing);
/*
 * Connect to dlockd (-a, -p). NULL after printing why; *status is then the
 * exit status (a malformed address, a refused password, a daemon with too
 * many clients or one that does not speak the protocol, else unreachable).
 */
dlock_t *connect_or_report(int *status);
/* Report d's last error on stderr; returns the exit status for it. */
int report(const dlock_t *d);
/* The exit status after printing: 0, or EXIT_IOERR (said on stderr) when
 * the output could not be written. */
int flushed(void);

/* Print "dlock: WHAT: not granted within MS ms" (wait_ms -1: without
 * "within") on stderr. Returns EXIT_TEMPFAIL. */
int not_granted(const char *what, long long wait_ms);
/* Seconds since t0 (clock_ms), for messages. */
double secs_since(unsigned long long t0);
/*
 * Print on stderr who holds key and how many wait ahead: from STATUS key
 * FULL, or from plain STATUS when dlockd predates FULL. Says less when
 * dlockd does not answer (the LOCK that follows reports the failure).
 */
void describe_wait(dlock_t *d, const char *key);

/*
 * The keys[0..n) as one string for messages, "a, b, c". The caller owns
 * it; NULL with errno set when out of memory.
 */
char *keys_label(size_t n, const char *const *keys);
/*
 * Take keys[0..n) with o, all or none (dlock_lockall; g gets n grants):
 * its result. With verbose, as run -v for one key: try once, describe the
 * holders of each key that is held, wait for what is left of o->wait_ms,
 * and say when the keys were granted.
 */
int take_all(dlock_t *d, size_t n, const char *const *keys,
    const struct dlock_lock_opts *o, int verbose, struct dlock_grant *g);
/*
 * Put the keys[0..n) and their grants g into the environment of run's
 * COMMAND: one key, DLOCK_KEY, DLOCK_TOKEN, DLOCK_FENCE; several,
 * DLOCK_KEYS (n) and DLOCK_KEY_i, DLOCK_TOKEN_i, DLOCK_FENCE_i for i 1..n.
 * Those of the other form that COMMAND would inherit (a dlock run within
 * another) are removed. 0, or -1 with errno set.
 */
int keys_env(size_t n, const char *const *keys, const struct dlock_grant *g);

/* dlock leader KEY [--json] */
int cmd_leader(const struct command *cmd, int argc, char **argv);
/* dlock observe KEY [--json] [--count N] */
int cmd_observe(const struct command *cmd, int argc, char **argv);

#endif
