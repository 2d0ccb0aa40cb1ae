// Lead a dlockd election from Node with ioredis: node elect-ioredis.js KEY VALUE STEPS
const Redis = require('ioredis');

async function main(key, value, steps) {
  // One connection is one session, and the session is the candidacy: never
  // reconnect or resend behind our back, and no commandTimeout (CAMPAIGN
  // without WAIT is answered when elected).
  const conn = new Redis({
    port: Number(process.env.DLOCK_PORT || 7480),
    lazyConnect: true,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
  });
  conn.on('error', () => {});   // the failed command reports it
  let term;
  try {
    await conn.connect();
    [, term] = await conn.call('CAMPAIGN', key, value, 'TTL', 30000);
  } catch (e) {
    // an error reply (-BACKEND, -ERR), or the connection failed or closed
    console.log(`error: ${e.message}`);
    conn.disconnect();
    return 1;
  }
  console.log(`leader ${key} term ${term}`);
  try {
    for (let step = 0; step < steps; step++) {
      await conn.call('PING');  // -LOST key term reason once the term is lost
      await new Promise((done) => setTimeout(done, 1000)); // one step's work, fenced
    }
    await conn.call('RESIGN', key);
    console.log('done');
    return 0;
  } catch (e) {
    // -LOST, or the connection closed: the term is over, and another
    // candidate may lead already. Step down: no more work with this term.
    console.log(`lost ${key}: ${e.message}`);
    return 3;
  } finally {
    conn.disconnect();
  }
}

main(process.argv[2], process.argv[3], Number(process.argv[4]))
  .then((status) => process.exit(status));
