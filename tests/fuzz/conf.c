/*
 * conf — fuzz the YAML configuration loader (daemon/conf.c).
 *
 * The input is the file: written to a memfd, loaded through
 * /proc/self/fd/N with conf_load(), then conf_finish(), as dlockd -t does.
 * It checks that every error starts with the file's name and
 * ":line:column:" (or "command line:"), that conf_load() and conf_finish()
 * say -1 exactly when errors were added, and that a config without errors
 * keeps the rules between settings. ASan and the leak check watch the rest.
 */
#include <ctype.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conf.h"
#include "fuzz.h"

/* Whether e starts with "path:LINE:COL: " (numbers from 1) or "command line: ". */
static bool
positioned(const char *e, const char *path)
{
	size_t n = strlen(path);

	if (strncmp(e, "command line: ", 14) == 0)
		return true;
	if (strncmp(e, path, n) != 0 || e[n] != ':')
		return false;
	e += n + 1;
	for (int part = 0; part < 2; part++) {
		if (!isdigit((unsigned char)*e) || *e == '0')
			return false;
		while (isdigit((unsigned char)*e))
			e++;
		if (*e++ != ':')
			return false;
	}
	return *e == ' ';
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd = -1;
	char path[64];

	fuzz_quiet();
	if (fd < 0) {
		/* a password file may be named by the input: never the terminal */
		int null = open("/dev/null", O_RDONLY);
		if (null < 0 || dup2(null, 0) < 0)
			abort();
		close(null);
		if ((fd = memfd_create("dlockd.yaml", 0)) < 0)
			abort();
	}
	if (ftruncate(fd, 0) < 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);

	struct conf *c = conf_create();
	int rc = conf_load(c, path);
	FUZZ_CHECK((rc == 0) == (c->nerrors == 0));
	size_t loaded = c->nerrors;
	rc = conf_finish(c);
	FUZZ_CHECK((rc == 0) == (c->nerrors == 0) && c->nerrors >= loaded);
	for (size_t i = 0; i < c->nerrors; i++) {
		if (!positioned(c->errors[i], path))
			fprintf(stderr, "error without a place: %s\n", c->errors[i]);
		FUZZ_CHECK(positioned(c->errors[i], path));
	}
	if (rc == 0) {
		FUZZ_CHECK(c->backend_type != NULL && c->log_level != NULL);
		FUZZ_CHECK(c->default_ttl_ms > 0 && c->default_ttl_ms <= c->max_ttl_ms);
		FUZZ_CHECK(c->max_key_bytes < c->max_request_bytes);
		FUZZ_CHECK(c->nlisten == 0 || c->listen != NULL);
	}
	conf_destroy(c);
	return 0;
}
