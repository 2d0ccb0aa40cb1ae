/*
 * rscript — the Lua scripts of leases in Redis and their arguments
 * (rscript.h).
 */
#include "rscript.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rcluster.h"
#include "xmalloc.h"


#define LUA_NOW "local t = redis.call('TIME') " \
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
#define LUA_KEEP "local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES') " \
	"redis.call('PEXPIREAT', KEYS[1], last[2]) "
/* counter(s, ms): a fence counter's value s (false: none) read: the
 * counter, and the time (ms, a string) its observed mark ends when that is
 * after ms, else false. The value is the counter, then, while a daemon
 * observes the key, a space and that time (the look script sets it): so a
 * grant learns that the key is observed from the read that reserves its
 * fence, and an unobserved key pays nothing for observers. A value of
 * another form stops the script with an error */
#define LUA_COUNTER "local function counter(s, ms) " \
	"local c = tonumber(s or '0') if c then return c, false end " \
	"local d, o = string.match(s, '^(%d+) (%d+)$') " \
	"return tonumber(d), tonumber(o) > ms and o end "
/* fence(n): reserve n fences of KEYS[2], the first returned: above the
 * counter and above the clock in us; the counter keeps the last (and the
 * observed mark while it lasts). Second result: whether the key is
 * observed. The clock is ahead of the counter but after a burst of grants
 * in one microsecond: one SET ... GET then does it all */
#define LUA_FENCE LUA_COUNTER "local function fence(n) " \
	"local t = redis.call('TIME') " \
	"local us = tonumber(t[1]) * 1000000 + tonumber(t[2]) " \
	"local old, o = counter(redis.call('SET', KEYS[2], " \
	"  string.format('%.0f', us + n - 1), 'GET'), math.floor(us / 1000)) " \
	"if old < us and not o then return us, false end " \
	"local f = old < us and us or old + 1 " \
	"redis.call('SET', KEYS[2], string.format('%.0f', f + n - 1) .. (o and ' ' .. o or '')) " \
	"return f, o ~= false end "
/* record(e, member, f, obs, value, ch, key): a grant of member with fence
 * f, called when it is a CAMPAIGN's (value not nil) or the key is observed
 * (obs): a CAMPAIGN's is written in the election record e with its value
 * (its count of PROCLAIMs from 0: redlock reads the latest value from the
 * node that counts most);
 * any grant of an observed key is too, and published on ch. An exclusive
 * grant of an observed key is a new state: its version (as the look script
 * numbers states) and the state itself are set, and it joins the record's
 * history of the last RSCRIPT_HISTORY leaders (version, term, value), so
 * that an observer that reads later still sees it. 1 | 0: whether it is
 * observed */
#define LUA_RECORD \
	"local function record(e, member, f, obs, value, ch, key) " \
	"local t = string.format('%.0f', f) " \
	"local has = value ~= nil " \
	"if has then redis.call('HSET', e, 'm', member, 't', t, 'v', value, 'p', '0') " \
	"elseif obs then redis.call('HSET', e, 'm', member, 't', t, 'p', '0') " \
	"  redis.call('HDEL', e, 'v') end " \
	"if not obs then return 0 end " \
	"if string.sub(member, 1, 3) == 'x0:' then " \
	"  local st = redis.call('HMGET', e, 'n', 'p', 'h') " \
	"  local n = string.format('%.0f', math.max(tonumber(st[1] or '0') + 1, " \
	"    tonumber(redis.call('TIME')[1]) * 1000000)) " \
	"  local h = st[3] and cmsgpack.unpack(st[3]) or {} " \
	"  h[#h + 1] = {n, t, has and value or false} " \
	"  while #h > " RSCRIPT_HISTORY_S " do table.remove(h, 1) end " \
	"  redis.call('HSET', e, 'n', n, 's', 'x0 1 ' .. t .. ' ' .. member .. ' ' .. " \
	"    (st[2] or '0'), 'h', cmsgpack.pack(h)) " \
	"end " \
	"redis.call('PUBLISH', ch, key) " \
	"return 1 end "
