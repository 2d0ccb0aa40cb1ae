/*
 * dlock — command-line client of dlockd. It owns its options and, for
 * "run" and "campaign", the child process group; it talks to dlockd only
 * through libdlock (dlock.h) and must not speak the protocol itself.
 *
 *	dlock [-a ADDR] [-p PASSWORD] COMMAND ...
 *
 * "dlock run KEY -- COMMAND" holds a lock while COMMAND runs (like flock(1)
 * or "consul lock"), in a process group of its own that is stopped whole if
 * the lock is lost or dlockd goes away; "dlock campaign KEY VALUE --
 * COMMAND" does the same as the leader of KEY. The other commands map one
 * to one onto the protocol (leader and observe in dlock_cli_elect.c).
 *
 * Exit status: dlock's own failures have codes of their own, from 64 up
 * (sysexits(3)), listed once in EXIT_CODES (dlock_cli.h); "run" and
 * "campaign" otherwise exit with COMMAND's status (128 + signal if it was
 * killed).
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
#include <time.h>
#include <unistd.h>

#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "clock.h"
#include "dlock.h"
#include "dlock_cli.h"
#include "num.h"

#ifndef DLOCKD_VERSION
#define DLOCKD_VERSION "0.1.0"
#endif

#define DETACH_DEFAULT_TTL_MS 60000	/* "lock" without --ttl */
#define KILL_AFTER_DEFAULT_MS 2000	/* "run": SIGTERM to SIGKILL after a loss */
#define KILL_AFTER_MAX_MS	86400000
#define PING_MIN_MS		100	/* "run": keepalive PINGs at most this often */
#define CALL_TIMEOUT_MS		10000	/* libdlock's default reply timeout */
#define GROUP_CHECK_MS		20	/* "run": how often to look for the rest of a group */

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
    "  run [-v] [--ttl MS] [--wait MS] [--shared | --limit N] [--kill-after MS] KEY\n"
    "      -- COMMAND [ARGS...]\n"
    "        run COMMAND, in a process group of its own, while holding KEY; the lock\n"
    "        is released when it ends. If the lock is lost or dlockd goes away, the\n"
    "        group gets SIGTERM, then SIGKILL after --kill-after MS (default 2000).\n"
    "        The options may also follow KEY (before --); -v tells on stderr whom\n"
    "        it waits for and when it got the lock. With -k KEY -k KEY... in place\n"
    "        of KEY, hold every key (all or none) with DLOCK_KEYS=N and\n"
    "        DLOCK_KEY_i, DLOCK_TOKEN_i, DLOCK_FENCE_i (i = 1..N, in order)\n"
    "  lock [-v] [--ttl MS] [--wait MS] [--shared | --limit N] {KEY | -k KEY...}\n"
    "        take a detached lock (TTL default 60000 ms); prints token and fence\n"
    "        (with -k: of every key, all or none, in order)\n"
    "  campaign [-v] [--ttl MS] [--wait MS] [--kill-after MS] KEY VALUE\n"
    "      -- COMMAND [ARGS...]\n"
    "        wait to lead KEY with VALUE (an address, say), then run COMMAND as run\n"
    "        does (DLOCK_FENCE is the term) while leading; resign when it ends\n"
    "  leader [--json] KEY       show KEY's leader: value, term, revision, kind,\n"
    "                            holders\n"
    "  observe [--json] [--count N] KEY\n"
    "        print KEY's state, then a line at every change, until interrupted\n"
    "        (or N lines are printed); --json: a JSON object a line\n"
    "  unlock KEY TOKEN          release a lock by its token; prints holds left\n"
    "  extend KEY MS TOKEN       set the lease to MS from now; prints the new TTL\n"
    "  status [-v | --verbose] KEY\n"
    "        show the state of KEY; --verbose adds its holders through any daemon\n"
    "        and its waiters on this dlockd (session, name, address, mode, fence,\n"
    "        times)\n"
    "  held [--count N] [PATTERN]\n"
    "        print every key held through any daemon (matching PATTERN), N a page\n"
    "  validate KEY FENCE        print 1 (exit 0) if FENCE holds KEY, else 0 (exit 1)\n"
    "  info                      show the server's INFO\n"
    "  ping                      check the connection; prints PONG\n"
    "\n"
    "Exit status: 0 ok; run, campaign: COMMAND's status (128+N if killed by\n"
    "signal N), or one of dlock's own:\n";

/* See dlock_cli.h. */
int
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

/* See dlock_cli.h. */
int
parse_num(const char *s, long long min, long long max, long long *out)
{
	return num_parse(s, strlen(s), min, max, out) == NUM_OK ? 0 : -1;
}

/* See dlock_cli.h. */
dlock_t *
connect_or_report(int *status)
{
	char err[512];
	dlock_t *d;

	d = dlock_connect(opt_addr, opt_password, err, sizeof(err));
	if (d == NULL) {
		fprintf(stderr, "dlock: %s\n", err);
		*status = errno == EINVAL ? EXIT_USAGE :
		    errno == EACCES ? EXIT_NOPERM :
		    errno == EAGAIN ? EXIT_UNAVAIL :
		    errno == EPROTO ? EXIT_PROTOCOL : EXIT_NOHOST;
	}
	return d;
}

/* The exit status for an error code of libdlock (dlock_error_code). */
static int
code_status(const char *code)
{
	static const struct {
		const char *code;	/* the error's code word */
		int status;		/* dlock's exit status for it */
	} map[] = {
		{ "IO", EXIT_NOHOST }, { "ARG", EXIT_USAGE }, { "PROTO", EXIT_PROTOCOL },
		{ "NOMEM", EXIT_OSERR }, { "BACKEND", EXIT_UNAVAIL },
		{ "NOAUTH", EXIT_NOPERM }, { "WRONGPASS", EXIT_NOPERM },
		{ "NOPERM", EXIT_NOPERM }, { "LOST", EXIT_LOST },
	};

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strcmp(code, map[i].code) == 0)
			return map[i].status;
	return EXIT_REFUSED;
}

