// Lead a dlockd election from Java with Jedis: java Elect KEY VALUE STEPS
import java.util.List;

import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.exceptions.JedisException;
import redis.clients.jedis.util.SafeEncoder;

public class Elect {
    // dlockd's commands, sent with Jedis's generic sendCommand
    enum Cmd implements ProtocolCommand {
        CAMPAIGN, RESIGN, PING;

        public byte[] getRaw() {
            return SafeEncoder.encode(name());
        }
    }

    public static void main(String[] args) throws InterruptedException {
        String key = args[0];
        String value = args[1];
        int steps = Integer.parseInt(args[2]);
        int port = Integer.parseInt(System.getenv().getOrDefault("DLOCK_PORT", "7480"));
        // One connection is one session, and the session is the candidacy: a
        // plain Jedis (no pool) and no socket timeout (0: CAMPAIGN without
        // WAIT is answered when elected).
        DefaultJedisClientConfig config = DefaultJedisClientConfig.builder()
            .socketTimeoutMillis(0).build();
        try (Jedis conn = new Jedis(new HostAndPort("localhost", port), config)) {
            Object reply = conn.sendCommand(Cmd.CAMPAIGN, key, value, "TTL", "30000");
            long term = (Long) ((List<?>) reply).get(1);
            System.out.println("leader " + key + " term " + term);
            try {
                for (int step = 0; step < steps; step++) {
                    conn.sendCommand(Cmd.PING);  // -LOST key term reason once the term is lost
                    Thread.sleep(1000);          // one step's work, fenced with term
                }
                conn.sendCommand(Cmd.RESIGN, key);
                System.out.println("done");
            } catch (JedisDataException | JedisConnectionException e) {
                // -LOST, or the connection failed: the term is over, and another
                // candidate may lead already. Step down: no more work with this term.
                System.out.println("lost " + key + ": " + e.getMessage());
                System.exit(3);
            }
        } catch (JedisException e) {
            // an error reply to CAMPAIGN (-BACKEND, -ERR), or the connection
            // failed or closed
            System.out.println("error: " + e.getMessage());
            System.exit(1);
        }
    }
}
