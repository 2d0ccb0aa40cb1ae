// Hold two dlockd locks at once from Java with Jedis: java LockAll KEY1 KEY2 STEPS
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.exceptions.JedisException;
import redis.clients.jedis.util.SafeEncoder;

public class LockAll {
    // dlockd's commands, sent with Jedis's generic sendCommand
    enum Cmd implements ProtocolCommand {
        LOCKALL, UNLOCKALL, PING;

        public byte[] getRaw() {
            return SafeEncoder.encode(name());
        }
    }

    public static void main(String[] args) throws InterruptedException {
        List<String> keys = Arrays.asList(args[0], args[1]);
        int steps = Integer.parseInt(args[2]);
        int port = Integer.parseInt(System.getenv().getOrDefault("DLOCK_PORT", "7480"));
        // LOCKALL numkeys key... TTL WAIT, and UNLOCKALL numkeys key...
        List<String> lockall = new ArrayList<>();
        lockall.add(String.valueOf(keys.size()));
        lockall.addAll(keys);
        List<String> unlockall = new ArrayList<>(lockall);
        lockall.addAll(Arrays.asList("TTL", "10000", "WAIT", "5000"));
        // One connection is one session: a plain Jedis (no pool) and no socket
        // timeout (0: a LOCKALL with WAIT is answered up to that long later).
        DefaultJedisClientConfig config = DefaultJedisClientConfig.builder()
            .socketTimeoutMillis(0).build();
        try (Jedis conn = new Jedis(new HostAndPort("localhost", port), config)) {
            // both keys or neither, in an order of dlockd's own: no deadlock
            Object reply = conn.sendCommand(Cmd.LOCKALL, lockall.toArray(new String[0]));
            if (reply == null) {
                System.out.println("not granted");  // nothing of the set is held
                System.exit(75);
            }
            List<?> grants = (List<?>) reply;       // in the order of keys
            long[] fences = new long[keys.size()];
            StringBuilder got = new StringBuilder("got ");
            for (int i = 0; i < fences.length; i++) {
                fences[i] = (Long) ((List<?>) grants.get(i)).get(1);
                got.append(i > 0 ? ", " : "").append(keys.get(i)).append(" fence ").append(fences[i]);
            }
            System.out.println(got);
            try {
                for (int step = 0; step < steps; step++) {
                    conn.sendCommand(Cmd.PING);  // -LOST key fence reason once either lock is lost
                    Thread.sleep(500);           // one step's work: each resource gets its fence
                }
                conn.sendCommand(Cmd.UNLOCKALL, unlockall.toArray(new String[0]));
                System.out.println("done");
            } catch (JedisDataException | JedisConnectionException e) {
                // -LOST names the key lost, or the connection failed: stop
                System.out.println("lost: " + e.getMessage());
                System.exit(3);
            }
        } catch (JedisException e) {
            // an error reply to LOCKALL (-BACKEND: the backend is down; -ERR: a
            // key named twice), or no connection
            System.out.println("error: " + e.getMessage());
            System.exit(1);
        }
    }
}
