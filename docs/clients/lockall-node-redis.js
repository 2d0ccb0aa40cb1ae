// Hold two dlockd locks at once from Node with node-redis: node lockall-node-redis.js KEY1 KEY2 STEPS
const { createClient } = require('redis');

async function main(keys, steps) {
  // One connection is one session: never reconnect, no offline queue, and
  // no command timeout (a LOCKALL with WAIT is answered up to that long later).
  const conn = createClient({
    socket: { port: Number(process.env.DLOCK_PORT || 7480), reconnectStrategy: false },
    disableOfflineQueue: true,
  });
  conn.on('error', () => {});   // the failed command reports it
  const n = String(keys.length);
  let reply;
  try {
    await conn.connect();
    // both keys or neither, in an order of dlockd's own: no deadlock
    reply = await conn.sendCommand(['LOCKALL', n, ...keys, 'TTL', '10000', 'WAIT', '5000']);
  } catch (e) {
    // an error reply (-BACKEND: the backend is down; -ERR: a key named twice),
    // or no connection
    console.log(`error: ${e.message}`);
    if (conn.isOpen) conn.destroy();
    return 1;
  }
  if (reply === null) {
    console.log('not granted');  // nothing of the set is held
    conn.destroy();
    return 75;
  }
  const fences = reply.map(([token, fence]) => fence);  // in the order of keys
  console.log(`got ${keys.map((key, i) => `${key} fence ${fences[i]}`).join(', ')}`);
  try {
    for (let step = 0; step < steps; step++) {
      await conn.sendCommand(['PING']);  // -LOST key fence reason once either lock is lost
      await new Promise((done) => setTimeout(done, 500)); // each resource gets its fence
    }
    await conn.sendCommand(['UNLOCKALL', n, ...keys]);
    console.log('done');
    return 0;
  } catch (e) {
    // -LOST names the key lost, or the connection closed: stop.
    console.log(`lost: ${e.message}`);
    return 3;
  } finally {
    if (conn.isOpen) conn.destroy();
  }
}

main(process.argv.slice(2, 4), Number(process.argv[4])).then((status) => process.exit(status));
