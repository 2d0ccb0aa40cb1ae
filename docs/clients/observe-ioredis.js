// Watch who leads a dlockd key from Node with ioredis: node observe-ioredis.js KEY COUNT
const Redis = require('ioredis');

async function main(key, count) {
  // A connection of its own: while OBSERVE waits, the commands behind it
  // wait. No commandTimeout shorter than the WAIT, no reconnect or resend.
  const conn = new Redis({
    port: Number(process.env.DLOCK_PORT || 7480),
    lazyConnect: true,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
  });
  conn.on('error', () => {});   // the failed command reports it
  try {
    await conn.connect();
    let state = await conn.call('OBSERVE', key);   // who leads now
    let rev;
    for (let line = 0; line < count; line++) {
      while (state === null) {
        // the first change after rev, or null when 10 s passed without one
        state = await conn.call('OBSERVE', key, 'AFTER', rev, 'WAIT', 10000);
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
    conn.disconnect();
  }
}

main(process.argv[2], Number(process.argv[3])).then((status) => process.exit(status));