/* See dlock_cli.h. */
int
report(const dlock_t *d)
{
	fprintf(stderr, "dlock: %s\n", dlock_error(d));
	return code_status(dlock_error_code(d));
}

/* See dlock_cli.h. */
int
flushed(void)
{
	if (fflush(stdout) == 0 && !ferror(stdout))
		return 0;
	fprintf(stderr, "dlock: cannot write output: %s\n", strerror(errno));
	return EXIT_IOERR;
}

/* See dlock_cli.h. */
int
is_help(const char *s)
{
	return strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0;
}

/* See dlock_cli.h. */
const char *
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

/* What run, campaign and lock were asked for on their command lines. */
struct lock_args {
	struct dlock_lock_opts o;	/* --ttl, --wait, --shared, --limit */
	long long kill_after_ms;	/* run, campaign: --kill-after */
	int verbose;			/* -v: tell on stderr whom it waits for */
	int campaign;			/* 1: campaign (set before parsing) */
	const char *key;		/* KEY, or the one -k KEY; NULL when several */
	const char **keys;		/* every key, in order: &key, or kbuf */
	size_t nkeys;			/* how many; more than 1: LOCKALL */
	const char **kbuf;		/* run, lock: the keys of -k (argv's), in order */
	size_t nk;			/* how many */
	const char *label;		/* KEY, or the keys, for messages */
	char *label_buf;		/* the keys' label, when there are several */
	struct dlock_grant *grants;	/* nkeys grants: &one, or allocated */
	struct dlock_grant one;		/* the grant of one key */
	const char *value;		/* campaign: VALUE */
	int cmd;			/* run, campaign: index of COMMAND in argv */
};

/* Free what parse_lock_args allocated in a (kbuf, label_buf, grants). */
static void
lock_args_free(struct lock_args *a)
{
	free(a->kbuf);
	free(a->label_buf);
	if (a->grants != &a->one)
		free(a->grants);
}

/*
 * Parse the option at argv[*i] of run, campaign or lock (run, campaign:
 * is_run 1) into a, moving *i past its value. 0, or the exit status of a
 * usage error (printed).
 */
static int
parse_lock_opt(const struct command *cmd, int argc, char **argv, int *i,
    struct lock_args *a, int is_run)
{
	const char *arg = argv[*i], *val;
	int missing = 0;
	long long v;

	if (is_help(arg)) {
		printf("usage: dlock [-a ADDR] [-p PASSWORD] %s %s\n",
		    cmd->name, cmd->usage);
		exit(0);
	}
	if ((val = opt_value(argc, argv, i, "--ttl", &missing)) != NULL) {
		if (parse_num(val, 1, LLONG_MAX, &v) < 0)
			return usage_error(cmd, "--ttl: not a positive number of milliseconds: %s", val);
		a->o.ttl_ms = v;
	} else if ((val = opt_value(argc, argv, i, "--wait", &missing)) != NULL) {
		if (parse_num(val, 0, LLONG_MAX, &v) < 0)
			return usage_error(cmd, "--wait: not a number of milliseconds: %s", val);
		a->o.wait_ms = v;
	} else if ((val = opt_value(argc, argv, i, "--limit", &missing)) != NULL) {
		if (parse_num(val, 1, 1000000, &v) < 0)
			return usage_error(cmd, "--limit: not a number from 1 to 1000000: %s", val);
		a->o.limit = (int)v;
	} else if (is_run &&
	    (val = opt_value(argc, argv, i, "--kill-after", &missing)) != NULL) {
		if (parse_num(val, 0, KILL_AFTER_MAX_MS, &v) < 0)
			return usage_error(cmd, "--kill-after: not a number of milliseconds "
			    "from 0 to %d: %s", KILL_AFTER_MAX_MS, val);
		a->kill_after_ms = v;
	} else if (!a->campaign && ((val = opt_value(argc, argv, i, "-k", &missing)) != NULL ||
	    (val = opt_value(argc, argv, i, "--key", &missing)) != NULL ||
	    (strncmp(arg, "-k", 2) == 0 && (val = arg + 2)[0] != '\0'))) {
		if (*val == '\0')
			return usage_error(cmd, "%s", "KEY is empty");
		if (a->kbuf == NULL && (a->kbuf = calloc((size_t)argc, sizeof(*a->kbuf))) == NULL) {
			fprintf(stderr, "dlock: %s\n", strerror(errno));
			return EXIT_OSERR;
		}
		a->kbuf[a->nk++] = val;
	} else if (strcmp(arg, "--shared") == 0) {
		a->o.shared = 1;
	} else if (strcmp(arg, "-v") == 0 || strcmp(arg, "--verbose") == 0) {
		a->verbose = 1;
	} else if (missing) {
		return usage_error(cmd, "option %s needs a value", arg);
	} else {
		return usage_error(cmd, "unknown option %s", arg);
	}
	return 0;
}

/*
 * Parse the arguments of run and campaign (is_run 1) and lock into a:
 * options go anywhere before COMMAND, before or after KEY (and campaign's
 * VALUE; "--" before KEY or VALUE ends them, for one that starts with a
 * dash). For run and campaign, COMMAND follows the "--" after KEY (VALUE),
 * or starts at the first word after it that is not an option; everything
 * from there on is COMMAND's. Several keys come with -k KEY each, in
 * place of KEY. 0, or the exit status of a usage error (printed); either
 * way lock_args_free(a) frees what it allocated.
 */
static int
parse_lock_args(const struct command *cmd, int argc, char **argv,
    struct lock_args *a, int is_run)
{
	int i, r, dashes = 0;

