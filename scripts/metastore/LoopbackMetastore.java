import java.net.InetSocketAddress;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.TSetIpAddressProcessor;
import org.apache.hadoop.hive.metastore.api.ThriftHiveMetastore;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TServer;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TServerSocket;
import org.apache.thrift.transport.TTransportFactory;

/**
 * The Hive metastore of pyspark's own jars (Hive 2.3) served on one address only, for the test harness.
 *
 * <p>Why not HiveMetaStore's own main: it binds every interface, and Hive 2.3 has no setting for the
 * address. This serves the same handler (its configuration from the hive-site.xml on the class path)
 * through the same Thrift processor, on the address given. Usage: {@code LoopbackMetastore HOST PORT}.
 */
public final class LoopbackMetastore {
  private LoopbackMetastore() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 2) {
      System.err.println("usage: LoopbackMetastore HOST PORT");
      System.exit(2);
    }
    String host = args[0];
    int port = Integer.parseInt(args[1]);
    HiveConf conf = new HiveConf(HiveMetaStore.HMSHandler.class);
    ThriftHiveMetastore.Iface handler =
        HiveMetaStore.newRetryingHMSHandler("gtidsnap harness metastore", conf, false);
    TServerSocket socket = new TServerSocket(new InetSocketAddress(host, port));
    TThreadPoolServer.Args serving =
        new TThreadPoolServer.Args(socket)
            .processor(new TSetIpAddressProcessor<>(handler))
            .transportFactory(new TTransportFactory())
            .protocolFactory(new TBinaryProtocol.Factory())
            .minWorkerThreads(4)
            .maxWorkerThreads(64);
    TServer server = new TThreadPoolServer(serving);
    System.out.println("metastore: serving on " + host + ":" + port);
    System.out.flush();
    server.serve();
  }
}
