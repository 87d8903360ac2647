"""Real Apache Kafka on loopback: KRaft clusters as plain JVM processes, and a TCP proxy to cut
a broker off from its controllers. Used by the real-Kafka tests, `bench/real_faults.py` and the
demo; the jars come from Maven Central through `streaming.plumbing.jars`."""

from streaming.workshop.kraft.cluster import CONTROLLER_ID_BASE, KRaftCluster, new_cluster_id
from streaming.workshop.kraft.node import KafkaNode, NodeFailed
from streaming.workshop.kraft.probing import BackgroundProbe, target_of
from streaming.workshop.kraft.proxy import TcpProxy
from streaming.workshop.kraft.secure_listener import SecureListener
from streaming.workshop.kraft.showcase import RealClusterShowcase

__all__ = ["CONTROLLER_ID_BASE", "BackgroundProbe", "KRaftCluster", "KafkaNode", "NodeFailed", "RealClusterShowcase",
           "SecureListener", "TcpProxy", "new_cluster_id", "target_of"]
