/*
 * replay — run a fuzz harness on saved inputs, without libFuzzer: make
 * check links it with each harness (built by the normal compiler, with the
 * sanitizers under SAN=1 and under valgrind with check-valgrind) and runs
 * it on the harness's seed corpus and its regression inputs.
 *
 *   replay-NAME DIR|FILE...
 *
 * Every file of every directory given (not recursively) is one input. A
 * failed invariant or a sanitizer's report ends the process; else it
 * prints "replay NAME: N inputs" and exits 0.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Read all of path into a new buffer (*len bytes); NULL on error. */
static uint8_t *
slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t cap = 0, n = 0, got;

	if (fp == NULL)
		return NULL;
	do {
		if (n == cap) {
			uint8_t *nbuf = realloc(buf, cap = cap ? cap * 2 : 4096);
			if (nbuf == NULL) {
				free(buf);
				fclose(fp);
				return NULL;
			}
			buf = nbuf;
		}
		got = fread(buf + n, 1, cap - n, fp);
		n += got;
	} while (got > 0);
	if (ferror(fp)) {
		free(buf);
		buf = NULL;
	}
	fclose(fp);
	*len = n;
	return buf;
}

/* Run the harness on one file, as libFuzzer would: on a copy of exactly
 * its bytes. 0, or -1 if it cannot be read. */
static int
replay_file(const char *path)
{
	size_t len = 0;
	uint8_t *buf = slurp(path, &len), *copy;

	if (buf == NULL) {
		fprintf(stderr, "replay: cannot read %s: %s\n", path, strerror(errno));
		return -1;
	}
	copy = malloc(len ? len : 1);
	if (copy == NULL) {
		free(buf);
		return -1;
	}
	memcpy(copy, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(copy, len);
	free(copy);
	return 0;
}

/* Sort directory entries by name, so that runs are repeatable. */
static int
by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

int
main(int argc, char **argv)
{
	const char *name = strrchr(argv[0], '-') != NULL ? strrchr(argv[0], '-') + 1 : argv[0];
	unsigned long n = 0;
	int status = 0;

	for (int i = 1; i < argc; i++) {
		struct stat st;
		struct dirent **ents;
		int k;

		if (stat(argv[i], &st) < 0)
			continue;	/* no regression inputs yet */
		if (!S_ISDIR(st.st_mode)) {
			status |= replay_file(argv[i]);
			n++;
			continue;
		}
		if ((k = scandir(argv[i], &ents, NULL, by_name)) < 0) {
			fprintf(stderr, "replay: cannot list %s: %s\n", argv[i], strerror(errno));
			status = -1;
			continue;
		}
		for (int j = 0; j < k; j++) {
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", argv[i], ents[j]->d_name);
			if (ents[j]->d_name[0] != '.' && stat(path, &st) == 0 &&
			    S_ISREG(st.st_mode)) {
				fprintf(stderr, "replay %s: %s\n", name, path);
				status |= replay_file(path);
				n++;
			}
			free(ents[j]);
		}
		free(ents);
	}
	printf("replay %s: %lu inputs\n", name, n);
	return status == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