/* who(i, member, f, w, ms, x, fresh): keep w (false or '': nothing to
 * keep), who took member's lease with fence f, in i, the key's holders:
 * for an exclusive lease (x) the string "member TAB fence TAB w", expiring
 * with the lease (ms); for a shared one or a permit the field member of a
 * hash, "fence TAB w", the hash lasting at least ms more. fresh: the key
 * had no lease, so what i holds describes leases that ended. i of the
 * other type (left by leases that ended) is replaced */
#define LUA_WHO "local function who(i, member, f, w, ms, x, fresh) " \
	"if not w or w == '' then return end " \
	"local d = string.format('%.0f', f) .. '\\t' .. w " \
	"if x then redis.call('SET', i, member .. '\\t' .. d, 'PX', ms) return end " \
	"if fresh then redis.call('DEL', i) end " \
	"local r = redis.pcall('HSET', i, member, d) " \
	"if type(r) == 'table' and r.err then redis.call('DEL', i) " \
	"  redis.call('HSET', i, member, d) end " \
	"if redis.call('PTTL', i) < tonumber(ms) then redis.call('PEXPIRE', i, ms) end end "
/* v = KEYS[1] as a string: the member when one exclusive lease holds it,
 * false when there is none, an error table when it is a sorted set */
#define LUA_STRING "local v = redis.pcall('GET', KEYS[1]) "

