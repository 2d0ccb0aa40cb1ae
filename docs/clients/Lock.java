// Hold a dlockd lock from Java with Jedis: java Lock KEY STEPS
import java.util.List;

import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.exceptions.JedisException;
import redis.clients.jedis.util.SafeEncoder;

public class Lock {
    // dlockd's commands, sent with Jedis's generic sendCommand
    enum Cmd implements ProtocolCommand {
        LOCK, UNLOCK, PING;

        public byte[] getRaw() {
            return SafeEncoder.encode(name());
        }
    }

    public static void main(String[] args) throws InterruptedException {
        String key = args[0];
        int steps = Integer.parseInt(args[1]);
        int port = Integer.parseInt(System.getenv().getOrDefault("DLOCK_PORT", "7480"));
        // One connection is one session: a plain Jedis (no pool) and no
        // socket timeout (0: a LOCK with WAIT is answered up to that long later).
        DefaultJedisClientConfig config = DefaultJedisClientConfig.builder()
            .socketTimeoutMillis(0).build();
        try (Jedis conn = new Jedis(new HostAndPort("localhost", port), config)) {
            Object reply = conn.sendCommand(Cmd.LOCK, key, "TTL", "10000", "WAIT", "5000");
            if (reply == null) {
                System.out.println("not granted");
                System.exit(75);
            }
            long fence = (Long) ((List<?>) reply).get(1);
            System.out.println("got " + key + " fence " + fence);
            try {
                for (int step = 0; step < steps; step++) {
                    conn.sendCommand(Cmd.PING);  // -LOST key fence reason once the lock is lost
                    Thread.sleep(500);           // one step's work, fenced with fence
                }
                conn.sendCommand(Cmd.UNLOCK, key);
                System.out.println("done");
            } catch (JedisDataException | JedisConnectionException e) {
                // -LOST, or the connection failed: every lock of the session is gone
                System.out.println("lost " + key + ": " + e.getMessage());
                System.exit(3);
            }
        } catch (JedisException e) {
            // an error reply to LOCK (-BACKEND: the backend is down; -ERR: a bad
            // argument), or no connection
            System.out.println("error: " + e.getMessage());
            System.exit(1);
        }
    }
}
