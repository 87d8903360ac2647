"""Kafka message specs, transcribed from apache/kafka `clients/src/main/resources/common/message/*.json`.

Only the fields that shape the bytes are kept (name, type, versions, nullableVersions, tag,
taggedVersions, default, nested fields, commonStructs); comments and "about" texts are dropped.
The codec in `codec.py` interprets these dicts exactly as Kafka's generator does, so adding a
message is a matter of pasting its JSON here.

Where each one comes from (tests/collect/test_probe_protocol.py checks the first point field by field):
- Every spec except ApiVersions v5 equals Kafka's own JSON as kafka-python 3.0.12 ships it,
  verbatim with its Apache header, in `kafka/protocol/schemas/resources/` (ApiVersions 0-4,
  Metadata 0-13, DescribeCluster 0-2 with KIP-1073's IncludeFencedBrokers/IsFenced,
  DescribeQuorum 0-2 with KIP-836's LastFetchTimestamp/LastCaughtUpTimestamp, SASL; for the partition
  layout of issue 30, DescribeTopicPartitions 0 (KIP-966, its cursor) and DescribeConfigs 1-4).
- ApiVersions v5 is KIP-1242 (Kafka 4.4). The response: apache/kafka's ApiVersionsResponse.json
  at commit 0282c0876acb86531853595645902f6a471f6a2e has `"validVersions": "0-5"` and the v4
  fields unchanged, so the v5 body is the v4 body. The request: Kafka's ApiVersionsRequest.json
  with v5 was not found (every stored copy stops at v4), so its two fields were reconstructed,
  then confirmed byte for byte by a real Kafka 4.4 broker (tests/fixtures/kafka/4.4.0, recorded
  by tests/fixtures/kafka/record.py): matched against a code generator's output of that JSON (krabka-io/krabka-protocol,
  crates/protocol/generated/ApiVersionsRequest.owned.rs, "generated against" apache/kafka
  a9ce3221537b8653448750697915607dc7936cf3): after ClientSoftwareVersion, `ClusterId` (v5+,
  nullable compact string, default null) then `NodeId` (v5+, int32, default -1), neither
  tagged. Both set or both unset (a NodeId without a ClusterId is INVALID_REQUEST); a broker
  whose identity differs answers `REBOOTSTRAP_REQUIRED` (129). The "about" texts, `ignorable`
  and `entityType` of those two fields are not confirmed; they do not change the bytes.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["SPECS"]

_API_VERSIONS_REQUEST = """
{ "apiKey": 18, "type": "request", "name": "ApiVersionsRequest",
  "validVersions": "0-5", "flexibleVersions": "3+",
  "fields": [
    { "name": "ClientSoftwareName", "type": "string", "versions": "3+", "ignorable": true },
    { "name": "ClientSoftwareVersion", "type": "string", "versions": "3+", "ignorable": true },
    { "name": "ClusterId", "type": "string", "versions": "5+", "nullableVersions": "5+", "default": "null" },
    { "name": "NodeId", "type": "int32", "versions": "5+", "default": "-1", "entityType": "brokerId" }
  ]
}"""

_API_VERSIONS_RESPONSE = """
{ "apiKey": 18, "type": "response", "name": "ApiVersionsResponse",
  "validVersions": "0-5", "flexibleVersions": "3+",
  "fields": [
    { "name": "ErrorCode", "type": "int16", "versions": "0+" },
    { "name": "ApiKeys", "type": "[]ApiVersion", "versions": "0+", "fields": [
      { "name": "ApiKey", "type": "int16", "versions": "0+", "mapKey": true },
      { "name": "MinVersion", "type": "int16", "versions": "0+" },
      { "name": "MaxVersion", "type": "int16", "versions": "0+" }
    ]},
    { "name": "ThrottleTimeMs", "type": "int32", "versions": "1+", "ignorable": true },
    { "name": "SupportedFeatures", "type": "[]SupportedFeatureKey", "ignorable": true,
      "versions": "3+", "tag": 0, "taggedVersions": "3+", "fields": [
        { "name": "Name", "type": "string", "versions": "3+", "mapKey": true },
        { "name": "MinVersion", "type": "int16", "versions": "3+" },
        { "name": "MaxVersion", "type": "int16", "versions": "3+" }
    ]},
    { "name": "FinalizedFeaturesEpoch", "type": "int64", "versions": "3+",
      "tag": 1, "taggedVersions": "3+", "default": "-1", "ignorable": true },
    { "name": "FinalizedFeatures", "type": "[]FinalizedFeatureKey", "ignorable": true,
      "versions": "3+", "tag": 2, "taggedVersions": "3+", "fields": [
        { "name": "Name", "type": "string", "versions": "3+", "mapKey": true },
        { "name": "MaxVersionLevel", "type": "int16", "versions": "3+" },
        { "name": "MinVersionLevel", "type": "int16", "versions": "3+" }
    ]},
    { "name": "ZkMigrationReady", "type": "bool", "versions": "3+", "taggedVersions": "3+",
      "tag": 3, "ignorable": true, "default": "false" }
  ]
}"""

_METADATA_REQUEST = """
{ "apiKey": 3, "type": "request", "name": "MetadataRequest",
  "validVersions": "0-13", "flexibleVersions": "9+",
  "fields": [
    { "name": "Topics", "type": "[]MetadataRequestTopic", "versions": "0+", "nullableVersions": "1+", "fields": [
      { "name": "TopicId", "type": "uuid", "versions": "10+", "ignorable": true },
      { "name": "Name", "type": "string", "versions": "0+", "entityType": "topicName", "nullableVersions": "10+" }
    ]},
    { "name": "AllowAutoTopicCreation", "type": "bool", "versions": "4+", "default": "true", "ignorable": false },
    { "name": "IncludeClusterAuthorizedOperations", "type": "bool", "versions": "8-10" },
    { "name": "IncludeTopicAuthorizedOperations", "type": "bool", "versions": "8+" }
  ]
}"""

_METADATA_RESPONSE = """
{ "apiKey": 3, "type": "response", "name": "MetadataResponse",
  "validVersions": "0-13", "flexibleVersions": "9+",
  "fields": [
    { "name": "ThrottleTimeMs", "type": "int32", "versions": "3+", "ignorable": true },
    { "name": "Brokers", "type": "[]MetadataResponseBroker", "versions": "0+", "fields": [
      { "name": "NodeId", "type": "int32", "versions": "0+", "mapKey": true, "entityType": "brokerId" },
      { "name": "Host", "type": "string", "versions": "0+" },
      { "name": "Port", "type": "int32", "versions": "0+" },
      { "name": "Rack", "type": "string", "versions": "1+", "nullableVersions": "1+", "ignorable": true,
        "default": "null" }
    ]},
    { "name": "ClusterId", "type": "string", "nullableVersions": "2+", "versions": "2+", "ignorable": true,
      "default": "null" },
    { "name": "ControllerId", "type": "int32", "versions": "1+", "default": "-1", "ignorable": true },
    { "name": "Topics", "type": "[]MetadataResponseTopic", "versions": "0+", "fields": [
      { "name": "ErrorCode", "type": "int16", "versions": "0+" },
      { "name": "Name", "type": "string", "versions": "0+", "mapKey": true, "nullableVersions": "12+" },
      { "name": "TopicId", "type": "uuid", "versions": "10+", "ignorable": true },
      { "name": "IsInternal", "type": "bool", "versions": "1+", "default": "false", "ignorable": true },
      { "name": "Partitions", "type": "[]MetadataResponsePartition", "versions": "0+", "fields": [
        { "name": "ErrorCode", "type": "int16", "versions": "0+" },
        { "name": "PartitionIndex", "type": "int32", "versions": "0+" },
        { "name": "LeaderId", "type": "int32", "versions": "0+" },
        { "name": "LeaderEpoch", "type": "int32", "versions": "7+", "default": "-1", "ignorable": true },
        { "name": "ReplicaNodes", "type": "[]int32", "versions": "0+" },
        { "name": "IsrNodes", "type": "[]int32", "versions": "0+" },
        { "name": "OfflineReplicas", "type": "[]int32", "versions": "5+", "ignorable": true }
      ]},
      { "name": "TopicAuthorizedOperations", "type": "int32", "versions": "8+", "default": "-2147483648" }
    ]},
    { "name": "ClusterAuthorizedOperations", "type": "int32", "versions": "8-10", "default": "-2147483648" },
    { "name": "ErrorCode", "type": "int16", "versions": "13+", "ignorable": true }
  ]
}"""

_DESCRIBE_CLUSTER_REQUEST = """
{ "apiKey": 60, "type": "request", "name": "DescribeClusterRequest",
  "validVersions": "0-2", "flexibleVersions": "0+",
  "fields": [
    { "name": "IncludeClusterAuthorizedOperations", "type": "bool", "versions": "0+" },
    { "name": "EndpointType", "type": "int8", "versions": "1+", "default": "1" },
    { "name": "IncludeFencedBrokers", "type": "bool", "versions": "2+" }
  ]
}"""

_DESCRIBE_CLUSTER_RESPONSE = """
{ "apiKey": 60, "type": "response", "name": "DescribeClusterResponse",
  "validVersions": "0-2", "flexibleVersions": "0+",
  "fields": [
    { "name": "ThrottleTimeMs", "type": "int32", "versions": "0+" },
    { "name": "ErrorCode", "type": "int16", "versions": "0+" },
    { "name": "ErrorMessage", "type": "string", "versions": "0+", "nullableVersions": "0+", "default": "null" },
    { "name": "EndpointType", "type": "int8", "versions": "1+", "default": "1" },
    { "name": "ClusterId", "type": "string", "versions": "0+" },
    { "name": "ControllerId", "type": "int32", "versions": "0+", "default": "-1" },
    { "name": "Brokers", "type": "[]DescribeClusterBroker", "versions": "0+", "fields": [
      { "name": "BrokerId", "type": "int32", "versions": "0+", "mapKey": true },
      { "name": "Host", "type": "string", "versions": "0+" },
      { "name": "Port", "type": "int32", "versions": "0+" },
      { "name": "Rack", "type": "string", "versions": "0+", "nullableVersions": "0+", "default": "null" },
      { "name": "IsFenced", "type": "bool", "versions": "2+" }
    ]},
    { "name": "ClusterAuthorizedOperations", "type": "int32", "versions": "0+", "default": "-2147483648" }
  ]
}"""

_DESCRIBE_QUORUM_REQUEST = """
{ "apiKey": 55, "type": "request", "name": "DescribeQuorumRequest",
  "validVersions": "0-2", "flexibleVersions": "0+",
  "fields": [
    { "name": "Topics", "type": "[]TopicData", "versions": "0+", "fields": [
      { "name": "TopicName", "type": "string", "versions": "0+" },
      { "name": "Partitions", "type": "[]PartitionData", "versions": "0+", "fields": [
        { "name": "PartitionIndex", "type": "int32", "versions": "0+" }
      ]}
    ]}
  ]
}"""

_DESCRIBE_QUORUM_RESPONSE = """
{ "apiKey": 55, "type": "response", "name": "DescribeQuorumResponse",
  "validVersions": "0-2", "flexibleVersions": "0+",
  "fields": [
    { "name": "ErrorCode", "type": "int16", "versions": "0+" },
    { "name": "ErrorMessage", "type": "string", "versions": "2+", "nullableVersions": "2+", "ignorable": true },
    { "name": "Topics", "type": "[]TopicData", "versions": "0+", "fields": [
      { "name": "TopicName", "type": "string", "versions": "0+" },
      { "name": "Partitions", "type": "[]PartitionData", "versions": "0+", "fields": [
        { "name": "PartitionIndex", "type": "int32", "versions": "0+" },
        { "name": "ErrorCode", "type": "int16", "versions": "0+" },
        { "name": "ErrorMessage", "type": "string", "versions": "2+", "nullableVersions": "2+", "ignorable": true },
        { "name": "LeaderId", "type": "int32", "versions": "0+" },
        { "name": "LeaderEpoch", "type": "int32", "versions": "0+" },
        { "name": "HighWatermark", "type": "int64", "versions": "0+" },
        { "name": "CurrentVoters", "type": "[]ReplicaState", "versions": "0+" },
        { "name": "Observers", "type": "[]ReplicaState", "versions": "0+" }
      ]}
    ]},
    { "name": "Nodes", "type": "[]Node", "versions": "2+", "fields": [
      { "name": "NodeId", "type": "int32", "versions": "2+", "mapKey": true },
      { "name": "Listeners", "type": "[]Listener", "versions": "2+", "fields": [
        { "name": "Name", "type": "string", "versions": "2+", "mapKey": true },
        { "name": "Host", "type": "string", "versions": "2+" },
        { "name": "Port", "type": "uint16", "versions": "2+" }
      ]}
    ]}
  ],
  "commonStructs": [
    { "name": "ReplicaState", "versions": "0+", "fields": [
      { "name": "ReplicaId", "type": "int32", "versions": "0+" },
      { "name": "ReplicaDirectoryId", "type": "uuid", "versions": "2+" },
      { "name": "LogEndOffset", "type": "int64", "versions": "0+" },
      { "name": "LastFetchTimestamp", "type": "int64", "versions": "1+", "ignorable": true, "default": -1 },
      { "name": "LastCaughtUpTimestamp", "type": "int64", "versions": "1+", "ignorable": true, "default": -1 }
    ]}
  ]
}"""

_SASL_HANDSHAKE_REQUEST = """
{ "apiKey": 17, "type": "request", "name": "SaslHandshakeRequest",
  "validVersions": "0-1", "flexibleVersions": "none",
  "fields": [ { "name": "Mechanism", "type": "string", "versions": "0+" } ]
}"""

_SASL_HANDSHAKE_RESPONSE = """
{ "apiKey": 17, "type": "response", "name": "SaslHandshakeResponse",
  "validVersions": "0-1", "flexibleVersions": "none",
  "fields": [
    { "name": "ErrorCode", "type": "int16", "versions": "0+" },
    { "name": "Mechanisms", "type": "[]string", "versions": "0+" }
  ]
}"""

_SASL_AUTHENTICATE_REQUEST = """
{ "apiKey": 36, "type": "request", "name": "SaslAuthenticateRequest",
  "validVersions": "0-2", "flexibleVersions": "2+",
  "fields": [ { "name": "AuthBytes", "type": "bytes", "versions": "0+" } ]
}"""

_SASL_AUTHENTICATE_RESPONSE = """
{ "apiKey": 36, "type": "response", "name": "SaslAuthenticateResponse",
  "validVersions": "0-2", "flexibleVersions": "2+",
  "fields": [
    { "name": "ErrorCode", "type": "int16", "versions": "0+" },
    { "name": "ErrorMessage", "type": "string", "versions": "0+", "nullableVersions": "0+" },
    { "name": "AuthBytes", "type": "bytes", "versions": "0+" },
    { "name": "SessionLifetimeMs", "type": "int64", "versions": "1+", "default": "0", "ignorable": true }
  ]
}"""

_DESCRIBE_TOPIC_PARTITIONS_REQUEST = """
{"apiKey": 75, "type": "request", "name": "DescribeTopicPartitionsRequest", "validVersions": "0",
  "flexibleVersions": "0+",
  "fields": [
    {"name": "Topics", "type": "[]TopicRequest", "versions": "0+", "fields": [
      {"name": "Name", "type": "string", "versions": "0+", "entityType": "topicName"}
    ]},
    {"name": "ResponsePartitionLimit", "type": "int32", "versions": "0+", "default": "2000"},
    {"name": "Cursor", "type": "Cursor", "versions": "0+", "nullableVersions": "0+", "default": "null", "fields": [
      {"name": "TopicName", "type": "string", "versions": "0+", "entityType": "topicName"},
      {"name": "PartitionIndex", "type": "int32", "versions": "0+"}
    ]}
  ]
}"""

_DESCRIBE_TOPIC_PARTITIONS_RESPONSE = """
{"apiKey": 75, "type": "response", "name": "DescribeTopicPartitionsResponse", "validVersions": "0",
  "flexibleVersions": "0+",
  "fields": [
    {"name": "ThrottleTimeMs", "type": "int32", "versions": "0+", "ignorable": true},
    {"name": "Topics", "type": "[]DescribeTopicPartitionsResponseTopic", "versions": "0+", "fields": [
      {"name": "ErrorCode", "type": "int16", "versions": "0+"},
      {"name": "Name", "type": "string", "versions": "0+", "mapKey": true, "entityType": "topicName",
        "nullableVersions": "0+"},
      {"name": "TopicId", "type": "uuid", "versions": "0+", "ignorable": true},
      {"name": "IsInternal", "type": "bool", "versions": "0+", "default": "false", "ignorable": true},
      {"name": "Partitions", "type": "[]DescribeTopicPartitionsResponsePartition", "versions": "0+", "fields": [
        {"name": "ErrorCode", "type": "int16", "versions": "0+"},
        {"name": "PartitionIndex", "type": "int32", "versions": "0+"},
        {"name": "LeaderId", "type": "int32", "versions": "0+", "entityType": "brokerId"},
        {"name": "LeaderEpoch", "type": "int32", "versions": "0+", "default": "-1", "ignorable": true},
        {"name": "ReplicaNodes", "type": "[]int32", "versions": "0+", "entityType": "brokerId"},
        {"name": "IsrNodes", "type": "[]int32", "versions": "0+", "entityType": "brokerId"},
        {"name": "EligibleLeaderReplicas", "type": "[]int32", "default": "null", "entityType": "brokerId",
          "versions": "0+", "nullableVersions": "0+"},
        {"name": "LastKnownElr", "type": "[]int32", "default": "null", "entityType": "brokerId",
          "versions": "0+", "nullableVersions": "0+"},
        {"name": "OfflineReplicas", "type": "[]int32", "versions": "0+", "ignorable": true, "entityType": "brokerId"}
      ]},
      {"name": "TopicAuthorizedOperations", "type": "int32", "versions": "0+", "default": "-2147483648"}
    ]},
    {"name": "NextCursor", "type": "Cursor", "versions": "0+", "nullableVersions": "0+", "default": "null", "fields": [
      {"name": "TopicName", "type": "string", "versions": "0+", "entityType": "topicName"},
      {"name": "PartitionIndex", "type": "int32", "versions": "0+"}
    ]}
  ]
}"""

_DESCRIBE_CONFIGS_REQUEST = """
{"apiKey": 32, "type": "request", "name": "DescribeConfigsRequest", "validVersions": "1-4", "flexibleVersions": "4+",
  "fields": [
    {"name": "Resources", "type": "[]DescribeConfigsResource", "versions": "0+", "fields": [
      {"name": "ResourceType", "type": "int8", "versions": "0+"},
      {"name": "ResourceName", "type": "string", "versions": "0+"},
      {"name": "ConfigurationKeys", "type": "[]string", "versions": "0+", "nullableVersions": "0+"}
    ]},
    {"name": "IncludeSynonyms", "type": "bool", "versions": "1+", "default": "false", "ignorable": false},
    {"name": "IncludeDocumentation", "type": "bool", "versions": "3+", "default": "false", "ignorable": false}
  ]
}"""

_DESCRIBE_CONFIGS_RESPONSE = """
{"apiKey": 32, "type": "response", "name": "DescribeConfigsResponse", "validVersions": "1-4", "flexibleVersions": "4+",
  "fields": [
    {"name": "ThrottleTimeMs", "type": "int32", "versions": "0+"},
    {"name": "Results", "type": "[]DescribeConfigsResult", "versions": "0+", "fields": [
      {"name": "ErrorCode", "type": "int16", "versions": "0+"},
      {"name": "ErrorMessage", "type": "string", "versions": "0+", "nullableVersions": "0+"},
      {"name": "ResourceType", "type": "int8", "versions": "0+"},
      {"name": "ResourceName", "type": "string", "versions": "0+"},
      {"name": "Configs", "type": "[]DescribeConfigsResourceResult", "versions": "0+", "fields": [
        {"name": "Name", "type": "string", "versions": "0+"},
        {"name": "Value", "type": "string", "versions": "0+", "nullableVersions": "0+"},
        {"name": "ReadOnly", "type": "bool", "versions": "0+"},
        {"name": "ConfigSource", "type": "int8", "versions": "1+", "default": "-1", "ignorable": true},
        {"name": "IsDefault", "type": "bool", "versions": "0"},
        {"name": "IsSensitive", "type": "bool", "versions": "0+"},
        {"name": "Synonyms", "type": "[]DescribeConfigsSynonym", "versions": "1+", "ignorable": true, "fields": [
          {"name": "Name", "type": "string", "versions": "1+"},
          {"name": "Value", "type": "string", "versions": "1+", "nullableVersions": "0+"},
          {"name": "Source", "type": "int8", "versions": "1+"}
        ]},
        {"name": "ConfigType", "type": "int8", "versions": "3+", "default": "0", "ignorable": true},
        {"name": "Documentation", "type": "string", "versions": "3+", "nullableVersions": "0+", "ignorable": true}
      ]}
    ]}
  ]
}"""

SPECS: dict[str, dict[str, Any]] = {
    spec["name"]: spec
    for spec in map(json.loads, (
        _API_VERSIONS_REQUEST, _API_VERSIONS_RESPONSE,
        _METADATA_REQUEST, _METADATA_RESPONSE,
        _DESCRIBE_CLUSTER_REQUEST, _DESCRIBE_CLUSTER_RESPONSE,
        _DESCRIBE_QUORUM_REQUEST, _DESCRIBE_QUORUM_RESPONSE,
        _SASL_HANDSHAKE_REQUEST, _SASL_HANDSHAKE_RESPONSE,
        _SASL_AUTHENTICATE_REQUEST, _SASL_AUTHENTICATE_RESPONSE,
        _DESCRIBE_TOPIC_PARTITIONS_REQUEST, _DESCRIBE_TOPIC_PARTITIONS_RESPONSE,
        _DESCRIBE_CONFIGS_REQUEST, _DESCRIBE_CONFIGS_RESPONSE,
    ))
}