	for (i = 1; i < argc; i++) {
		const char *arg = argv[i];

		if (strcmp(arg, "--") == 0 && !dashes &&
		    ((a->key == NULL && a->nk == 0) || (a->campaign && a->value == NULL))) {
			dashes = 1;	/* KEY (VALUE) next, whatever it looks like */
			continue;
		}
		if (strcmp(arg, "--") == 0 && (a->key != NULL || a->nk > 0)) {
			if (!is_run)
				return usage_error(cmd, "unexpected argument %s", arg);
			i++;
			break;
		}
		if (!dashes && arg[0] == '-' && arg[1] != '\0') {
			if ((r = parse_lock_opt(cmd, argc, argv, &i, a, is_run)) != 0)
				return r;
			continue;
		}
		if (a->key == NULL && a->nk == 0) {
			a->key = arg;
			dashes = 0;
			continue;
		}
		if (a->campaign && a->value == NULL) {
			a->value = arg;
			dashes = 0;
			continue;
		}
		if (!is_run)
			return usage_error(cmd, "unexpected argument %s", arg);
		break;		/* COMMAND without "--" */
	}
	if (a->key != NULL && a->nk > 0)
		return usage_error(cmd, "%s", "KEY and -k KEY cannot be combined: give every "
		    "key with -k");
	if (a->nk == 1)
		a->key = a->kbuf[0];	/* as KEY */
	if (a->key == NULL && a->nk == 0)
		return usage_error(cmd, "%s", "missing KEY");
	if (a->key != NULL && *a->key == '\0')
		return usage_error(cmd, "%s", "KEY is empty");
	if (a->campaign && a->value == NULL)
		return usage_error(cmd, "%s", "missing VALUE");
	if (is_run && i >= argc)
		return usage_error(cmd, "missing COMMAND (after %s%s --)",
		    a->nk > 0 ? "the keys" : "KEY", a->campaign ? " VALUE" : "");
	if (a->campaign && (a->o.shared || a->o.limit > 0))
		return usage_error(cmd, "%s", "a campaign is exclusive: no --shared or --limit");
	if (a->o.shared && a->o.limit > 0)
		return usage_error(cmd, "%s", "--shared and --limit cannot be combined");
	a->cmd = i;
	if (a->key != NULL) {
		a->keys = &a->key;
		a->nkeys = 1;
		a->label = a->key;
		a->grants = &a->one;
		return 0;
	}
	a->keys = a->kbuf;
	a->nkeys = a->nk;
	if ((a->label = a->label_buf = keys_label(a->nk, a->kbuf)) == NULL ||
	    (a->grants = calloc(a->nk, sizeof(*a->grants))) == NULL) {
		fprintf(stderr, "dlock: %s\n", strerror(errno));
		return EXIT_OSERR;
	}
	return 0;
}

/* See dlock_cli.h. */
int
not_granted(const char *key, long long wait_ms)
{
	if (wait_ms >= 0)
		fprintf(stderr, "dlock: %s: not granted within %lld ms\n", key, wait_ms);
	else
		fprintf(stderr, "dlock: %s: not granted\n", key);
	return EXIT_TEMPFAIL;
}

/* See dlock_cli.h. */
double
secs_since(unsigned long long t0)
{
	return (double)(clock_ms() - t0) / 1000.0;
}

/* See dlock_cli.h. */
void
describe_wait(dlock_t *d, const char *key)
{
	struct dlock_status_full f;
	const struct dlock_status *st = &f.status;

	if (dlock_status_full(d, key, &f) < 0) {
		if (strcmp(dlock_error_code(d), "ERR") != 0 ||
		    dlock_status(d, key, &f.status) < 0) {
			fprintf(stderr, "dlock: waiting for %s\n", key);
			return;
		}
		fprintf(stderr, "dlock: waiting for %s (held %s by %lld holder%s, fence %lld",
		    key, st->mode, st->holders, st->holders == 1 ? "" : "s", st->fence);
		if (st->ttl_ms >= 0)
			fprintf(stderr, ", lease %.1f s left", (double)st->ttl_ms / 1000.0);
		fprintf(stderr, "; %lld ahead of us)\n", st->waiters);
		return;
	}
	fprintf(stderr, "dlock: waiting for %s (held %s by ", key, st->mode);
	for (size_t i = 0; i < f.nholders; i++) {
		const struct dlock_holder *h = &f.holders[i];

		if (i > 0)
			fputs(i + 1 == f.nholders ? " and " : ", ", stderr);
		fprintf(stderr, "session %lld", h->session);
		if (h->name[0] != '\0')
			fprintf(stderr, " \"%s\"", h->name);
		if (h->addr[0] != '\0')
			fprintf(stderr, " %s", h->addr);
		fprintf(stderr, " for %.1f s, fence %lld%s", (double)h->held_ms / 1000.0,
		    h->fence, h->detached ? ", detached" : "");
	}
	if (f.nholders == 0)
		fprintf(stderr, "%lld holder%s", st->holders, st->holders == 1 ? "" : "s");
	fprintf(stderr, "; %zu ahead of us)\n", f.nwaiters);
	dlock_status_full_free(&f);
}

/* Lock a->key (campaign: with a->value) with options o: dlock_lock's result. */
static int
lock_or_campaign(dlock_t *d, const struct lock_args *a, const struct dlock_lock_opts *o,
    struct dlock_grant *g)
{
	if (a->campaign)
		return dlock_campaign(d, a->key, a->value, strlen(a->value), o, g);
	return dlock_lock(d, a->key, o, g);
}

/*
 * Take a->key (or every key of a->keys, g one grant each) with a's options:
 * dlock_lock's (dlock_campaign's; several keys: take_all's) result. With
 * -v, say on stderr whom it waits for and when it got the lock: it tries
 * once, and when the key is taken describes its holders before it queues
 * for what is left of --wait.
 */
static int
take_lock(dlock_t *d, const struct lock_args *a, struct dlock_grant *g)
{
	struct dlock_lock_opts o = a->o;
	unsigned long long t0 = clock_ms();
	int r;

	if (a->nkeys > 1)
		return take_all(d, a->nkeys, a->keys, &a->o, a->verbose, g);
	if (!a->verbose)
		return lock_or_campaign(d, a, &a->o, g);
	o.wait_ms = 0;
	r = lock_or_campaign(d, a, &o, g);
	if (r == 0 && a->o.wait_ms != 0) {
		describe_wait(d, a->key);
		o.wait_ms = a->o.wait_ms;
		if (o.wait_ms > 0) {
			long long spent = (long long)(clock_ms() - t0);
			o.wait_ms = spent < o.wait_ms ? o.wait_ms - spent : 0;
		}
		r = lock_or_campaign(d, a, &o, g);
	}
	if (r > 0)
		fprintf(stderr, "dlock: %s %s (%s %lld) after %.1f s\n",
		    a->campaign ? "leading" : "got", a->key, a->campaign ? "term" : "fence",
		    g->fence, secs_since(t0));
	return r;
}

