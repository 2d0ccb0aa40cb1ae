// Watch who leads a dlockd key from Node with node-redis: node observe-node-redis.js KEY COUNT
const { createClient } = require('redis');

async function main(key, count) {
  // A connection of its own: while OBSERVE waits, the commands behind it
  // wait. No command timeout shorter than the WAIT, no reconnect.
  const conn = createClient({
    socket: { port: Number(process.env.DLOCK_PORT || 7480), reconnectStrategy: false },
    disableOfflineQueue: true,
  });
  conn.on('error', () => {});   // the failed command reports it
  try {
    await conn.connect();
    let state = await conn.sendCommand(['OBSERVE', key]);   // who leads now
    let rev;
    for (let line = 0; line < count; line++) {
      while (state === null) {
        // the first change after rev, or null when 10 s passed without one
        state = await conn.sendCommand(
          ['OBSERVE', key, 'AFTER', String(rev), 'WAIT', '10000']);
      }
      let value, term;
      [value, term, rev] = state;
      console.log(value === null ? `no leader rev ${rev}`
                                 : `leader ${value} term ${term} rev ${rev}`);
      state = null;
    }
    return 0;
  } catch (e) {
    // an error reply, or the connection failed or closed
    console.log(`error: ${e.message}`);
    return 1;
  } finally {
    if (conn.isOpen) conn.destroy();
  }
}

main(process.argv[2], Number(process.argv[3])).then((status) => process.exit(status));
