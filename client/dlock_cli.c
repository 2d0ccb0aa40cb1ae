/*
 * dlock — command-line client of dlockd.
 *
 *	dlock [-a ADDR] [-p PASSWORD] COMMAND ...
 *
 * "dlock run KEY -- COMMAND" holds a lock while COMMAND runs (like flock(1)
 * or "consul lock"); the other commands map one to one onto the protocol.
 *
 * Exit status: 0 ok, 1 an error from dlockd or the command, 2 usage error,
 * 69 (EX_UNAVAILABLE) cannot reach dlockd, 75 (EX_TEMPFAIL) not granted in
 * time. "run" exits with COMMAND's status (128 + signal if it was killed).
 */
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "dlock.h"

#ifndef DLOCKD_VERSION
#define DLOCKD_VERSION "0.1.0"
#endif

#define EXIT_DAEMON	1	/* an error from dlockd or the command */
#define EXIT_USAGE	2	/* bad command line */
#define EXIT_UNAVAIL	69	/* EX_UNAVAILABLE: cannot reach dlockd */
#define EXIT_TEMPFAIL	75	/* EX_TEMPFAIL: not granted in time */

#define DETACH_DEFAULT_TTL_MS 60000	/* "lock" without --ttl */

/* A subcommand: its name, usage line and handler. */
struct command {
	const char *name;	/* first word */
	const char *usage;	/* what follows "dlock NAME" in usage lines */
	int (*run)(const struct command *, int, char **);	/* returns the exit status */
};

static const char *opt_addr;		/* -a, or NULL for $DLOCK_ADDR / default */
static const char *opt_password;	/* -p, or $DLOCK_PASSWORD, or NULL */
static int selfpipe_w = -1;		/* write end of the self-pipe of "run" */

static const char usage_main[] =
    "usage: dlock [-a ADDR] [-p PASSWORD] COMMAND [ARGS...]\n";

static const char help_text[] =
    "Take and inspect locks held by dlockd.\n"
    "\n"
    "Options:\n"
    "  -a, --addr ADDR          dlockd address: HOST:PORT, [IPV6]:PORT, unix:PATH\n"
    "                           (default: $DLOCK_ADDR, else 127.0.0.1:7480)\n"
    "  -p, --password PASSWORD  password (default: $DLOCK_PASSWORD)\n"
    "  -h, --help               show this help\n"
    "      --version            show the version\n"
    "\n"
    "Commands:\n"
    "  run [--ttl MS] [--wait MS] [--shared | --limit N] KEY -- COMMAND [ARGS...]\n"
    "        run COMMAND while holding KEY; the lock is released when it ends\n"
    "  lock [--ttl MS] [--wait MS] [--shared | --limit N] KEY\n"
    "        take a detached lock (TTL default 60000 ms); prints token and fence\n"
    "  unlock KEY TOKEN          release a lock by its token; prints holds left\n"
    "  extend KEY MS TOKEN       set the lease to MS from now; prints the new TTL\n"
    "  status KEY                show the state of KEY\n"
    "  validate KEY FENCE        print 1 (exit 0) if FENCE holds KEY, else 0 (exit 1)\n"
    "  info                      show the server's INFO\n"
    "  ping                      check the connection; prints PONG\n"
    "\n"
    "Exit status: 0 ok, 1 error, 2 usage error, 69 dlockd unavailable,\n"
    "75 not granted within --wait; run: COMMAND's status (128+N if killed by signal N).\n";

/*
 * Print "dlock: MESSAGE" (printf-formatted) and the usage line of cmd (or
 * the general one) to stderr. Returns 2.
 */
