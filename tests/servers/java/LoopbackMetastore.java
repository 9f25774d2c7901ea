import java.net.InetSocketAddress;

import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.TSetIpAddressProcessor;
import org.apache.hadoop.hive.metastore.api.ThriftHiveMetastore;
import org.apache.hadoop.hive.metastore.txn.TxnDbUtil;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TServer;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TServerSocket;
import org.apache.thrift.transport.TTransportFactory;

/**
 * Serves the stock Hive 2.3 metastore handler on 127.0.0.1 only.
 *
 * <p>Why this exists: {@code HiveMetaStore -p PORT} always binds the wildcard address, and the
 * Derby schema that DataNucleus auto-creates lacks the transaction and lock tables (TXNS,
 * HIVE_LOCKS, NEXT_LOCK_ID) that Iceberg's HiveCatalog needs for every commit. This launcher
 * creates those tables once with {@link TxnDbUtil#prepDb}, then serves the unmodified handler
 * through a plain binary-protocol thread-pool server on a loopback socket.
 *
 * <p>Usage: {@code java -cp CONF_DIR:CLASSES:SPARK_JARS/* LoopbackMetastore PORT}, where
 * CONF_DIR holds the hive-site.xml to use.
 */
public final class LoopbackMetastore {
  private LoopbackMetastore() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      System.err.println("usage: LoopbackMetastore PORT");
      System.exit(2);
    }
    int port = Integer.parseInt(args[0]);
    HiveConf conf = new HiveConf();

    // Creates the Derby database (create=true) plus the transaction/lock tables; a second call on
    // an existing database only reports that they already exist.
    TxnDbUtil.prepDb(conf);

    ThriftHiveMetastore.Iface handler =
        HiveMetaStore.newRetryingHMSHandler("loopback-metastore", conf, false);
    TServerSocket socket = new TServerSocket(new InetSocketAddress("127.0.0.1", port));
    TThreadPoolServer.Args serverArgs =
        new TThreadPoolServer.Args(socket)
            .processor(new TSetIpAddressProcessor<>(handler))
            .transportFactory(new TTransportFactory())
            .protocolFactory(new TBinaryProtocol.Factory())
            .minWorkerThreads(2)
            .maxWorkerThreads(64);
    TServer server = new TThreadPoolServer(serverArgs);
    Runtime.getRuntime().addShutdownHook(new Thread(server::stop, "metastore-shutdown"));
    System.out.println("LoopbackMetastore serving on 127.0.0.1:" + port);
    System.out.flush();
    server.serve();
  }
}