/* ---- run ---- *//* ---- run ---- */

/* What run knows while COMMAND runs. */
struct run {
	dlock_t *d;		/* the connection that holds the lock */
	const char *key;	/* the key (the keys, for messages) */
	int several;		/* 1: it holds several keys */
	pid_t child;		/* COMMAND, leader of its own process group */
	int sigr;		/* read end of the self-pipe */
	int tty;		/* 1: the terminal (stdin) is handed to COMMAND's group */
	long long kill_after_ms; /* from SIGTERM to SIGKILL when the lock is gone */
	long long ping_ms;	/* between keepalive PINGs; 0: none */
	long long next_ping;	/* when the next PING is due (clock_ms) */
	int held;		/* 1 while the lock is held: not lost, connection up */
	int verbose;		/* -v: tell when the lock is in doubt, and back */
	long long kill_at;	/* when the group gets SIGKILL (clock_ms); -1: not stopping */
	int killed;		/* 1 once the group got SIGKILL */
	int reaped;		/* 1 once COMMAND was waited for */
	int status;		/* then its wait() status */
};

/* Signal handler of run: note the signal in the self-pipe. */
static void
on_signal(int sig)
{
	unsigned char msg = (unsigned char)sig;
	int saved = errno;
	ssize_t r;

	r = write(selfpipe_w, &msg, 1);	/* full pipe: a wake-up is pending */
	(void)r;
	errno = saved;
}

/* The signals run watches, and how they were handled before. */
static const int run_sigs[] = { SIGCHLD, SIGINT, SIGTERM, SIGHUP };
static struct sigaction run_saved[sizeof(run_sigs) / sizeof(run_sigs[0])];

/*
 * Catch the signals run watches, or (install 0) put back how they were
 * handled before. A signal that was ignored (nohup, a background job of a
 * shell) stays ignored, as the command would have it. SIGCHLD also tells of
 * COMMAND stopping (Control-Z) and going on.
 */
static int
set_signals(int install)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
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
 * Make process group pg the foreground group of the terminal on stdin.
 * SIGTTOU is blocked meanwhile: a process of a background group may then
 * do it (POSIX), as COMMAND must before it is exec'd and dlock must to take
 * the terminal back.
 */
static void
tty_give(pid_t pg)
{
	sigset_t ttou, old;

	sigemptyset(&ttou);
	sigaddset(&ttou, SIGTTOU);
	sigprocmask(SIG_BLOCK, &ttou, &old);
	(void)tcsetpgrp(STDIN_FILENO, pg);
	sigprocmask(SIG_SETMASK, &old, NULL);
}

/* Take the terminal back from COMMAND's group, if that group has it. */
static void
tty_take_back(const struct run *r)
{
	if (r->tty && tcgetpgrp(STDIN_FILENO) == r->child)
		tty_give(getpgrp());
}

/*
 * In the child: become COMMAND, leader of a process group of its own (and,
 * when tty, the terminal's foreground group). Never returns. d is the
 * child's copy of the handle: closing it leaves the parent's connection open.
 */
static void __attribute__((noreturn))
run_child(dlock_t *d, char **argv, const sigset_t *oldmask, pid_t parent, int tty)
{
	int e;

	dlock_close(d);
	(void)set_signals(0);
	/* The parent does the same: whichever runs first, both hold. */
	(void)setpgid(0, 0);
	if (tty)
		tty_give(getpid());
	sigprocmask(SIG_SETMASK, oldmask, NULL);
#ifdef __linux__
	/* If dlock dies, its lock is released: COMMAND must not run on. */
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) == 0 && getppid() != parent)
		_exit(EXIT_LOST);
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
	return EXIT_OSERR;
}

/*
 * The lock is gone (why, printed after the key): stop COMMAND's whole
 * process group, with SIGTERM now (and SIGCONT, should it be stopped) and
 * SIGKILL kill_after_ms later if it is still there.
 */
static void
run_stop(struct run *r, const char *why)
{
	fprintf(stderr, "dlock: %s: %s, stopping the command\n", r->key, why);
	r->held = 0;
	kill(-r->child, SIGTERM);
	kill(-r->child, SIGCONT);
	r->kill_at = (long long)clock_ms() + r->kill_after_ms;
}

/*
 * Read what the connection delivered: a lost push, or the end of the
 * connection, stops COMMAND.
 */
static void
run_check(struct run *r)
{
	char why[600], key[256];
	long long fence = 0;
	int n, suspended;

	while (r->verbose && dlock_poll_suspend(r->d, key, sizeof(key), &fence, &suspended) > 0)
		fprintf(stderr, suspended ? "dlock: %s: suspended: its renewals fail (fence %lld); "
		    "held until it is lost\n" : "dlock: %s: resumed: renewed again (fence %lld)\n",
		    key, fence);
	n = dlock_poll_lost(r->d, key, sizeof(key), &fence);

	if (n == 0)
		return;
	if (n > 0 && r->several)
		snprintf(why, sizeof(why), "the lock of %s was lost (fence %lld)", key, fence);
	else if (n > 0)
		snprintf(why, sizeof(why), "the lock was lost (fence %lld)", fence);
	else
		snprintf(why, sizeof(why), "%s; the lock is gone", dlock_error(r->d));
	run_stop(r, why);
}

/*
 * Keep the session alive: PING, and expect the answer before the next PING
 * is due. A loss pushed meanwhile is queued by libdlock and seen here.
 */
static void
run_ping(struct run *r)
{
	char why[600];

	r->next_ping = (long long)clock_ms() + r->ping_ms;
	if (dlock_ping(r->d) == 0) {
		run_check(r);
		return;
	}
	/* A loss told before the failure comes first. */
	if (dlock_poll_lost(r->d, NULL, 0, NULL) > 0) {
		run_stop(r, "the lock was lost");
		return;
	}
	snprintf(why, sizeof(why), "PING failed: %s; the lock is gone", dlock_error(r->d));
	run_stop(r, why);
}

