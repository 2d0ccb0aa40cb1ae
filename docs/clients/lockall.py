# Hold two dlockd locks at once from Python with redis-py: python3 lockall.py KEY1 KEY2 STEPS
import os
import sys
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

keys, steps = sys.argv[1:3], int(sys.argv[3])
try:
    # One connection is one session: no pool, no read timeout (a LOCKALL with
    # WAIT is answered up to that long later), no retry on another connection.
    conn = redis.Redis(port=int(os.environ.get("DLOCK_PORT", 7480)),
                       single_connection_client=True, socket_timeout=None,
                       retry_on_timeout=False, retry=Retry(NoBackoff(), 0))
    # both keys or neither: dlockd takes them in an order of its own, so
    # another LOCKALL naming them the other way round cannot deadlock with us
    reply = conn.execute_command("LOCKALL", len(keys), *keys, "TTL", 10000, "WAIT", 5000)
except redis.exceptions.RedisError as e:
    # an error reply (-BACKEND: the backend is down; -ERR: a key named twice),
    # or no connection
    print("error: %s" % e)
    sys.exit(1)
if reply is None:
    print("not granted")    # nothing of the set is held
    sys.exit(75)
fences = [fence for token, fence, validity_ms in reply]   # in the order of keys
print("got %s" % ", ".join("%s fence %d" % kf for kf in zip(keys, fences)), flush=True)
try:
    for step in range(steps):
        conn.execute_command("PING")    # -LOST key fence reason once either lock is lost
        time.sleep(0.5)                 # one step's work: each key's resource gets its fence
    conn.execute_command("UNLOCKALL", len(keys), *keys)
    print("done")
except (redis.exceptions.ResponseError, redis.exceptions.ConnectionError) as e:
    # -LOST names the key lost (the other stays held until UNLOCKALL or the
    # end of the session), or the connection failed: stop, do not go on.
    print("lost: %s" % e)
    sys.exit(3)
finally:
    conn.connection_pool.disconnect()   # ends the session, releasing what it still holds
