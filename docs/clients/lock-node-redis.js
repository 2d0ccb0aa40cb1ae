// Hold a dlockd lock from Node with node-redis: node lock-node-redis.js KEY STEPS
const { createClient } = require('redis');

async function main(key, steps) {
  // One connection is one session: never reconnect, no offline queue, and
  // no command timeout (a LOCK with WAIT is answered up to that long later).
  const conn = createClient({
    socket: { port: Number(process.env.DLOCK_PORT || 7480), reconnectStrategy: false },
    disableOfflineQueue: true,
  });
  conn.on('error', () => {});   // the failed command reports it
  let reply;
  try {
    await conn.connect();
    reply = await conn.sendCommand(['LOCK', key, 'TTL', '10000', 'WAIT', '5000']);
  } catch (e) {
    // an error reply (-BACKEND: the backend is down; -ERR: a bad argument),
    // or no connection
    console.log(`error: ${e.message}`);
    if (conn.isOpen) conn.destroy();
    return 1;
  }
  if (reply === null) {
    console.log('not granted');
    conn.destroy();
    return 75;
  }
  const [token, fence] = reply;
  console.log(`got ${key} fence ${fence}`);
  try {
    for (let step = 0; step < steps; step++) {
      await conn.sendCommand(['PING']);  // -LOST key fence reason once the lock is lost
      await new Promise((done) => setTimeout(done, 500)); // one step's work, fenced
    }
    await conn.sendCommand(['UNLOCK', key]);
    console.log('done');
    return 0;
  } catch (e) {
    // -LOST, or the connection closed: every lock of the session is gone.
    console.log(`lost ${key}: ${e.message}`);
    return 3;
  } finally {
    if (conn.isOpen) conn.destroy();
  }
}

main(process.argv[2], Number(process.argv[3])).then((status) => process.exit(status));