const char *const rscript_text[RS_COUNT] = {
	/* acquire: KEYS lock, fence, mark, election record, holders; ARGV
	 * member, ttl, kind, limit, mark ms, fences to reserve, wanted channel,
	 * key, release channel, who takes it ('' if unknown; kept in the
	 * holders' key), and a CAMPAIGN's value (none for other grants). {1, first
	 * fence, observed (record)} | {0, ms to wait: the first lease to end}
	 * (the mark set, the key published on the wanted channel) | {-1}
	 * (another kind) */
	LUA_FENCE
	LUA_RECORD
	LUA_WHO
	"local want = ARGV[3] "
	"local function grant(n, fresh) local f, obs = fence(n) "
	"  who(KEYS[5], ARGV[1], f, ARGV[10], ARGV[2], want == 'x0', fresh) "
	"  if not obs and ARGV[11] == nil then return {1, f, 0} end "
	"  return {1, f, record(KEYS[4], ARGV[1], f, obs, ARGV[11], ARGV[9], ARGV[8])} end "
	"local function busy(ms) redis.call('SET', KEYS[3], '1', 'PX', ARGV[5]) "
	"  redis.call('PUBLISH', ARGV[7], ARGV[8]) "
	"  return {0, ms} end "
	"if want == 'x0' and redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then "
	"  return grant(tonumber(ARGV[6])) end "
	"if redis.call('TYPE', KEYS[1]).ok == 'string' then "
	"  if string.sub(want, 1, 1) == 'n' then return {-1} end "
	"  return busy(redis.call('PTTL', KEYS[1])) end "
	LUA_NOW
	"redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) "
	"local n = redis.call('ZCARD', KEYS[1]) "
	"if n > 0 then "
	"  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES') "
	"  local kind = string.sub(first[1], 1, string.find(first[1], ':', 1, true) - 1) "
	"  if kind ~= want and (string.sub(kind, 1, 1) == 'n' or "
	"      string.sub(want, 1, 1) == 'n') then return {-1} end "
	"  if kind ~= want or want == 'x0' or "
	"      (string.sub(want, 1, 1) == 'n' and n >= tonumber(ARGV[4])) then "
	"    return busy(tonumber(first[2]) - now) end "
	"end "
	"if want == 'x0' then "
	"  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
	"  return grant(tonumber(ARGV[6])) end "
	"redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1]) "
	LUA_KEEP
	"return grant(1, n == 0)",

	/* release: KEYS lock, mark, observers' mark, holders; ARGV member,
	 * channel, key. 1 | 0 (not ours). Its description goes from the
	 * holders' key. An exclusive lease and the marks go in one
	 * DEL; a lease given back but not confirmed (member .. '~', the renew
	 * script) goes too, and so does one broken (member .. '!', the force
	 * script), which its holder's daemon gives back once it told it. The key is published when a daemon waits or
	 * observes (either mark was there): both marks are for the next
	 * release only, set again by the waiters' acquire and the observers'
	 * look that the message brings about */
	LUA_STRING
	"if v == ARGV[1] or v == ARGV[1] .. '~' or v == ARGV[1] .. '!' then "
	"  redis.call('DEL', KEYS[4]) "
	"  if redis.call('DEL', KEYS[1], KEYS[2], KEYS[3]) > 1 then "
	"    redis.call('PUBLISH', ARGV[2], ARGV[3]) end "
	"  return 1 end "
	"if type(v) == 'string' or "
	"    redis.call('ZREM', KEYS[1], ARGV[1], ARGV[1] .. '~', ARGV[1] .. '!') < 1 then "
	"  return 0 end "
	"redis.pcall('HDEL', KEYS[4], ARGV[1]) "
	"if redis.call('DEL', KEYS[2], KEYS[3]) > 0 then "
	"  redis.call('PUBLISH', ARGV[2], ARGV[3]) end "
	"return 1",

	/* renew: KEYS lock, holders, broken; ARGV member, ttl, bring, limit.
	 * The lease
	 * lasts at least ttl from now; a later end is kept, and the holders'
	 * hash lasts as long. 1 | 0 (not ours any more) |
	 * {3, who broke it}: broken by the force script (member .. '!'): its
	 * holder is told, then its daemon releases it |
	 * 2: the lease is there as given back but not confirmed (member ..
	 * '~'), or it was not there, bring is '1' and the key's leases let it
	 * in (a limit of 0: no limit): given back now, unconfirmed. A lease
	 * given back blocks others as the lease does, but answers 2 until the
	 * confirm script makes it the member again (a node of a quorum that
	 * lost or missed the lease: it does not count until a quorum that
	 * held it all along has confirmed it) */
	LUA_STRING
	"local m = ARGV[1] .. '~' "
	"if v == ARGV[1] .. '!' or (v and type(v) ~= 'string' and "
	"    redis.call('ZSCORE', KEYS[1], ARGV[1] .. '!')) then "
	"  return {3, redis.call('GET', KEYS[3]) or ''} end "
	"local function keep() local p = redis.call('PTTL', KEYS[2]) "
	"  if p >= 0 and p < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end end "
	"if v == ARGV[1] or v == m then "
	"  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then "
	"    redis.call('PEXPIRE', KEYS[1], ARGV[2]) "
	"    redis.call('PEXPIRE', KEYS[2], ARGV[2]) end "
	"  return v == m and 2 or 1 end "
	"if type(v) == 'string' then return 0 end "
	"local x = string.sub(ARGV[1], 1, 2) == 'x0' "
	"if not v and x then "
	"  if ARGV[3] ~= '1' then return 0 end "
	"  redis.call('SET', KEYS[1], m, 'PX', ARGV[2]) "
	"  return 2 end "
	LUA_NOW
	"for i, member in ipairs({ARGV[1], m}) do "
	"  local s = v and redis.call('ZSCORE', KEYS[1], member) "
	"  if s and tonumber(s) > now then "
	"    local e = now + tonumber(ARGV[2]) "
	"    if tonumber(s) < e then "
	"      redis.call('ZADD', KEYS[1], e, member) "
	LUA_KEEP
	"      keep() "
	"    end "
	"    return i end "
	"end "
	"if ARGV[3] ~= '1' then return 0 end "
	"if v then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) end "
	"local n = v and redis.call('ZCARD', KEYS[1]) or 0 "
	"if n > 0 then "
	"  local first = redis.call('ZRANGE', KEYS[1], 0, 0) "
	"  local function kind(s) return string.sub(s, 1, string.find(s, ':', 1, true)) end "
	"  if x or kind(first[1]) ~= kind(ARGV[1]) or "
	"      (tonumber(ARGV[4]) > 0 and n >= tonumber(ARGV[4])) then return 0 end "
	"end "
	"if x then "
	"  redis.call('SET', KEYS[1], m, 'PX', ARGV[2]) "
	"  return 2 end "
	"redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), m) "
	LUA_KEEP
	"return 2",

	/* transfer (exclusive leases): KEYS lock, fence, mark, election
	 * record, holders; ARGV to, from, ttl, handoffs in a row before this
	 * one, handoff limit, channel, key, fences to reserve, who takes it (''
	 * if unknown), and to's CAMPAIGN value (none for other grants). When the run has reached the limit and another
	 * daemon waits (the mark), from is released as by the release script
	 * instead. {1, first fence, observed} | {2} (released: yielded) | {0}
	 * (from's lease had ended, or was broken: then it is released) */
	LUA_FENCE
	LUA_STRING
	LUA_RECORD
	LUA_WHO
	"if v == ARGV[2] .. '!' then "
	"  redis.call('DEL', KEYS[1], KEYS[5]) "
	"  redis.call('PUBLISH', ARGV[6], ARGV[7]) "
	"  return {0} end "
	"if v ~= ARGV[2] then return {0} end "
	"if tonumber(ARGV[4]) >= tonumber(ARGV[5]) and "
	"    redis.call('DEL', KEYS[3]) == 1 then "
	"  redis.call('DEL', KEYS[1], KEYS[5]) "
	"  redis.call('PUBLISH', ARGV[6], ARGV[7]) "
	"  return {2} "
	"end "
	"redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3]) "
	"local f, obs = fence(tonumber(ARGV[8])) "
	"who(KEYS[5], ARGV[1], f, ARGV[9], ARGV[3], true, true) "
	"if not obs and ARGV[10] == nil then return {1, f, 0} end "
	"return {1, f, record(KEYS[4], ARGV[1], f, obs, ARGV[10], ARGV[6], ARGV[7])}",

	/* confirm (a renewal confirmed by a quorum that held the lease all
	 * along): KEYS lock; ARGV member. A lease given back by the renew
	 * script (member .. '~') becomes member again, its end kept. 1 | 0 */
	LUA_STRING
	"local m = ARGV[1] .. '~' "
	"if v == m then redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL') return 1 end "
	"if type(v) == 'string' or not v then return 0 end "
	"local s = redis.call('ZSCORE', KEYS[1], m) "
	"if not s then return 0 end "
	"redis.call('ZREM', KEYS[1], m) "
	"redis.call('ZADD', KEYS[1], s, ARGV[1]) "
	"return 1",

	/* raise (a quorum's fence written back): KEYS fence[, election
	 * record]; ARGV fence[, member, term]. The counter becomes at least
	 * fence (its observed mark kept). With a record (redlock, a grant that
	 * is recorded): when it is member's, its term becomes term, the
	 * quorum's fence, and so does that of its last leader in the history
	 * when that was this grant (the node's own proposal). 1 */
	LUA_COUNTER
	"local s = redis.call('GET', KEYS[1]) "
	"local c = counter(s, 0) "
	"if c < tonumber(ARGV[1]) then "
	"  redis.call('SET', KEYS[1], ARGV[1] .. (string.match(s or '', ' %d+$') or '')) end "
	"if KEYS[2] and redis.call('HGET', KEYS[2], 'm') == ARGV[2] then "
	"  local e = redis.call('HMGET', KEYS[2], 't', 'h') "
	"  if e[1] ~= ARGV[3] then "
	"    if e[2] then "
	"      local h = cmsgpack.unpack(e[2]) "
	"      if #h > 0 and h[#h][2] == e[1] then "
	"        h[#h][2] = ARGV[3] "
	"        redis.call('HSET', KEYS[2], 'h', cmsgpack.pack(h)) end "
	"    end "
	"    redis.call('HSET', KEYS[2], 't', ARGV[3]) "
	"  end "
	"end "
	"return 1",

	/* proclaim: KEYS lock, election record, fence; ARGV member, value,
	 * channel, key. The value of member's exclusive lease (a CAMPAIGN's,
	 * recorded at its grant) becomes value, published when the key is
	 * observed. 1 | 0 (not ours, or granted with no record) */
	LUA_STRING
	LUA_COUNTER
	LUA_NOW
	"if v ~= ARGV[1] and v ~= ARGV[1] .. '~' then return 0 end "
	"if redis.call('HGET', KEYS[2], 'm') ~= ARGV[1] then return 0 end "
	"redis.call('HSET', KEYS[2], 'v', ARGV[2]) "
	"redis.call('HINCRBY', KEYS[2], 'p', 1) "
	"local c, o = counter(redis.call('GET', KEYS[3]), now) "
	"if o then redis.call('PUBLISH', ARGV[3], ARGV[4]) end "
	"return 1",

	/* look: KEYS lock, fence, election record, observed mark; ARGV mark ms
	 * (0: none), wanted channel, key. Who holds the key: {version, term,
	 * kind or '', holders, value or false, ms until the first lease ends
	 * (-1: none), the history: {{version, term, value or false}, ...} of
	 * the last exclusive grants recorded while observed, oldest first,
	 * the exclusive lease's member or '', the PROCLAIMs of its record or -1
	 * when the record is not the member's}. The term is the recorded
	 * fence of the exclusive holder (or of the last observed grant of
	 * shared leases), else the counter (no fence given so far is above
	 * it). The version grows whenever a
	 * look finds the state changed since the last look (TIME in us, or one
	 * more), so every daemon reads the same version for the same state.
	 * With a mark time, the key is marked observed for that long (in its
	 * fence counter, for grants, and the observers' mark, for the next
	 * release); marked anew, the key is published on the wanted channel (a
	 * daemon that keeps its lease cached gives it back, and its next grant
	 * is told) */
	LUA_STRING
	LUA_COUNTER
	LUA_NOW
	"local kind, holders, member, pttl = '', 0, '', -1 "
	"if type(v) == 'string' then "
	"  kind, holders, pttl = 'x0', 1, redis.call('PTTL', KEYS[1]) "
	"  member = string.gsub(v, '[~!]$', '') "
	"elseif v then "
	"  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) "
	"  holders = redis.call('ZCARD', KEYS[1]) "
	"  if holders > 0 then "
	"    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES') "
	"    kind = string.sub(first[1], 1, string.find(first[1], ':', 1, true) - 1) "
	"    pttl = tonumber(first[2]) - now end "
	"end "
	"local e = redis.call('HMGET', KEYS[3], 'm', 't', 'v', 'n', 's', 'p', 'h') "
	"local term, value = 0, false "
	"if holders > 0 and (kind ~= 'x0' or e[1] == member) and e[2] then "
	"  term = tonumber(e[2]) "
	"  if kind == 'x0' then value = e[3] end "
	"end "
	"local c, o = counter(redis.call('GET', KEYS[2]), now) "
	"if term == 0 and holders > 0 then term = c end "
	"local s = kind .. ' ' .. holders .. ' ' .. string.format('%.0f', term) .. ' ' .. "
	"  member .. ' ' .. (e[6] or '0') "
	"local n = tonumber(e[4] or '0') "
	"if s ~= e[5] then "
	"  local us = tonumber(redis.call('TIME')[1]) * 1000000 "
	"  n = math.max(n + 1, us) "
	"  redis.call('HSET', KEYS[3], 'n', string.format('%.0f', n), 's', s) end "
	"if ARGV[1] ~= '0' then "
	"  redis.call('SET', KEYS[2], string.format('%.0f %.0f', c, now + tonumber(ARGV[1]))) "
	"  redis.call('SET', KEYS[4], '1', 'PX', ARGV[1]) "
	"  if not o then redis.call('PUBLISH', ARGV[2], ARGV[3]) end "
	"end "
	"local hist = {} "
	"if e[7] then for i, x in ipairs(cmsgpack.unpack(e[7])) do "
	"  hist[i] = {tonumber(x[1]), tonumber(x[2]), x[3]} end end "
	"local p = (kind == 'x0' and e[1] == member) and tonumber(e[6] or '0') or -1 "
	"return {n, term, kind, holders, value, pttl, hist, member, p}",

	/* holders: KEYS lock, holders; ARGV unused. Every lease of the key
	 * with what the holders' key says of it (who): {member, ms left, its
	 * description (fence, a tab, who) or false, ...}; a lease given back
	 * but not confirmed, or broken, is named as its member */
	LUA_STRING
	"local out = {} "
	"local function add(m, ms, d) "
	"  out[#out + 1] = m out[#out + 1] = ms out[#out + 1] = d end "
	"if type(v) == 'string' then "
	"  local m = (string.gsub(v, '[~!]$', '')) "
	"  local s = redis.pcall('GET', KEYS[2]) "
	"  local d = type(s) == 'string' and string.sub(s, 1, #m + 1) == m .. '\\t' and "
	"    string.sub(s, #m + 2) "
	"  add(m, redis.call('PTTL', KEYS[1]), d) "
	"elseif v then "
	LUA_NOW
	"  local z = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES') "
	"  for i = 1, #z, 2 do local s = tonumber(z[i + 1]) "
	"    if s > now then "
	"      local m = (string.gsub(z[i], '[~!]$', '')) "
	"      local d = redis.pcall('HGET', KEYS[2], m) "
	"      add(m, s - now, type(d) == 'string' and d) end end "
	"end "
	"return out",

	/* force (UNLOCK FORCE through any daemon): KEYS lock, broken,
	 * holders; ARGV unused, channel, wanted channel, key, who breaks it,
	 * the instance id of the daemon that calls it. Every lease of the key is
	 * broken (member .. '!', a lease given back but not confirmed too, its
	 * end kept), but those the holders' key says the calling daemon took
	 * (its lock table broke its own holders, and may have granted the
	 * lease again since). A broken lease blocks others as the lease did
	 * until its holder's daemon, woken by the message on both channels
	 * (the holder's renewal, a cached lease's give-back), has told its
	 * holder and released it, or until it ends. Who broke it is kept in
	 * broken for as long as the longest lease, for the renewal's answer.
	 * The leases broken now */
	LUA_STRING
	"local n, last = 0, 0 "
	"local mine = '\tw1\t' .. ARGV[6] .. '\t' "
	"local function ours(d) "
	"  return type(d) == 'string' and string.find(d, mine, 1, true) ~= nil end "
	"if type(v) == 'string' then "
	"  local m = (string.gsub(v, '~$', '')) "
	"  local d = redis.pcall('GET', KEYS[3]) "
	"  if string.sub(v, -1) ~= '!' and not (ours(d) and "
	"      string.sub(d, 1, #m + 1) == m .. '\t') then "
	"    redis.call('SET', KEYS[1], m .. '!', 'KEEPTTL') "
	"    n = 1 last = redis.call('PTTL', KEYS[1]) end "
	"elseif v then "
	LUA_NOW
	"  local z = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES') "
	"  for i = 1, #z, 2 do local s = tonumber(z[i + 1]) "
	"    local m = (string.gsub(z[i], '~$', '')) "
	"    if s > now and string.sub(z[i], -1) ~= '!' and "
	"        not ours(redis.pcall('HGET', KEYS[3], m)) then "
	"      redis.call('ZREM', KEYS[1], z[i]) "
	"      redis.call('ZADD', KEYS[1], s, m .. '!') "
	"      n = n + 1 "
	"      if s - now > last then last = s - now end end end "
	"end "
	"if n > 0 then "
	"  if last > 0 then redis.call('SET', KEYS[2], ARGV[5], 'PX', last) end "
	"  redis.call('PUBLISH', ARGV[2], ARGV[4]) "
	"  redis.call('PUBLISH', ARGV[3], ARGV[4]) end "
	"return n",
};

