"""Real Apache Kafka on loopback: KRaft clusters as plain JVM processes, and a TCP proxy to cut
a broker off from its controllers. Used by the real-Kafka tests, `bench/real_faults.py` and the
demo; the jars come from Maven Central through `streaming.jars`."""

from streaming.kraft.cluster import CONTROLLER_ID_BASE, KRaftCluster, new_cluster_id
from streaming.kraft.node import KafkaNode, NodeFailed
from streaming.kraft.probing import BackgroundProbe, target_of
from streaming.kraft.proxy import TcpProxy
from streaming.kraft.secure_listener import SecureListener
from streaming.kraft.showcase import RealClusterShowcase

__all__ = ["CONTROLLER_ID_BASE", "BackgroundProbe", "KRaftCluster", "KafkaNode", "NodeFailed", "RealClusterShowcase",
           "SecureListener", "TcpProxy", "new_cluster_id", "target_of"]
