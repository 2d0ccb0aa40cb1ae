// Hold a dlockd lock from Node with ioredis: node lock-ioredis.js KEY STEPS
const Redis = require('ioredis');

async function main(key, steps) {
  // One connection is one session: never reconnect or resend behind our back,
  // and no commandTimeout (a LOCK with WAIT is answered up to that long later).
  const conn = new Redis({
    port: Number(process.env.DLOCK_PORT || 7480),
    lazyConnect: true,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
  });
  conn.on('error', () => {});   // the failed command reports it
  let reply;
  try {
    await conn.connect();
    reply = await conn.call('LOCK', key, 'TTL', 10000, 'WAIT', 5000);
  } catch (e) {
    // an error reply (-BACKEND: the backend is down; -ERR: a bad argument),
    // or no connection
    console.log(`error: ${e.message}`);
    conn.disconnect();
    return 1;
  }
  if (reply === null) {
    console.log('not granted');
    conn.disconnect();
    return 75;
  }
  const [token, fence] = reply;
  console.log(`got ${key} fence ${fence}`);
  try {
    for (let step = 0; step < steps; step++) {
      await conn.call('PING');  // -LOST key fence reason once the lock is lost
      await new Promise((done) => setTimeout(done, 500)); // one step's work, fenced
    }
    await conn.call('UNLOCK', key);
    console.log('done');
    return 0;
  } catch (e) {
    // -LOST, or the connection closed: every lock of the session is gone.
    console.log(`lost ${key}: ${e.message}`);
    return 3;
  } finally {
    conn.disconnect();
  }
}

main(process.argv[2], Number(process.argv[3])).then((status) => process.exit(status));
