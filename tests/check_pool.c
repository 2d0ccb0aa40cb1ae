/*
 * check_pool — unit tests of record pools (daemon/pool.c): a record comes
 * zeroed whether new or reused, the last one given back is the next one
 * handed out, no more than the set number of spares is kept, and (under
 * AddressSanitizer) a spare record is poisoned until it is handed out again.
 * Leaks are left to the sanitizer and valgrind runs of the suite.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "suite.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

/* A record of the size the tests use. */
struct rec {
	char bytes[72];
};

/* Whether all n bytes at p are zero. */
static int
all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i] != 0)
			return 0;
	return 1;
}

START_TEST(zeroed_new_and_reused)
{
	struct pool p;
	pool_init(&p, sizeof(struct rec), 4);
	struct rec *r = pool_get(&p);
	ck_assert(all_zero(r, sizeof(*r)));
	memset(r, 0xa5, sizeof(*r));
	pool_put(&p, r);
	ck_assert_uint_eq(p.nspare, 1);
	struct rec *again = pool_get(&p);
	ck_assert_ptr_eq(again, r);	/* the spare is reused */
	ck_assert(all_zero(again, sizeof(*again)));
	ck_assert_uint_eq(p.nspare, 0);
	pool_put(&p, again);
	pool_fini(&p);
	ck_assert_uint_eq(p.nspare, 0);
	ck_assert_ptr_null(p.spare);
}
END_TEST

START_TEST(last_back_first_out)
{
	struct pool p;
	struct rec *r[3];
	pool_init(&p, sizeof(struct rec), 8);
	for (int i = 0; i < 3; i++)
		r[i] = pool_get(&p);
	for (int i = 0; i < 3; i++)
		pool_put(&p, r[i]);
	for (int i = 2; i >= 0; i--)
		ck_assert_ptr_eq(pool_get(&p), r[i]);
	ck_assert_uint_eq(p.nspare, 0);
	/* a record handed out may also go back with free() */
	for (int i = 0; i < 3; i++)
		free(r[i]);
	pool_fini(&p);
}
END_TEST

START_TEST(keeps_at_most_keep)
{
	enum { KEEP = 5, N = 40 };
	struct pool p;
	void *r[N];
	pool_init(&p, sizeof(struct rec), KEEP);
	for (int i = 0; i < N; i++)
		r[i] = pool_get(&p);
	for (int i = 0; i < N; i++) {
		pool_put(&p, r[i]);
		ck_assert_uint_eq(p.nspare, (size_t)(i + 1 < KEEP ? i + 1 : KEEP));
	}
	/* the spares serve the next gets, then new records follow */
	for (int i = 0; i < N; i++) {
		r[i] = pool_get(&p);
		ck_assert(all_zero(r[i], sizeof(struct rec)));
	}
	ck_assert_uint_eq(p.nspare, 0);
	for (int i = 0; i < N; i++)
		pool_put(&p, r[i]);
	pool_fini(&p);
}
END_TEST

START_TEST(pointer_sized_records)
{
	struct pool p;
	pool_init(&p, sizeof(void *), 2);
	void **a = pool_get(&p), **b = pool_get(&p);
	ck_assert_ptr_null(*a);
	*a = b;
	pool_put(&p, a);
	pool_put(&p, b);
	ck_assert_ptr_eq(pool_get(&p), b);
	a = pool_get(&p);
	ck_assert_ptr_null(*a);
	pool_put(&p, a);
	pool_put(&p, b);
	pool_fini(&p);
}
END_TEST

#if defined(__SANITIZE_ADDRESS__)
START_TEST(spares_poisoned)
{
	struct pool p;
	pool_init(&p, sizeof(struct rec), 4);
	struct rec *r = pool_get(&p);
	ck_assert_int_eq(__asan_region_is_poisoned(r, sizeof(*r)) == NULL, 1);
	pool_put(&p, r);
	ck_assert_int_eq(__asan_address_is_poisoned(r), 1);
	ck_assert_int_eq(__asan_address_is_poisoned(r->bytes + sizeof(r->bytes) - 1), 1);
	r = pool_get(&p);
	ck_assert_int_eq(__asan_region_is_poisoned(r, sizeof(*r)) == NULL, 1);
	pool_put(&p, r);
	pool_fini(&p);
}
END_TEST
#endif

int
main(void)
{
	Suite *s = suite_create("pool");
	TCase *tc = suite_case(s, "pool", NULL, NULL, 0, SUITE_TESTS(zeroed_new_and_reused,
	    last_back_first_out, keeps_at_most_keep, pointer_sized_records));

#if defined(__SANITIZE_ADDRESS__)
	tcase_add_test(tc, spares_poisoned);
#else
	(void)tc;	/* poisoning is ASan's */
#endif
	return suite_run(s);
}
