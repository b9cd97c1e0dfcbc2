"""odradek's pytest plugin (entry point ``pytest11: odradek``).

It gives plugin authors -- ours and third parties' -- a conformance suite per plugin role to run
against their own implementations (``check_storage``, ``MetadataStoreConformance``,
``check_transport``, ``check_remote_storage``, ``check_codec``, ``check_partitioner``, ``check_assignor``,
``check_server_assignor``, ``check_replica_selector``, ``SaslMechanismConformance``,
``AuthorizerConformance``) and fixtures that start real servers for integration tests (a broker
subprocess, ZooKeeper, etcd, a Spark session).
Each concern lives in its own module; this module only re-exports, and imports nothing heavy:
fixtures import pyspark, kazoo or etcd3 lazily, when a test asks for them.

pytest rewrites ``assert`` statements (to show the values compared) only in test modules and in
modules marked for it before they are imported. An installed distribution's pytest11 plugin gets
that only for the files its metadata lists, which an editable install does not, so the suites'
modules are marked (in ``_assert_rewrite``) before the imports below: a failing conformance
check then shows what the plugin returned and what was expected instead of a bare
``AssertionError``.
"""

# First: marks the suites for assertion rewriting before any of them is imported.
from . import _assert_rewrite as _assert_rewrite
from .assignor import AssignorConformance as AssignorConformance
from .assignor import check_assignor as check_assignor
from .authorizer import AuthorizerConformance as AuthorizerConformance
from .broker import BrokerProcess as BrokerProcess
from .broker import odradek_broker as odradek_broker
from .broker import start_broker as start_broker
from .broker import unique_topic as unique_topic
from .codec import CodecConformance as CodecConformance
from .codec import check_codec as check_codec
from .metadata import MetadataStoreConformance as MetadataStoreConformance
from .partitioner import PartitionerConformance as PartitionerConformance
from .partitioner import check_partitioner as check_partitioner
from .remote_storage import RemoteStorageConformance as RemoteStorageConformance
from .remote_storage import check_remote_storage as check_remote_storage
from .replica_selector import ReplicaSelectorConformance as ReplicaSelectorConformance
from .replica_selector import check_replica_selector as check_replica_selector
from .sasl import SaslMechanismConformance as SaslMechanismConformance
from .server_assignor import ServerAssignorConformance as ServerAssignorConformance
from .server_assignor import check_server_assignor as check_server_assignor
from .servers import EtcdServer as EtcdServer
from .servers import ZooKeeperServer as ZooKeeperServer
from .servers import etcd_server as etcd_server
from .servers import start_etcd as start_etcd
from .servers import start_zookeeper as start_zookeeper
from .servers import unique_chroot as unique_chroot
from .servers import zookeeper_server as zookeeper_server
from .spark import spark_session as spark_session
from .storage import StorageConformance as StorageConformance
from .storage import check_storage as check_storage
from .transport import TransportConformance as TransportConformance
from .transport import check_transport as check_transport