static int __attribute__((format(printf, 2, 3)))
usage_error(const struct command *cmd, const char *fmt, ...)
{
	va_list ap;

	fputs("dlock: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (cmd != NULL)
		fprintf(stderr, "usage: dlock [-a ADDR] [-p PASSWORD] %s %s\n",
		    cmd->name, cmd->usage);
	else
		fputs(usage_main, stderr);
	fputs("Try 'dlock --help' for more information.\n", stderr);
	return EXIT_USAGE;
}

/* Parse a decimal integer in [min, max]. 0, or -1. */
static int
parse_num(const char *s, long long min, long long max, long long *out)
{
	char *end;
	long long v;

	if (*s == '\0' || (*s != '-' && (*s < '0' || *s > '9')))
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

/*
 * Connect to dlockd. NULL after printing why; *status is then the exit
 * status (2 for a malformed address, 1 when dlockd refused us, else 69).
 */
static dlock_t *
connect_or_report(int *status)
{
	char err[512];
	dlock_t *d;

	d = dlock_connect(opt_addr, opt_password, err, sizeof(err));
	if (d == NULL) {
		fprintf(stderr, "dlock: %s\n", err);
		*status = errno == EINVAL ? EXIT_USAGE :
		    errno == EACCES ? EXIT_DAEMON : EXIT_UNAVAIL;
	}
	return d;
}

/* Report d's last error; returns the exit status for it. */
static int
report(const dlock_t *d)
{
	const char *code = dlock_error_code(d);

	fprintf(stderr, "dlock: %s\n", dlock_error(d));
	if (strcmp(code, "IO") == 0)
		return EXIT_UNAVAIL;
	if (strcmp(code, "ARG") == 0)
		return EXIT_USAGE;
	return EXIT_DAEMON;
}

/* 1 if s asks for help. */
static int
is_help(const char *s)
{
	return strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0;
}

/*
 * The value of option name at argv[*i] ("--name VALUE" or "--name=VALUE"),
 * moving *i past it. NULL if argv[*i] is not that option; *missing is set
 * when the option is there without a value.
 */
static const char *
opt_value(int argc, char **argv, int *i, const char *name, int *missing)
{
	size_t n = strlen(name);
	const char *a = argv[*i];

	if (strncmp(a, name, n) != 0)
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (a[n] != '\0')
		return NULL;
	if (*i + 1 >= argc) {
		*missing = 1;
		return NULL;
	}
	(*i)++;
	return argv[*i];
}

/*
 * Parse the options of run and lock, starting at argv[*i] and stopping at
 * the first non-option (the key) or after "--". 0, or the exit status of a
 * usage error (printed).
 */
static int
parse_lock_opts(const struct command *cmd, int argc, char **argv, int *i,
    struct dlock_lock_opts *o)
{
	long long v;

	for (; *i < argc; (*i)++) {
		const char *a = argv[*i], *val;
		int missing = 0;

		if (strcmp(a, "--") == 0) {
			(*i)++;
			break;
		}
		if (a[0] != '-' || a[1] == '\0')
			break;
		if (is_help(a)) {
			printf("usage: dlock [-a ADDR] [-p PASSWORD] %s %s\n",
			    cmd->name, cmd->usage);
			exit(0);
		}
		if ((val = opt_value(argc, argv, i, "--ttl", &missing)) != NULL) {
			if (parse_num(val, 1, LLONG_MAX, &v) < 0)
				return usage_error(cmd, "--ttl: not a positive number of milliseconds: %s", val);
			o->ttl_ms = v;
		} else if ((val = opt_value(argc, argv, i, "--wait", &missing)) != NULL) {
			if (parse_num(val, 0, LLONG_MAX, &v) < 0)
				return usage_error(cmd, "--wait: not a number of milliseconds: %s", val);
			o->wait_ms = v;
		} else if ((val = opt_value(argc, argv, i, "--limit", &missing)) != NULL) {
			if (parse_num(val, 1, 1000000, &v) < 0)
				return usage_error(cmd, "--limit: not a number from 1 to 1000000: %s", val);
			o->limit = (int)v;
		} else if (strcmp(a, "--shared") == 0) {
			o->shared = 1;
		} else if (missing) {
			return usage_error(cmd, "option %s needs a value", a);
		} else {
			return usage_error(cmd, "unknown option %s", a);
		}
	}
	if (o->shared && o->limit > 0)
		return usage_error(cmd, "%s", "--shared and --limit cannot be combined");
	return 0;
}

/* Print the not-granted message for key. Returns 75. */
static int
not_granted(const char *key, long long wait_ms)
{
	if (wait_ms >= 0)
		fprintf(stderr, "dlock: %s: not granted within %lld ms\n", key, wait_ms);
	else
		fprintf(stderr, "dlock: %s: not granted\n", key);
	return EXIT_TEMPFAIL;
}

/* ---- run ---- */

/* Signal handler of run: note the signal in the self-pipe. */
static void
on_signal(int sig, siginfo_t *si, void *uctx)
{
	unsigned char msg[2];
	int saved = errno;
	ssize_t r;

	(void)uctx;
	msg[0] = (unsigned char)sig;
#ifdef SI_KERNEL
	/* Sent by the terminal to the whole foreground group, child included. */
	msg[1] = si != NULL && si->si_code == SI_KERNEL;
#else
	msg[1] = 0;
	(void)si;
#endif
	r = write(selfpipe_w, msg, sizeof(msg));	/* full pipe: a wake-up is pending */
	(void)r;
	errno = saved;
}

/* The signals run watches, and how they were handled before. */
static const int run_sigs[] = { SIGCHLD, SIGINT, SIGTERM, SIGHUP };
static struct sigaction run_saved[sizeof(run_sigs) / sizeof(run_sigs[0])];

/*
 * Catch the signals run watches, or (install 0) put back how they were
 * handled before. A signal that was ignored (nohup, a background job of a
 * shell) stays ignored, as the command would have it.
 */
static int
set_signals(int install)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NOCLDSTOP;
	for (size_t i = 0; i < sizeof(run_sigs) / sizeof(run_sigs[0]); i++) {
		if (!install) {
			if (sigaction(run_sigs[i], &run_saved[i], NULL) < 0)
				return -1;
			continue;
		}
		if (sigaction(run_sigs[i], NULL, &run_saved[i]) < 0)
			return -1;
		if (run_sigs[i] != SIGCHLD && run_saved[i].sa_handler == SIG_IGN)
			continue;
		if (sigaction(run_sigs[i], &sa, NULL) < 0)
			return -1;
	}
	return 0;
}

/*
 * In the child: become COMMAND. Never returns. d is the child's copy of the
 * handle: closing it leaves the parent's connection open.
 */
static void __attribute__((noreturn))
run_child(dlock_t *d, char **argv, const sigset_t *oldmask, pid_t parent)
{
	int e;

	dlock_close(d);
	(void)set_signals(0);
	sigprocmask(SIG_SETMASK, oldmask, NULL);
#ifdef __linux__
	/* If dlock dies, its lock is released: COMMAND must not run on. */
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) == 0 && getppid() != parent)
		_exit(EXIT_DAEMON);