/*
 * COMMAND was stopped by sig (Control-Z: SIGTSTP) while it had the
 * terminal: take the terminal back and stop dlock's own job with the same
 * signal, as a shell expects of its job. When dlock is continued (fg or bg),
 * check the lock first, then give COMMAND the terminal again if dlock is in
 * the foreground, and continue it. (While stopped, dlock sends no PING: a
 * session idle timeout may end the session, and with it the lock.)
 */
static void
run_suspend(struct run *r, int sig)
{
	tty_take_back(r);
	kill(0, sig);
	/* continued */
	if (r->held) {
		run_check(r);
		if (r->held && r->ping_ms > 0)
			run_ping(r);
	}
	if (r->held && tcgetpgrp(STDIN_FILENO) == getpgrp())
		tty_give(r->child);
	kill(-r->child, SIGCONT);
}

/* Handle the signals noted in the self-pipe. */
static void
run_signals(struct run *r)
{
	unsigned char buf[128];
	ssize_t n;

	while ((n = read(r->sigr, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n; i++)
			if (buf[i] != SIGCHLD)
				kill(-r->child, buf[i]);	/* forward to the group */
	}
	/* COMMAND, and the orphans of its group that dlock adopted (subreaper) */
	for (;;) {
		int st;
		pid_t w = waitpid(-1, &st, WNOHANG | (r->tty ? WUNTRACED : 0));

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		if (w != r->child)
			continue;
		if (WIFSTOPPED(st)) {
			run_suspend(r, WSTOPSIG(st));
			continue;
		}
		r->reaped = 1;
		r->status = st;
	}
}

/*
 * 1 if a process of COMMAND's group is still there. (Its orphans are
 * dlock's to reap, so that they do not linger as zombies in the group.)
 */
static int
group_alive(const struct run *r)
{
	return kill(-r->child, 0) == 0 || errno == EPERM;
}

/*
 * Wait for COMMAND while watching the connection, the signals and the
 * keepalive PINGs; after a loss, until COMMAND and its whole group have
 * ended (or were sent SIGKILL). Leaves COMMAND's wait() status in r.
 */
static void
run_wait(struct run *r)
{
	for (;;) {
		struct pollfd pfd[2] = {
			{ .fd = r->sigr, .events = POLLIN },
			{ .fd = r->held ? dlock_fd(r->d) : -1, .events = POLLIN },
		};
		long long now = (long long)clock_ms(), timeout = -1;

		if (r->reaped && (r->kill_at < 0 || r->killed || !group_alive(r)))
			return;
		if (r->kill_at >= 0 && !r->killed)
			timeout = r->kill_at > now ? r->kill_at - now : 0;
		if (r->reaped && (timeout < 0 || timeout > GROUP_CHECK_MS))
			timeout = GROUP_CHECK_MS;	/* the rest of the group */
		if (r->held && r->ping_ms > 0) {
			long long left = r->next_ping > now ? r->next_ping - now : 0;

			if (timeout < 0 || left < timeout)
				timeout = left;
		}
		if (poll(pfd, 2, timeout > INT_MAX ? INT_MAX : (int)timeout) < 0) {
			if (errno == EINTR)
				continue;
			/* Cannot watch the lock any more: end the command. */
			fprintf(stderr, "dlock: poll: %s\n", strerror(errno));
			if (r->held)
				run_stop(r, "cannot watch the lock");
			kill(-r->child, SIGKILL);
			r->killed = 1;
			while (!r->reaped && waitpid(r->child, &r->status, 0) < 0 && errno == EINTR)
				;
			r->reaped = 1;
			return;
		}
		if (pfd[0].revents & POLLIN)
			run_signals(r);
		if (r->held && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR)))
			run_check(r);
		if (r->held && r->ping_ms > 0 && (long long)clock_ms() >= r->next_ping)
			run_ping(r);
		if (r->kill_at >= 0 && !r->killed && (long long)clock_ms() >= r->kill_at) {
			if (group_alive(r))
				fprintf(stderr, "dlock: %s: the command did not end within "
				    "%lld ms of SIGTERM, killing it\n", r->key, r->kill_after_ms);
			kill(-r->child, SIGKILL);
			r->killed = 1;
		}
	}
}

/*
 * The session idle timeout of the daemon (INFO's session_idle_timeout_ms),
 * 0 if it has none or does not say. -1 when INFO failed (error set in d).
 */
static long long
idle_timeout(dlock_t *d)
{
	static const char field[] = "session_idle_timeout_ms:";
	long long ms = 0;
	char *info, *p;

	if ((info = dlock_info(d)) == NULL)
		return -1;
	for (p = info; p != NULL; p = strchr(p, '\n')) {
		if (*p == '\n')
			p++;
		if (strncmp(p, field, sizeof(field) - 1) == 0) {
			ms = strtoll(p + sizeof(field) - 1, NULL, 10);
			break;
		}
	}
	free(info);
	return ms > 0 ? ms : 0;
}

/*
 * Release what run_holding holds: a's key (campaign: resign it) or keys.
 * 0, or -1 (dlock_error says why).
 */
static int
release(dlock_t *d, const struct lock_args *a)
{
	if (a->nkeys > 1)
		return dlock_unlockall(d, a->nkeys, a->keys, NULL);
	if (a->campaign)
		return dlock_resign(d, a->key) < 0 ? -1 : 0;
	return dlock_unlock(d, a->key, NULL) < 0 ? -1 : 0;
}

/*
 * Take what a asks for, run COMMAND (argv + a->cmd) while holding it, then
 * release it: the body of run_holding. The exit status.
 */
