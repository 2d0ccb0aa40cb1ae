"""The fenced resource of the safety test: a counter per key in a redis-server
of its own, read and written by Lua scripts that compare fences.

Each key has, in the resource's Redis:
  ctr:<key>   the counter
  max:<key>   the highest fence seen (by a read or a write)
  log:<key>   every accepted write, "fence value tag", in order
  rej:<key>   a hash: stale reads and stale writes rejected

read(key, fence) and write(key, fence, value) are rejected with an error
"STALE ..." when fence is below the highest fence seen for key; otherwise the
fence becomes the highest seen, read answers the counter and write sets it to
value. A holder reads with its fence, so a later holder's read already shuts
out an earlier holder's write: with fences that increase with every grant,
every accepted write is based on the value the previous accepted write left,
and the final counter equals the number of accepted writes.

Fences are about 1.8e15 (microseconds of the wall clock): Lua numbers are
doubles, exact up to 2^53 (9.0e15), so tonumber() compares them exactly; the
highest fence is stored as the string it came as.
"""

_CHECK = (
    "local f = tonumber(ARGV[1]) "
    "local m = tonumber(redis.call('GET', KEYS[2]) or '0') "
    "if f == nil then return redis.error_reply('ERR fence is not a number') end "
    "if f < m then "
    "  redis.call('HINCRBY', KEYS[3], ARGV[#ARGV], 1) "
    "  return redis.error_reply('STALE fence ' .. ARGV[1] .. ' is below ' .. "
    "      string.format('%.0f', m)) "
    "end "
    "if f > m then redis.call('SET', KEYS[2], ARGV[1]) end "
)

# KEYS ctr, max, rej; ARGV fence, 'read'
READ = _CHECK + "return tonumber(redis.call('GET', KEYS[1]) or '0')"

# KEYS ctr, max, rej, log; ARGV fence, value, tag, 'write'
WRITE = (_CHECK + "redis.call('SET', KEYS[1], ARGV[2]) "
         "redis.call('RPUSH', KEYS[4], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3]) "
         "return 1")


def read_args(key, fence):
    """The EVAL arguments of a fenced read."""
    return ("EVAL", READ, 3, "ctr:" + key, "max:" + key, "rej:" + key, str(fence), "read")


def write_args(key, fence, value, tag):
    """The EVAL arguments of a fenced write."""
    return ("EVAL", WRITE, 4, "ctr:" + key, "max:" + key, "rej:" + key, "log:" + key,
            str(fence), str(value), tag, "write")


def state(conn, key):
    """What the resource holds for key, read through a Raw connection (dlocktest.resp):
    {"counter", "max_fence", "writes": [(fence, value, tag)], "stale_reads",
    "stale_writes"}."""
    def dec(v):
        return v.decode() if isinstance(v, bytes) else v
    ctr = conn.cmd("GET", "ctr:" + key)
    mx = conn.cmd("GET", "max:" + key)
    log = conn.cmd("LRANGE", "log:" + key, 0, -1)
    rej = conn.cmd("HGETALL", "rej:" + key)
    writes = []
    for entry in log:
        f, v, tag = dec(entry).split(" ", 2)
        writes.append((int(f), int(v), tag))
    rej = {dec(rej[i]): int(rej[i + 1]) for i in range(0, len(rej), 2)} if rej else {}
    return {
        "counter": int(ctr) if isinstance(ctr, bytes) else 0,
        "max_fence": int(mx) if isinstance(mx, bytes) else 0,
        "writes": writes,
        "stale_reads": rej.get("read", 0),
        "stale_writes": rej.get("write", 0),
    }