const char rscript_key[] = "<key>";
const char rscript_value[] = "<value>";

const char *const *
rscript_text_cluster(void)
{
	/* the same scripts, publishing on shard channels (SPUBLISH, whose
	 * channel is in the slot of the script's keys) */
	static const char *texts[RS_COUNT];
	if (texts[0] != NULL)
		return texts;
	for (size_t i = 0; i < RS_COUNT; i++) {
		const char *from = rscript_text[i], *at;
		size_t n = 0, len = strlen(from);
		for (at = from; (at = strstr(at, "'PUBLISH'")) != NULL; at++)
			n++;
		char *t = xmalloc(len + n + 1), *q = t;
		while ((at = strstr(from, "'PUBLISH'")) != NULL) {
			memcpy(q, from, (size_t)(at - from));
			q += at - from;
			memcpy(q, "'SPUBLISH'", 10);
			q += 10;
			from = at + 9;
		}
		memcpy(q, from, strlen(from) + 1);
		texts[i] = t;
	}
	return texts;
}

int
rscript_kind(const struct be_lock *l, char *out, size_t outlen)
{
	switch (l->mode) {
	case LOCK_EXCLUSIVE: return snprintf(out, outlen, "x0");
	case LOCK_SHARED: return snprintf(out, outlen, "s0");
	case LOCK_SEMAPHORE: return snprintf(out, outlen, "n%u", l->limit);
	}
	return snprintf(out, outlen, "?");
}

