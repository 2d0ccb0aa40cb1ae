# Lead a dlockd election from Python with redis-py: python3 elect.py KEY VALUE STEPS
import os
import sys
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

key, value, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    # One connection is one session, and the session is the candidacy: no
    # pool, no read timeout (CAMPAIGN without WAIT is answered when elected),
    # no retry on another connection.
    conn = redis.Redis(port=int(os.environ.get("DLOCK_PORT", 7480)),
                       single_connection_client=True, socket_timeout=None,
                       retry_on_timeout=False, retry=Retry(NoBackoff(), 0))
    token, term, validity_ms = conn.execute_command("CAMPAIGN", key, value, "TTL", 30000)
except redis.exceptions.RedisError as e:
    # an error reply (-BACKEND, -ERR), or the connection failed or closed
    print("error: %s" % e)
    sys.exit(1)
print("leader %s term %d" % (key, term), flush=True)
try:
    for step in range(steps):
        conn.execute_command("PING")    # -LOST key term reason once the term is lost
        time.sleep(1)                   # the work of one step, fenced with term
    conn.execute_command("RESIGN", key)
    print("done")
except (redis.exceptions.ResponseError, redis.exceptions.ConnectionError) as e:
    # -LOST, or the connection failed: the term is over, and another
    # candidate may lead already. Step down: no more work with this term.
    print("lost %s: %s" % (key, e))
    sys.exit(3)
finally:
    conn.connection_pool.disconnect()   # ends the session (close() would keep it open)