static int
run_locked(char **argv, const struct lock_args *a)
{
	struct run r;
	sigset_t block, oldmask;
	long long idle;
	int i, n, status, p[2];
	pid_t self = getpid();

	memset(&r, 0, sizeof(r));
	r.kill_after_ms = a->kill_after_ms;
	r.kill_at = -1;
	r.key = a->label;
	r.several = a->nkeys > 1;
	i = a->cmd;

	if ((r.d = connect_or_report(&status)) == NULL)
		return status;
	if ((n = take_lock(r.d, a, a->grants)) <= 0) {
		status = n == 0 ? not_granted(r.key, a->o.wait_ms) : report(r.d);
		dlock_close(r.d);
		return status;
	}
	/* A daemon that closes silent sessions gets a PING every third of it. */
	if ((idle = idle_timeout(r.d)) < 0) {
		status = report(r.d);
		dlock_close(r.d);
		return status;
	}
	if (idle > 0) {
		r.ping_ms = idle / 3 > PING_MIN_MS ? idle / 3 : PING_MIN_MS;
		r.next_ping = (long long)clock_ms() + r.ping_ms;
		(void)dlock_set_timeout(r.d, r.ping_ms);
	}
	/* -v: told when the renewals fail and when they work again */
	r.verbose = a->verbose;
	if (r.verbose && dlock_suspend_notices(r.d, 1) < 0)
		fprintf(stderr, "dlock: not told of suspended locks: %s\n", dlock_error(r.d));
	r.held = 1;
	/* Interactive: COMMAND gets the terminal, and Control-Z works. */
	r.tty = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
	if (keys_env(a->nkeys, a->keys, a->grants) < 0 ||
	    pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
		fprintf(stderr, "dlock: %s\n", strerror(errno));
		dlock_close(r.d);
		return EXIT_OSERR;
	}
	selfpipe_w = p[1];
	r.sigr = p[0];
	sigemptyset(&block);
	for (size_t s = 0; s < sizeof(run_sigs) / sizeof(run_sigs[0]); s++)
		sigaddset(&block, run_sigs[s]);
	sigprocmask(SIG_BLOCK, &block, &oldmask);
#ifdef PR_SET_CHILD_SUBREAPER
	/* COMMAND's orphans come back to dlock, which reaps them at once. */
	(void)prctl(PR_SET_CHILD_SUBREAPER, 1);
#endif
	if (set_signals(1) < 0 || (r.child = fork()) < 0) {
		fprintf(stderr, "dlock: cannot start %s: %s\n", argv[i], strerror(errno));
		(void)set_signals(0);
		sigprocmask(SIG_SETMASK, &oldmask, NULL);
		close(p[0]);
		close(p[1]);
		dlock_close(r.d);
		return EXIT_OSERR;
	}
	if (r.child == 0)
		run_child(r.d, argv + i, &oldmask, self, r.tty);
	(void)setpgid(r.child, r.child);	/* fails once COMMAND is exec'd: it did it */
	if (r.tty)
		tty_give(r.child);
	sigprocmask(SIG_SETMASK, &oldmask, NULL);

	run_wait(&r);
	tty_take_back(&r);
	status = exit_status(r.status);
	(void)set_signals(0);
	close(p[0]);
	close(p[1]);
	selfpipe_w = -1;
	(void)dlock_set_timeout(r.d, CALL_TIMEOUT_MS);
	if (r.held && release(r.d, a) < 0) {
		/* The lock may have ended before the command did. */
		fprintf(stderr, "dlock: %s: %s\n", r.key, dlock_error(r.d));
		r.held = 0;
	}
	dlock_close(r.d);
	return r.held ? status : EXIT_LOST;
}

/*
 * dlock run [opts] KEY [opts] [--] COMMAND [ARGS...] (or -k KEY... for
 * several keys), and (campaign 1) dlock campaign [opts] KEY VALUE [opts]
 * [--] COMMAND [ARGS...]: the lock (the keys, the lead) is held while
 * COMMAND runs, then released (resigned).
 */
static int
run_holding(const struct command *cmd, int argc, char **argv, int campaign)
{
	struct lock_args a = { .o = DLOCK_LOCK_OPTS_INIT,
	    .kill_after_ms = KILL_AFTER_DEFAULT_MS, .campaign = campaign };
	int status;

	if ((status = parse_lock_args(cmd, argc, argv, &a, 1)) == 0)
		status = run_locked(argv, &a);
	lock_args_free(&a);
	return status;
}

/* dlock run [opts] KEY|-k KEY... [opts] [--] COMMAND [ARGS...] */
static int
cmd_run(const struct command *cmd, int argc, char **argv)
{
	return run_holding(cmd, argc, argv, 0);
}

/* dlock campaign [opts] KEY VALUE [opts] [--] COMMAND [ARGS...] */
static int
cmd_campaign(const struct command *cmd, int argc, char **argv)
{
	return run_holding(cmd, argc, argv, 1);
}

/* ---- the other commands ---- */

/*
 * dlock lock [opts] KEY|-k KEY... [opts]: a detached lock (several keys:
 * all or none); prints the token and the fence of each key, in order.
 */
