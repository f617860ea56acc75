// The streaming peer of scripts/bench part b: Debezium's embedded engine reading the replica's binlog,
// each change record of the captured table written as a JSON line (its value, without schemas), as
// gtidsnap writes JSON lines. Run with the jars of scripts/debezium/deps.sh on the class path:
//   java -cp '<jars>/*' DebeziumPeer.java <properties file> <output file> <expected records> <stats file>
// With <expected records> = 0 it only starts (recording where the binlog is, snapshot.mode=no_data),
// waits until the connector streams, and stops: a second run then streams exactly what came after.
// The stats file gets one JSON object: seconds from engine start to the first and the last record,
// records, the JVM's CPU seconds, and why the engine stopped if it failed ("failed"). It is written
// before the engine is closed, whose close may hang after a failure (it is given 30 s, then the JVM exits).

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;
import java.io.BufferedWriter;
import java.io.FileReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

public class DebeziumPeer {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileReader reader = new FileReader(args[0], StandardCharsets.UTF_8)) {
            props.load(reader);
        }
        Path output = Path.of(args[1]);
        long expected = Long.parseLong(args[2]);
        Path stats = Path.of(args[3]);
        String topic = props.getProperty("topic.prefix") + "." + props.getProperty("table.include.list");
        CountDownLatch done = new CountDownLatch(1);
        long[] records = {0};
        long[] first = {0};
        long[] last = {0};
        String[] failed = {null};
        long start = System.nanoTime();
        try (BufferedWriter out = Files.newBufferedWriter(output, StandardCharsets.UTF_8)) {
            DebeziumEngine.ChangeConsumer<ChangeEvent<String, String>> consumer = (batch, committer) -> {
                for (ChangeEvent<String, String> event : batch) {
                    if (topic.equals(event.destination()) && event.value() != null) {
                        try {
                            out.write(event.value());
                            out.write('\n');
                        } catch (java.io.IOException e) {
                            throw new RuntimeException(e);
                        }
                        records[0]++;
                        if (first[0] == 0) {
                            first[0] = System.nanoTime();
                        }
                    }
                    committer.markProcessed(event);
                }
                committer.markBatchFinished();
                if (expected > 0 && records[0] >= expected) {
                    last[0] = System.nanoTime();
                    done.countDown();
                }
            };
            DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
                .using(props)
                .notifying(consumer)
                .using((success, message, error) -> {
                    if (!success) {
                        failed[0] = message == null ? "(no message)" : message;
                        System.err.println("debezium stopped: " + message);
                        if (error != null) {
                            error.printStackTrace();
                        }
                    }
                    done.countDown();
                })
                .using(new DebeziumEngine.ConnectorCallback() {
                    @Override
                    public void taskStarted() {
                        if (expected == 0) {
                            done.countDown();  // priming: the connector has recorded its position
                        }
                    }
                })
                .build();
            ExecutorService executor = Executors.newSingleThreadExecutor();
            executor.execute(engine);
            boolean finished = done.await(Long.parseLong(props.getProperty("peer.timeout.s", "1800")), TimeUnit.SECONDS);
            if (expected == 0 && failed[0] == null) {
                Thread.sleep(3000);  // let the first offsets flush
            }
            out.flush();
            double cpu = ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime() / 1e9;
            String why = failed[0] == null ? "null" : "\"" + failed[0].replace("\\", "\\\\").replace("\"", "\\\"")
                .replace("\n", " ") + "\"";
            String json = String.format(
                java.util.Locale.ROOT,
                "{\"records\": %d, \"finished\": %s, \"first_s\": %.3f, \"last_s\": %.3f, \"cpu_s\": %.3f, \"failed\": %s}%n",
                records[0], finished && failed[0] == null, first[0] == 0 ? -1.0 : (first[0] - start) / 1e9,
                last[0] == 0 ? -1.0 : (last[0] - start) / 1e9, cpu, why);
            Files.writeString(stats, json);
            Thread closer = new Thread(() -> {
                try {
                    engine.close();
                } catch (Exception e) {
                    e.printStackTrace();
                }
                executor.shutdown();
            });
            closer.setDaemon(true);
            closer.start();
            closer.join(30_000);
            executor.awaitTermination(30, TimeUnit.SECONDS);
        }
        System.exit(0);
    }
}
