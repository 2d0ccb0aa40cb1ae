/*
 * check_rcluster — unit tests of what a Redis Cluster client computes
 * (daemon/redis/rcluster.c): CRC16 and hash slots as Redis computes them (values
 * CLUSTER KEYSLOT gave), hash tags, the escaping of a lock's key into its
 * tag, a channel tag for every slot, CLUSTER SLOTS replies (good, odd and
 * bad), and the redirections of error replies.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "rcluster.h"
#include "suite.h"

/* The reply that RESP text resp reads as (freeReplyObject it). */
static redisReply *
reply_of(const char *resp)
{
	redisReader *rd = redisReaderCreate();
	void *rep = NULL;
	ck_assert_int_eq(redisReaderFeed(rd, resp, strlen(resp)), REDIS_OK);
	ck_assert_int_eq(redisReaderGetReply(rd, &rep), REDIS_OK);
	ck_assert_ptr_nonnull(rep);
	redisReaderFree(rd);
	return rep;
}

static unsigned
slot_of(const char *key)
{
	return rcluster_slot(key, strlen(key));
}

START_TEST(crc16_and_slots)
{
	ck_assert_uint_eq(rcluster_crc16("123456789", 9), 0x31c3);	/* XMODEM's check */
	ck_assert_uint_eq(rcluster_crc16("", 0), 0);
	/* CLUSTER KEYSLOT of Redis 7.0 */
	ck_assert_uint_eq(slot_of("foo"), 12182);
	ck_assert_uint_eq(slot_of("foo{{bar}}zap"), 4015);	/* the tag is "{bar" */
	ck_assert_uint_eq(slot_of("{bar"), 4015);		/* no tag: the whole key */
	ck_assert_uint_eq(slot_of("foo{}{bar}"), 8363);	/* an empty tag: the whole key */
	ck_assert_uint_eq(slot_of("{user1000}.following"), slot_of("{user1000}.followers"));
	ck_assert_uint_eq(slot_of("{user1000}.following"), slot_of("user1000"));
	ck_assert_uint_eq(slot_of("dlock:l:{b}"), 3300);
}
END_TEST

START_TEST(lock_key_escaped)
{
	char out[64];
	size_t n = rcluster_escape(out, "a}b%c", 5);
	ck_assert_uint_eq(n, 9);
	ck_assert_int_eq(memcmp(out, "a%7Db%25c", 9), 0);
	ck_assert_uint_eq(rcluster_escape(out, "{x", 2), 2);	/* '{' stays */
	/* every key of a lock is in the slot of its escaped form (KEYSLOT) */
	ck_assert_uint_eq(rcluster_lock_slot("a}b%c", 5), 6044);
	ck_assert_uint_eq(slot_of("dlock:l:{a%7Db%25c}"), 6044);
	ck_assert_uint_eq(rcluster_lock_slot("b", 1), 3300);
	/* binary keys and long ones (escaped on the heap) */
	ck_assert_uint_eq(rcluster_lock_slot("a\0b", 3), rcluster_crc16("a\0b", 3) % RC_SLOTS);
	char *big = malloc(1000);
	memset(big, '}', 1000);
	char *esc = malloc(RCLUSTER_ESCAPED_MAX(1000));
	n = rcluster_escape(esc, big, 1000);
	ck_assert_uint_eq(n, 3000);
	ck_assert_uint_eq(rcluster_lock_slot(big, 1000), rcluster_crc16(esc, n) % RC_SLOTS);
	free(esc);
	free(big);
}
END_TEST

START_TEST(slot_tags)
{
	/* every slot has a tag of 1 to 4 characters that lands in it */
	for (unsigned s = 0; s < RC_SLOTS; s++) {
		const char *t = rcluster_slot_tag(s);
		char name[32];
		ck_assert_uint_ge(strlen(t), 1);
		ck_assert_uint_lt(strlen(t), RC_TAG_MAX);
		ck_assert_uint_eq(rcluster_slot(t, strlen(t)), s);
		snprintf(name, sizeof(name), "dlock:released{%s}", t);
		ck_assert_uint_eq(slot_of(name), s);
	}
	/* the first one-character string of each slot it reaches */
	ck_assert_str_eq(rcluster_slot_tag(slot_of("0")), "0");
	ck_assert_str_eq(rcluster_slot_tag(slot_of("z")), "z");
}
END_TEST

