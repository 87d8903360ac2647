"""The stateful operator's bucket keys (streaming/pipeline/bucket_keys.py): each shuffle partition runs as
many buckets as the next, and every key maps back to its bucket."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from streaming.pipeline import spread_bucket_keys
from streaming.pipeline.bucket_keys import bucket_of_key, shuffle_partition_of
from streaming.pipeline.parse import QUARANTINE_BUCKET, SOURCE_CLOCK_BUCKET


@pytest.mark.parametrize(("buckets", "partitions"), [(16, 2), (16, 3), (16, 8), (1, 1), (64, 4), (4, 8)])
def test_spread_keys_put_each_bucket_in_its_own_turn_of_the_partitions(buckets, partitions):
    keys = spread_bucket_keys(buckets, partitions)
    assert len(set(keys)) == buckets
    assert [shuffle_partition_of(key, partitions) for key in keys] == [b % partitions for b in range(buckets)]
    assert [bucket_of_key(key, buckets) for key in keys] == list(range(buckets))
    assert all(0 <= key < 2**31 for key in keys)


def test_the_bucket_numbers_as_keys_fall_unevenly_and_map_to_themselves():
    # What a checkpoint of the versions before runs with: 16 buckets as 9 and 7 on 2 partitions.
    partitions = [shuffle_partition_of(bucket, 2) for bucket in range(16)]
    assert sorted(partitions.count(p) for p in (0, 1)) == [7, 9]
    assert [bucket_of_key(bucket, 16) for bucket in range(16)] == list(range(16))
    assert bucket_of_key(QUARANTINE_BUCKET, 16) == QUARANTINE_BUCKET
    assert bucket_of_key(SOURCE_CLOCK_BUCKET, 16) == SOURCE_CLOCK_BUCKET


@pytest.mark.parametrize("partitions", [2, 3])
def test_spark_runs_each_key_in_the_partition_the_keys_were_chosen_for(spark, partitions):
    # The stateful operator's input is hash-partitioned by its grouping key, as `repartition` by that column is.
    keys = [*spread_bucket_keys(16, partitions), *range(-3, 200)]
    frame = spark.createDataFrame([(key,) for key in keys], "bucket int")
    placed = {row.bucket: row.partition for row in frame.repartition(partitions, "bucket")
              .select("bucket", F.spark_partition_id().alias("partition")).collect()}
    assert placed == {key: shuffle_partition_of(key, partitions) for key in keys}