static int
cmd_lock(const struct command *cmd, int argc, char **argv)
{
	struct lock_args a = { .o = DLOCK_LOCK_OPTS_INIT };
	int r, status;
	dlock_t *d;

	if ((status = parse_lock_args(cmd, argc, argv, &a, 0)) != 0)
		goto out;
	a.o.detach = 1;
	if (a.o.ttl_ms == 0)
		a.o.ttl_ms = DETACH_DEFAULT_TTL_MS;
	if ((d = connect_or_report(&status)) == NULL)
		goto out;
	r = take_lock(d, &a, a.grants);
	if (r > 0) {
		for (size_t k = 0; k < a.nkeys; k++)
			printf("%s\n%lld\n", a.grants[k].token, a.grants[k].fence);
		status = 0;
	} else {
		status = r == 0 ? not_granted(a.label, a.o.wait_ms) : report(d);
	}
	dlock_close(d);
out:
	lock_args_free(&a);
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

/* A fixed-argument command: check its arguments, connect, call, close. */
static int
run_simple(const struct command *cmd, int argc, char **argv)
{
	long long num = 0;
	int status;
	dlock_t *d;

	if ((status = want_args(cmd, argc, argv, cmd->nargs)) != 0)
		return status;
	if (cmd->num_arg > 0 &&
	    parse_num(argv[cmd->num_arg], cmd->num_min, cmd->num_max, &num) < 0)
		return usage_error(cmd, "%s: %s", cmd->num_what, argv[cmd->num_arg]);
	if ((d = connect_or_report(&status)) == NULL)
		return status;
	if ((status = cmd->call(d, argv, num)) < 0)
		status = report(d);
	dlock_close(d);
	return status;
}

/* Print a call's number result; -1 if the call failed (n < 0). */
static int
print_result(long long n)
{
	if (n < 0)
		return -1;
	printf("%lld\n", n);
	return 0;
}

/* dlock unlock KEY TOKEN: prints the holds left */
static int
call_unlock(dlock_t *d, char **argv, long long num)
{
	(void)num;
	return print_result(dlock_unlock(d, argv[1], argv[2]));
}

/* dlock extend KEY MS TOKEN: prints the validity now */
static int
call_extend(dlock_t *d, char **argv, long long ms)
{
	return print_result(dlock_extend(d, argv[1], ms, argv[3]));
}

/* Print the fields of STATUS. */
static void
print_status(const struct dlock_status *st)
{
	printf("mode: %s\nholders: %lld\nwaiters: %lld\nfence: %lld\n"
	    "ttl_ms: %lld\nlimit: %lld\nbackend: %s\n", st->mode, st->holders,
	    st->waiters, st->fence, st->ttl_ms, st->limit, st->backend);
}

/* dlock status KEY */
static int
call_status(dlock_t *d, char **argv, long long num)
{
	struct dlock_status st;
	(void)num;
	if (dlock_status(d, argv[1], &st) != 0)
		return -1;
	print_status(&st);
	return 0;
}

#define TABLE_COLS 8		/* columns of the holders table at most */
#define TABLE_CELL 160		/* bytes of a cell */

/* A row of a table. */
struct table_row {
	char cell[TABLE_COLS][TABLE_CELL];	/* its cells */
};

/* Print title, then rows[0] (the header) and the other n - 1 rows, the
 * first ncols columns, each as wide as its widest cell. */
static void
print_table(const char *title, const struct table_row *rows, size_t n, int ncols)
{
	int width[TABLE_COLS] = { 0 };
	for (size_t r = 0; r < n; r++)
		for (int c = 0; c < ncols; c++)
			if ((int)strlen(rows[r].cell[c]) > width[c])
				width[c] = (int)strlen(rows[r].cell[c]);
	printf("\n%s\n", title);
	for (size_t r = 0; r < n; r++)
		for (int c = 0; c < ncols; c++) {
			if (c + 1 < ncols)
				printf("%-*s  ", width[c], rows[r].cell[c]);
			else
				printf("%s\n", rows[r].cell[c]);
		}
}

/* Fill the cells of row r: the session, name, addr and mode columns and
 * four more; an empty text is shown as "-", control characters (a name is
 * the client's choice) as "?". */
static void
table_set(struct table_row *r, long long session, const char *name, const char *addr,
    const char *mode, const char *c4, const char *c5, const char *c6, const char *c7)
{
	const char *text[TABLE_COLS] = { NULL, name, addr, mode, c4, c5, c6, c7 };
	snprintf(r->cell[0], TABLE_CELL, "%lld", session);
	for (int c = 1; c < TABLE_COLS; c++) {
		snprintf(r->cell[c], TABLE_CELL, "%s", *text[c] != '\0' ? text[c] : "-");
		for (char *p = r->cell[c]; *p != '\0'; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f)
				*p = '?';
	}
}

/* A duration in ms as a cell: "1234ms", or none when ms < 0. */
static const char *
ms_cell(char *buf, size_t size, long long ms, const char *none)
{
	if (ms < 0)
		return none;
	snprintf(buf, size, "%lldms", ms);
	return buf;
}

/* dlock status --verbose KEY: STATUS, then tables of its holders (through
 * any daemon of a shared backend, each with its daemon) and its waiters on
 * this dlockd. */
static int
call_status_full(dlock_t *d, const char *key)
{
	struct dlock_status_full st;
	struct dlock_holder_daemon *hd;
	char a[32], b[32], c[32], e[sizeof(hd->daemon_addr) + sizeof(hd->host) + 1];
	if (dlock_status_fleet(d, key, &st, &hd) != 0)
		return -1;
	print_status(&st.status);
	size_t n = (st.nholders > st.nwaiters ? st.nholders : st.nwaiters) + 1;
	struct table_row *rows = calloc(n, sizeof(*rows));
	if (rows == NULL) {
		dlock_status_full_free(&st);
		free(hd);
		fprintf(stderr, "dlock: out of memory\n");
		return EXIT_OSERR;
	}
	table_set(&rows[0], 0, "NAME", "ADDR", "MODE", "FENCE", "HELD", "LEASE LEFT", "DAEMON");
	snprintf(rows[0].cell[0], TABLE_CELL, "SESSION");
	for (size_t i = 0; i < st.nholders; i++) {
		const struct dlock_holder *h = &st.holders[i];
		snprintf(a, sizeof(a), "%lld%s", h->fence, h->detached ? " (detached)" : "");
		/* the daemon: its address on its host */
		if (hd != NULL && hd[i].daemon[0] != '\0')
			snprintf(e, sizeof(e), "%s@%s", hd[i].daemon_addr, hd[i].host);
		else
			e[0] = '\0';
		table_set(&rows[i + 1], h->session, h->name, h->addr, h->mode, a,
		    ms_cell(b, sizeof(b), h->held_ms, "-"),
		    ms_cell(c, sizeof(c), h->lease_ms, "-"), e);
	}
	print_table("holders, through any daemon:", rows, st.nholders + 1, 8);
	free(hd);
	table_set(&rows[0], 0, "NAME", "ADDR", "MODE", "WAITED", "WAIT LEFT", "DETACH", "");
	snprintf(rows[0].cell[0], TABLE_CELL, "SESSION");
	for (size_t i = 0; i < st.nwaiters; i++) {
		const struct dlock_waiter *w = &st.waiters[i];
		table_set(&rows[i + 1], w->session, w->name, w->addr, w->mode,
		    ms_cell(a, sizeof(a), w->waited_ms, "-"),
		    ms_cell(b, sizeof(b), w->wait_ms, "forever"), w->detach ? "yes" : "no", "");
	}
	print_table("waiters on this dlockd, in queue order:", rows, st.nwaiters + 1, 7);
	free(rows);
	dlock_status_full_free(&st);
	return 0;
}

/* dlock held [--count N] [PATTERN]: every key held through any daemon,
 * one per line (control characters as '?'), page after page. */
static int
cmd_held(const struct command *cmd, int argc, char **argv)
{
	const char *pattern = NULL, *val;
	long long count = 1000;
	int status = 0, missing = 0;
	dlock_t *d;

	for (int i = 1; i < argc; i++) {
		if ((val = opt_value(argc, argv, &i, "--count", &missing)) != NULL) {
			if (parse_num(val, 1, 10000, &count) != 0)
				return usage_error(cmd, "--count: not a number from 1 to 10000: %s",
				    val);
		} else if (missing) {
			return usage_error(cmd, "%s needs a value", argv[i]);
		} else if (argv[i][0] == '-' && argv[i][1] != '\0') {
			return usage_error(cmd, "unknown option %s", argv[i]);
		} else if (pattern == NULL) {
			pattern = argv[i];
		} else {
			return usage_error(cmd, "one PATTERN at most");
		}
	}
	if ((d = connect_or_report(&status)) == NULL)
		return status;
	struct dlock_held h;
	char cursor[sizeof(h.next)] = "0";
	do {
		if (dlock_held(d, cursor, pattern, count, &h) != 0) {
			status = report(d);
			break;
		}
		for (size_t i = 0; i < h.n; i++) {
			for (size_t j = 0; j < h.lens[i]; j++) {
				unsigned char c = (unsigned char)h.keys[i][j];
				putchar(c < 0x20 || c == 0x7f ? '?' : c);
			}
			putchar('\n');
		}
		memcpy(cursor, h.next, sizeof(cursor));
		dlock_held_free(&h);
		if ((status = flushed()) != 0)
			break;
	} while (strcmp(cursor, "0") != 0);
	dlock_close(d);
	return status;
}

/* dlock status [-v | --verbose] KEY */
static int
cmd_status(const struct command *cmd, int argc, char **argv)
{
	int verbose = argc > 1 && (strcmp(argv[1], "-v") == 0 ||
	    strcmp(argv[1], "--verbose") == 0);
	int status;
	dlock_t *d;

	if (!verbose)
		return run_simple(cmd, argc, argv);
	if ((status = want_args(cmd, argc - 1, argv + 1, 1)) != 0)
		return status;
	if ((d = connect_or_report(&status)) == NULL)
		return status;
	if ((status = call_status_full(d, argv[2])) < 0)
		status = report(d);
	dlock_close(d);
	return status;
}

/* dlock validate KEY FENCE: exit 0 when valid, 1 when not. */
static int
call_validate(dlock_t *d, char **argv, long long fence)
{
	int r = dlock_validate(d, argv[1], fence);
	if (r < 0)
		return -1;
	printf("%d\n", r);
	return r == 1 ? 0 : EXIT_INVALID;
}

/* dlock info: the INFO text, with LF line ends. */
static int
call_info(dlock_t *d, char **argv, long long num)
{
	char *s = dlock_info(d);
	(void)argv;
	(void)num;
	if (s == NULL)
		return -1;
	size_t len = strlen(s);
	for (char *c = s; *c != '\0'; c++)
		if (*c != '\r')
			putchar(*c);
	if (len > 0 && s[len - 1] != '\n')
		putchar('\n');
	free(s);
	return 0;
}

/* dlock ping */
static int
call_ping(dlock_t *d, char **argv, long long num)
{
	(void)argv;
	(void)num;
	if (dlock_ping(d) != 0)
		return -1;
	puts("PONG");
	return 0;
}

static const struct command commands[] = {
	{ "run", "[-v] [--ttl MS] [--wait MS] [--shared | --limit N] [--kill-after MS] "
	  "{KEY | -k KEY...} -- COMMAND [ARGS...]", .run = cmd_run },
	{ "lock", "[-v] [--ttl MS] [--wait MS] [--shared | --limit N] {KEY | -k KEY...}",
	  .run = cmd_lock },
	{ "campaign", "[-v] [--ttl MS] [--wait MS] [--kill-after MS] KEY VALUE "
	  "-- COMMAND [ARGS...]", .run = cmd_campaign },
	{ "leader", "[--json] KEY", .run = cmd_leader },
	{ "observe", "[--json] [--count N] KEY", .run = cmd_observe },
	{ "unlock", "KEY TOKEN", .nargs = 2, .call = call_unlock },
	{ "extend", "KEY MS TOKEN", .nargs = 3, .num_arg = 2, .num_min = 1,
	  .num_max = LLONG_MAX, .num_what = "not a positive number of milliseconds",
	  .call = call_extend },
	{ "status", "[-v | --verbose] KEY", .run = cmd_status, .nargs = 1,
	  .call = call_status },
	{ "held", "[--count N] [PATTERN]", .run = cmd_held },
	{ "validate", "KEY FENCE", .nargs = 2, .num_arg = 2, .num_min = LLONG_MIN,
	  .num_max = LLONG_MAX, .num_what = "not a fence", .call = call_validate },
	{ "info", "", .call = call_info },
	{ "ping", "", .call = call_ping },
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
#define X(name, value, text) printf("  %3d  %s\n", value, text);
			EXIT_CODES
#undef X
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
			const struct command *cmd = &commands[c];
			status = cmd->run != NULL ? cmd->run(cmd, argc - i, argv + i) :
			    run_simple(cmd, argc - i, argv + i);
			if (fflush(stdout) != 0 && status == 0) {
				fprintf(stderr, "dlock: cannot write output: %s\n", strerror(errno));
				status = EXIT_IOERR;
			}
			return status;
		}
	}
	return usage_error(NULL, "unknown command %s", argv[i]);
}
