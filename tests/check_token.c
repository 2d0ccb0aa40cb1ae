/*
 * check_token — unit tests of lease tokens (daemon/token.c): their form,
 * no repeat across several refills of the pool, every hex digit about as
 * frequent as the others, and a forked child that does not hand out the
 * tokens its parent will.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "suite.h"
#include "token.h"

#define TOKENS_PER_POOL (TOKEN_POOL_BYTES / (TOKEN_LEN / 2))

static int
cmp_token(const void *a, const void *b)
{
	return memcmp(a, b, TOKEN_LEN);
}

START_TEST(form)
{
	char t[TOKEN_LEN + 8];
	memset(t, 'x', sizeof(t));
	token_new(t);
	ck_assert_uint_eq(strlen(t), TOKEN_LEN);
	ck_assert_uint_eq(strspn(t, "0123456789abcdef"), TOKEN_LEN);
	ck_assert_int_eq(t[TOKEN_LEN + 1], 'x');	/* nothing written past the NUL */
}
END_TEST

START_TEST(no_repeat_across_refills)
{
	enum { N = 4 * TOKENS_PER_POOL + 7 };
	char (*t)[TOKEN_LEN + 1] = calloc(N, sizeof(*t));
	ck_assert_ptr_nonnull(t);
	for (size_t i = 0; i < N; i++) {
		token_new(t[i]);
		ck_assert_uint_eq(strspn(t[i], "0123456789abcdef"), TOKEN_LEN);
	}
	qsort(t, N, sizeof(*t), cmp_token);
	for (size_t i = 1; i < N; i++)
		ck_assert_msg(memcmp(t[i - 1], t[i], TOKEN_LEN) != 0, "token %s twice", t[i]);
	free(t);
}
END_TEST

START_TEST(digits_even)
{
	enum { N = 4096 };
	unsigned long count[16] = { 0 };
	char t[TOKEN_LEN + 1];
	for (size_t i = 0; i < N; i++) {
		token_new(t);
		for (size_t j = 0; j < TOKEN_LEN; j++)
			count[strchr("0123456789abcdef", t[j]) - "0123456789abcdef"]++;
	}
	/* 8192 of each expected, one standard deviation about 88 */
	for (size_t d = 0; d < 16; d++) {
		ck_assert_uint_gt(count[d], 8192 - 820);
		ck_assert_uint_lt(count[d], 8192 + 820);
	}
}
END_TEST

START_TEST(fork_draws_its_own)
{
	char parent[TOKEN_LEN + 1], child[TOKEN_LEN + 1];
	int fds[2];
	token_new(parent);	/* the pool is filled, most of it unused */
	ck_assert_int_eq(pipe(fds), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		token_new(child);
		_exit(write(fds[1], child, TOKEN_LEN) == TOKEN_LEN ? 0 : 1);
	}
	close(fds[1]);
	ck_assert_int_eq(read(fds[0], child, TOKEN_LEN), TOKEN_LEN);
	child[TOKEN_LEN] = '\0';
	close(fds[0]);
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* without its own draw the child would have made the parent's next */
	token_new(parent);
	ck_assert_str_ne(parent, child);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("token");

	suite_case(s, "token", NULL, NULL, 0, SUITE_TESTS(form, no_repeat_across_refills,
	    digits_even, fork_draws_its_own));
	return suite_run(s);
}