void
rscript_member(const struct be_lock *l, char out[RSCRIPT_MEMBER_MAX])
{
	char kind[16];
	rscript_kind(l, kind, sizeof(kind));
	snprintf(out, RSCRIPT_MEMBER_MAX, "%s:%s", kind, l->token);
}

size_t
rscript_size(size_t prefixlen, size_t keylen, bool tagged, const char *keykinds,
    const char *const *args, size_t valuelen)
{
	size_t name = tagged ? RCLUSTER_ESCAPED_MAX(keylen) + 2 : keylen;
	size_t need = strlen(keykinds) * (prefixlen + 2 + name + 1);
	for (size_t i = 0; args[i] != NULL; i++)
		if (args[i] == rscript_value)
			need += valuelen + 1;
		else if (args[i] != rscript_key)
			need += strlen(args[i]) + 1;
	return need;
}

const char *
rscript_build(struct rscript_args *a, char *buf, const char *prefix, const char *key,
    size_t keylen, bool tagged, const char *keykinds, const char *const *args,
    const char *value, size_t valuelen)
{
	static const char *const numkeys[] = { "0", "1", "2", "3", "4", "5" };
	size_t plen = strlen(prefix), nkeys = strlen(keykinds), nargs = 0;
	const char *first = NULL;
	char *p = buf;
	while (args[nargs] != NULL)
		nargs++;
	assert(nkeys < 6 && 1 + nkeys + nargs <= RSCRIPT_ARGS);
	a->argc = 0;
	a->argv[a->argc] = numkeys[nkeys];
	a->argvlen[a->argc++] = 1;
	for (size_t i = 0; i < nkeys; i++) {
		a->argv[a->argc] = p;
		memcpy(p, prefix, plen);
		p[plen] = keykinds[i];
		p[plen + 1] = ':';
		if (tagged) {
			/* "{" the key escaped "}": one hash tag for all its keys */
			size_t n = rcluster_escape(p + plen + 3, key, keylen);
			p[plen + 2] = '{';
			p[plen + 3 + n] = '}';
			a->argvlen[a->argc++] = plen + 4 + n;
			p += plen + 4 + n + 1;
			continue;
		}
		memcpy(p + plen + 2, key, keylen);
		a->argvlen[a->argc++] = plen + 2 + keylen;
		p += plen + 2 + keylen + 1;
	}
	for (size_t i = 0; i < nargs; i++) {
		if (args[i] == rscript_key) {
			a->argv[a->argc] = key;
			a->argvlen[a->argc++] = keylen;
			continue;
		}
		if (args[i] == rscript_value) {
			/* binary-safe: copied with its length */
			if (valuelen > 0)
				memcpy(p, value, valuelen);
			p[valuelen] = '\0';
			a->argv[a->argc] = p;
			a->argvlen[a->argc++] = valuelen;
			p += valuelen + 1;
			continue;
		}
		size_t n = strlen(args[i]);
		memcpy(p, args[i], n + 1);
		if (i == 0)
			first = p;
		a->argv[a->argc] = p;
		a->argvlen[a->argc++] = n;
		p += n + 1;
	}
	return first;
}
