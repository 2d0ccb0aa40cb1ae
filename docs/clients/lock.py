# Hold a dlockd lock from Python with redis-py: python3 lock.py KEY STEPS
import os
import sys
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

key, steps = sys.argv[1], int(sys.argv[2])
try:
    # One connection is one session: no pool, no read timeout (a LOCK with
    # WAIT is answered up to that long later), no retry on another connection.
    conn = redis.Redis(port=int(os.environ.get("DLOCK_PORT", 7480)),
                       single_connection_client=True, socket_timeout=None,
                       retry_on_timeout=False, retry=Retry(NoBackoff(), 0))
    reply = conn.execute_command("LOCK", key, "TTL", 10000, "WAIT", 5000)
except redis.exceptions.RedisError as e:
    # an error reply (-BACKEND: the backend is down; -ERR: a bad argument),
    # or no connection
    print("error: %s" % e)
    sys.exit(1)
if reply is None:
    print("not granted")
    sys.exit(75)
token, fence, validity_ms = reply
print("got %s fence %d" % (key, fence), flush=True)
try:
    for step in range(steps):
        conn.execute_command("PING")    # -LOST key fence reason once the lock is lost
        time.sleep(0.5)                 # the work of one step, fenced with fence
    conn.execute_command("UNLOCK", key)
    print("done")
except (redis.exceptions.ResponseError, redis.exceptions.ConnectionError) as e:
    # -LOST, or the connection failed: every lock of the session is gone.
    # Do not go on with the same client: it would open a new session.
    print("lost %s: %s" % (key, e))
    sys.exit(3)
finally:
    conn.connection_pool.disconnect()   # ends the session (close() would keep it open)
