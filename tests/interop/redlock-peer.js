// A node-redlock (v4) peer for tests/integration/interop.rs: the lock on `resource` over the
// masters on 127.0.0.1 at `ports`, taken the way node-redlock takes it (its own scripts, the
// resource name as the key).
//
//   node redlock-peer.js <port,port,...> <resource> hold   take it, say "acquired <value>",
//                                                          release on a line of stdin, say "released"
//   node redlock-peer.js <port,port,...> <resource> try    take it once and release it at once
//                                                          ("acquired …" then "released"), or say "busy"
'use strict';
const Redis = require('ioredis');
const Redlock = require('redlock');

const [ports, resource, mode] = process.argv.slice(2);
const clients = ports
  .split(',')
  .map((port) => new Redis({ host: '127.0.0.1', port: Number(port), maxRetriesPerRequest: 1 }));
const redlock = new Redlock(clients, { retryCount: 0, driftFactor: 0.01 });
redlock.on('clientError', () => {});

(async () => {
  try {
    const lock = await redlock.lock(resource, 10000);
    console.log(`acquired ${lock.value}`);
    if (mode === 'hold') {
      // A line, or the end of stdin (the test went away): release either way.
      await new Promise((resolve) => {
        process.stdin.once('data', resolve);
        process.stdin.once('end', resolve);
      });
    }
    await lock.unlock();
    console.log('released');
  } catch (err) {
    if (err && err.name === 'LockError') {
      console.log('busy');
    } else {
      console.log(`error ${err}`);
      process.exitCode = 2;
    }
  } finally {
    clients.forEach((client) => client.disconnect());
  }
})();