#else
	(void)parent;
#endif
	execvp(argv[0], argv);
	e = errno;
	fprintf(stderr, "dlock: %s: %s\n", argv[0], strerror(e));
	_exit(e == ENOENT ? 127 : 126);
}

/* The exit status for a wait() status: the code, or 128 + signal. */
static int
exit_status(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return EXIT_DAEMON;
}

/*
 * Wait for child while watching the connection and the signals. Forwards
 * SIGINT/SIGTERM/SIGHUP; on a "lost" push or a dropped connection sends
 * SIGTERM and sets *lost. Returns the child's wait() status.
 */
static int
run_wait(dlock_t *d, const char *key, pid_t child, int sigr, int *lost)
{
	int status = 0;

	for (;;) {
		struct pollfd pfd[2] = {
			{ .fd = sigr, .events = POLLIN },
			{ .fd = *lost ? -1 : dlock_fd(d), .events = POLLIN },
		};
		unsigned char buf[128];
		long long fence = 0;
		ssize_t n;
		pid_t w;
		int r;

		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			/* Cannot watch any more: just wait for the command. */
			fprintf(stderr, "dlock: poll: %s\n", strerror(errno));
			while (waitpid(child, &status, 0) < 0 && errno == EINTR)
				;
			return status;
		}
		if (pfd[0].revents & POLLIN) {
			while ((n = read(sigr, buf, sizeof(buf))) > 0)
				for (ssize_t i = 0; i + 1 < n; i += 2)
					if (buf[i] != SIGCHLD && !buf[i + 1])
						kill(child, buf[i]);
			while ((w = waitpid(child, &status, WNOHANG)) < 0 && errno == EINTR)
				;
			if (w == child)
				return status;
		}
		if (*lost || !(pfd[1].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		r = dlock_poll_lost(d, NULL, 0, &fence);
		if (r == 0)
			continue;
		if (r > 0)
			fprintf(stderr, "dlock: %s: the lock was lost (fence %lld), "
			    "stopping the command\n", key, fence);
		else
			fprintf(stderr, "dlock: %s: %s; the lock is gone, "
			    "stopping the command\n", key, dlock_error(d));
		*lost = 1;
		kill(child, SIGTERM);
	}
}

/* dlock run [opts] KEY [--] COMMAND [ARGS...] */
static int
cmd_run(const struct command *cmd, int argc, char **argv)
{
	struct dlock_lock_opts o = DLOCK_LOCK_OPTS_INIT;
	struct dlock_grant g;
	sigset_t block, oldmask;
	char fence[24];
	const char *key;
	int i = 1, r, status, lost = 0, p[2];
	pid_t child, self = getpid();
	dlock_t *d;

	if ((r = parse_lock_opts(cmd, argc, argv, &i, &o)) != 0)
		return r;
	if (i >= argc)
		return usage_error(cmd, "%s", "missing KEY");
	key = argv[i++];
	if (i < argc && strcmp(argv[i], "--") == 0)
		i++;
	if (i >= argc)
		return usage_error(cmd, "%s", "missing COMMAND");
	if (*key == '\0')
		return usage_error(cmd, "%s", "KEY is empty");

	if ((d = connect_or_report(&status)) == NULL)
		return status;
	if ((r = dlock_lock(d, key, &o, &g)) <= 0) {
		status = r == 0 ? not_granted(key, o.wait_ms) : report(d);
		dlock_close(d);
		return status;
	}
	snprintf(fence, sizeof(fence), "%lld", g.fence);
	if (setenv("DLOCK_KEY", key, 1) < 0 || setenv("DLOCK_TOKEN", g.token, 1) < 0 ||
	    setenv("DLOCK_FENCE", fence, 1) < 0 || pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
		fprintf(stderr, "dlock: %s\n", strerror(errno));
		dlock_close(d);
		return EXIT_DAEMON;
	}
	selfpipe_w = p[1];
	sigemptyset(&block);
	sigaddset(&block, SIGCHLD);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	sigprocmask(SIG_BLOCK, &block, &oldmask);
	if (set_signals(1) < 0 || (child = fork()) < 0) {
		fprintf(stderr, "dlock: cannot start %s: %s\n", argv[i], strerror(errno));
		(void)set_signals(0);
		sigprocmask(SIG_SETMASK, &oldmask, NULL);
		close(p[0]);
		close(p[1]);
		dlock_close(d);
		return EXIT_DAEMON;
	}
	if (child == 0)
		run_child(d, argv + i, &oldmask, self);
	sigprocmask(SIG_SETMASK, &oldmask, NULL);

	status = exit_status(run_wait(d, key, child, p[0], &lost));
	(void)set_signals(0);
	close(p[0]);
	close(p[1]);
	selfpipe_w = -1;
	if (!lost && dlock_unlock(d, key, NULL) < 0) {
		/* The lock may have ended before the command did. */
		fprintf(stderr, "dlock: %s: %s\n", key, dlock_error(d));
		lost = 1;
	}
	dlock_close(d);
	return lost ? EXIT_DAEMON : status;
}

/* ---- the other commands ---- */

/* dlock lock [opts] KEY: a detached lock; prints the token and the fence. */
static int
cmd_lock(const struct command *cmd, int argc, char **argv)
{
	struct dlock_lock_opts o = DLOCK_LOCK_OPTS_INIT;
	struct dlock_grant g;
	int i = 1, r, status;
	dlock_t *d;

	if ((r = parse_lock_opts(cmd, argc, argv, &i, &o)) != 0)
		return r;
	if (i >= argc)
		return usage_error(cmd, "%s", "missing KEY");
	if (i + 1 < argc)
		return usage_error(cmd, "unexpected argument %s", argv[i + 1]);
	if (*argv[i] == '\0')
		return usage_error(cmd, "%s", "KEY is empty");
	o.detach = 1;
	if (o.ttl_ms == 0)
		o.ttl_ms = DETACH_DEFAULT_TTL_MS;
	if ((d = connect_or_report(&status)) == NULL)
		return status;
	r = dlock_lock(d, argv[i], &o, &g);
	if (r > 0) {
		printf("%s\n%lld\n", g.token, g.fence);
		status = 0;
	} else {
		status = r == 0 ? not_granted(argv[i], o.wait_ms) : report(d);
	}
	dlock_close(d);
	return status;
}

/*
 * Check that a fixed-argument command got exactly n arguments, none empty.
 * 0, or the exit status of a usage error.
 */
static int
want_args(const struct command *cmd, int argc, char **argv, int n)
{
	if (argc > 1 && is_help(argv[1])) {
		printf("usage: dlock [-a ADDR] [-p PASSWORD] %s %s\n", cmd->name, cmd->usage);
		exit(0);
	}
	if (argc - 1 < n)
		return usage_error(cmd, "%s", "missing arguments");
	if (argc - 1 > n)
		return usage_error(cmd, "unexpected argument %s", argv[n + 1]);
	for (int i = 1; i <= n; i++)
		if (*argv[i] == '\0')
			return usage_error(cmd, "%s", "empty argument");
	return 0;
}

/* dlock unlock KEY TOKEN */
static int
cmd_unlock(const struct command *cmd, int argc, char **argv)
{
	long long n;
	int status;
	dlock_t *d;

	if ((status = want_args(cmd, argc, argv, 2)) != 0)
		return status;
	if ((d = connect_or_report(&status)) == NULL)
		return status;
	if ((n = dlock_unlock(d, argv[1], argv[2])) >= 0)
		printf("%lld\n", n);
	status = n >= 0 ? 0 : report(d);
	dlock_close(d);
	return status;
}

/* dlock extend KEY MS TOKEN */
static int
cmd_extend(const struct command *cmd, int argc, char **argv)
{
	long long ms, n;
	int status;
	dlock_t *d;

	if ((status = want_args(cmd, argc, argv, 3)) != 0)
		return status;
	if (parse_num(argv[2], 1, LLONG_MAX, &ms) < 0)
		return usage_error(cmd, "not a positive number of milliseconds: %s", argv[2]);
	if ((d = connect_or_report(&status)) == NULL)
		return status;
	if ((n = dlock_extend(d, argv[1], ms, argv[3])) >= 0)
		printf("%lld\n", n);
	status = n >= 0 ? 0 : report(d);
	dlock_close(d);
	return status;
}

/* dlock status KEY */
static int
cmd_status(const struct command *cmd, int argc, char **argv)
{
	struct dlock_status st;
	int status;
	dlock_t *d;

	if ((status = want_args(cmd, argc, argv, 1)) != 0)
		return status;
	if ((d = connect_or_report(&status)) == NULL)
		return status;
	if (dlock_status(d, argv[1], &st) == 0) {
		printf("mode: %s\nholders: %lld\nwaiters: %lld\nfence: %lld\n"
		    "ttl_ms: %lld\nlimit: %lld\nbackend: %s\n", st.mode, st.holders,
		    st.waiters, st.fence, st.ttl_ms, st.limit, st.backend);
		status = 0;
	} else {
		status = report(d);
	}
	dlock_close(d);
	return status;
}

/* dlock validate KEY FENCE: exit 0 when valid, 1 when not. */
static int
cmd_validate(const struct command *cmd, int argc, char **argv)
{
	long long fence;
	int status, r;
	dlock_t *d;

	if ((status = want_args(cmd, argc, argv, 2)) != 0)
		return status;
	if (parse_num(argv[2], LLONG_MIN, LLONG_MAX, &fence) < 0)
		return usage_error(cmd, "not a fence: %s", argv[2]);
	if ((d = connect_or_report(&status)) == NULL)
		return status;
	if ((r = dlock_validate(d, argv[1], fence)) >= 0) {
		printf("%d\n", r);
		status = r == 1 ? 0 : EXIT_DAEMON;
	} else {
		status = report(d);
	}
	dlock_close(d);
	return status;
}

/* dlock info: the INFO text, with LF line ends. */
static int
cmd_info(const struct command *cmd, int argc, char **argv)
{
	int status;
	char *s;
	dlock_t *d;

	if ((status = want_args(cmd, argc, argv, 0)) != 0)
		return status;
	if ((d = connect_or_report(&status)) == NULL)
		return status;
	if ((s = dlock_info(d)) != NULL) {
		size_t len = strlen(s);

		for (char *c = s; *c != '\0'; c++)
			if (*c != '\r')
				putchar(*c);
		if (len > 0 && s[len - 1] != '\n')
			putchar('\n');
		free(s);
		status = 0;
	} else {
		status = report(d);
	}
	dlock_close(d);
	return status;
}

/* dlock ping */
static int
cmd_ping(const struct command *cmd, int argc, char **argv)
{
	int status;
	dlock_t *d;

	if ((status = want_args(cmd, argc, argv, 0)) != 0)
		return status;
	if ((d = connect_or_report(&status)) == NULL)
		return status;
	if (dlock_ping(d) == 0) {
		puts("PONG");
		status = 0;
	} else {
		status = report(d);
	}
	dlock_close(d);
	return status;
}

static const struct command commands[] = {
	{ "run", "[--ttl MS] [--wait MS] [--shared | --limit N] KEY -- COMMAND [ARGS...]", cmd_run },
	{ "lock", "[--ttl MS] [--wait MS] [--shared | --limit N] KEY", cmd_lock },
	{ "unlock", "KEY TOKEN", cmd_unlock },
	{ "extend", "KEY MS TOKEN", cmd_extend },
	{ "status", "KEY", cmd_status },
	{ "validate", "KEY FENCE", cmd_validate },
	{ "info", "", cmd_info },
	{ "ping", "", cmd_ping },
};

int
main(int argc, char **argv)
{
	const char *val;
	int i, missing, status;

	opt_password = getenv("DLOCK_PASSWORD");
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		missing = 0;
		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (a[0] != '-' || a[1] == '\0')
			break;
		if (is_help(a)) {
			fputs(usage_main, stdout);
			fputs(help_text, stdout);
			return 0;
		}
		if (strcmp(a, "--version") == 0) {
			printf("dlock %s\n", DLOCKD_VERSION);
			return 0;
		}
		if (strncmp(a, "-a", 2) == 0 && a[2] != '\0') {
			opt_addr = a + 2;
		} else if (strncmp(a, "-p", 2) == 0 && a[2] != '\0') {
			opt_password = a + 2;
		} else if ((val = opt_value(argc, argv, &i, "-a", &missing)) != NULL ||
		    (val = opt_value(argc, argv, &i, "--addr", &missing)) != NULL) {
			opt_addr = val;
		} else if ((val = opt_value(argc, argv, &i, "-p", &missing)) != NULL ||
		    (val = opt_value(argc, argv, &i, "--password", &missing)) != NULL) {
			opt_password = val;
		} else if (missing) {
			return usage_error(NULL, "option %s needs a value", a);
		} else {
			return usage_error(NULL, "unknown option %s", a);
		}
	}
	if (i >= argc)
		return usage_error(NULL, "%s", "missing COMMAND");
	if (opt_addr != NULL && *opt_addr == '\0')
		return usage_error(NULL, "%s", "empty address");
	for (size_t c = 0; c < sizeof(commands) / sizeof(commands[0]); c++) {
		if (strcmp(argv[i], commands[c].name) == 0) {
			status = commands[c].run(&commands[c], argc - i, argv + i);
			if (fflush(stdout) != 0 && status == 0) {
				fprintf(stderr, "dlock: cannot write output: %s\n", strerror(errno));
				status = EXIT_DAEMON;
			}
			return status;
		}
	}
	return usage_error(NULL, "unknown command %s", argv[i]);
}