START_TEST(slots_reply)
{
	struct rc_range *r;
	size_t n;
	const char *why = NULL;
	/* three ranges out of order; one master with no host (""), its
	 * replica after it */
	redisReply *rep = reply_of("*3\r\n"
	    "*4\r\n:5461\r\n:10922\r\n*3\r\n$9\r\n127.0.0.1\r\n:7002\r\n$2\r\nid\r\n"
	    "*3\r\n$9\r\n127.0.0.1\r\n:7005\r\n$2\r\nid\r\n"
	    "*3\r\n:0\r\n:5460\r\n*2\r\n$0\r\n\r\n:7001\r\n"
	    "*3\r\n:10923\r\n:16383\r\n*3\r\n$9\r\nredis.lan\r\n:7003\r\n$2\r\nid\r\n");
	ck_assert_int_eq(rcluster_parse_slots(rep, "seed.lan", &r, &n, &why), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(r[0].first, 0);
	ck_assert_uint_eq(r[0].last, 5460);
	ck_assert_str_eq(r[0].host, "seed.lan");
	ck_assert_int_eq(r[0].port, 7001);
	ck_assert_uint_eq(r[1].first, 5461);
	ck_assert_str_eq(r[1].host, "127.0.0.1");
	ck_assert_int_eq(r[1].port, 7002);
	ck_assert_str_eq(r[2].host, "redis.lan");
	ck_assert_uint_eq(r[2].last, 16383);
	free(r);
	freeReplyObject(rep);

	/* "?" (unknown endpoint) is the node asked too; no ranges: none */
	rep = reply_of("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$1\r\n?\r\n:7001\r\n");
	ck_assert_int_eq(rcluster_parse_slots(rep, "h", &r, &n, &why), 0);
	ck_assert_str_eq(r[0].host, "h");
	free(r);
	freeReplyObject(rep);
	rep = reply_of("*0\r\n");
	ck_assert_int_eq(rcluster_parse_slots(rep, "h", &r, &n, &why), 0);
	ck_assert_uint_eq(n, 0);
	free(r);
	freeReplyObject(rep);

	/* bad: an error, overlaps, a slot out of range, a range backwards, a
	 * port out of range, no master */
	static const char *const bad[] = {
		"-ERR This instance has cluster support disabled\r\n",
		"*2\r\n*3\r\n:0\r\n:100\r\n*2\r\n$1\r\na\r\n:1\r\n"
		"*3\r\n:100\r\n:200\r\n*2\r\n$1\r\nb\r\n:2\r\n",
		"*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\na\r\n:1\r\n",
		"*1\r\n*3\r\n:9\r\n:8\r\n*2\r\n$1\r\na\r\n:1\r\n",
		"*1\r\n*3\r\n:0\r\n:8\r\n*2\r\n$1\r\na\r\n:65536\r\n",
		"*1\r\n*2\r\n:0\r\n:8\r\n",
		":1\r\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		rep = reply_of(bad[i]);
		why = NULL;
		ck_assert_int_eq(rcluster_parse_slots(rep, "h", &r, &n, &why), -1);
		ck_assert_ptr_nonnull(why);
		ck_assert_ptr_null(r);
		freeReplyObject(rep);
	}
}
END_TEST

START_TEST(redirections)
{
	char host[64];
	unsigned slot = 0;
	int port = 0;
	ck_assert_int_eq(rcluster_redirect("MOVED 3999 127.0.0.1:6381", "a", &slot, host,
	    sizeof(host), &port), RC_MOVED);
	ck_assert_uint_eq(slot, 3999);
	ck_assert_str_eq(host, "127.0.0.1");
	ck_assert_int_eq(port, 6381);
	/* an empty host: the node that answered */
	ck_assert_int_eq(rcluster_redirect("ASK 12 :7000", "asked", &slot, host, sizeof(host),
	    &port), RC_ASK);
	ck_assert_str_eq(host, "asked");
	ck_assert_int_eq(port, 7000);
	/* IPv6, bare or in brackets; a name */
	ck_assert_int_eq(rcluster_redirect("MOVED 1 ::1:7000", "a", &slot, host, sizeof(host),
	    &port), RC_MOVED);
	ck_assert_str_eq(host, "::1");
	ck_assert_int_eq(rcluster_redirect("MOVED 1 [::1]:7000", "a", &slot, host, sizeof(host),
	    &port), RC_MOVED);
	ck_assert_str_eq(host, "::1");
	ck_assert_int_eq(rcluster_redirect("MOVED 16383 redis-2.lan:7000", "a", &slot, host,
	    sizeof(host), &port), RC_MOVED);
	ck_assert_str_eq(host, "redis-2.lan");
	ck_assert_uint_eq(slot, 16383);
	ck_assert_int_eq(rcluster_redirect("TRYAGAIN Multiple keys request during rehashing of "
	    "slot", "a", &slot, host, sizeof(host), &port), RC_RETRY);
	ck_assert_int_eq(rcluster_redirect("CLUSTERDOWN The cluster is down", "a", &slot, host,
	    sizeof(host), &port), RC_RETRY);
	/* not redirections, or malformed ones */
	static const char *const none[] = { "ERR unknown command", "MOVED", "MOVED 1",
		"MOVED x 127.0.0.1:1", "MOVED 16384 a:1", "MOVED 1 a:0", "MOVED 1 a:99999",
		"MOVED 1 a", "ASK 1 a:b", "LOADING" };
	for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++)
		ck_assert_int_eq(rcluster_redirect(none[i], "a", &slot, host, sizeof(host), &port),
		    RC_NONE);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("rcluster");

	suite_case(s, "core", NULL, NULL, 0, SUITE_TESTS(crc16_and_slots, lock_key_escaped,
	    slot_tags, slots_reply, redirections));
	return suite_run(s);
}
