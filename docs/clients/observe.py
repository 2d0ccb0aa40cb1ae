# Watch who leads a dlockd key from Python with redis-py: python3 observe.py KEY COUNT
import os
import sys

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

key, count = sys.argv[1], int(sys.argv[2])
try:
    # A connection of its own: while OBSERVE waits, the commands behind it
    # wait. No read timeout shorter than the WAIT, no retry.
    conn = redis.Redis(port=int(os.environ.get("DLOCK_PORT", 7480)),
                       single_connection_client=True, socket_timeout=None,
                       retry_on_timeout=False, retry=Retry(NoBackoff(), 0))
    state = conn.execute_command("OBSERVE", key)    # who leads now
    for line in range(count):
        while state is None:
            # the first change after rev, or None when 10 s passed without one
            state = conn.execute_command("OBSERVE", key, "AFTER", rev, "WAIT", 10000)
        value, term, rev, kind, holders = state
        if value is None:
            print("no leader rev %d" % rev, flush=True)
        else:
            print("leader %s term %d rev %d" % (value.decode(), term, rev), flush=True)
        state = None
except redis.exceptions.RedisError as e:
    # an error reply, or the connection failed or closed
    print("error: %s" % e)
    sys.exit(1)
