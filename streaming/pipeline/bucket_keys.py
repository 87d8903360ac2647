"""The stateful operator's grouping keys: which of Spark's shuffle partitions runs each bucket of shards.

Spark runs the operator's key `k` in shuffle partition pmod(murmur3(k, seed 42), partitions) (its
`HashPartitioning`). With the bucket numbers themselves as keys, the default 16 buckets fall 9 and 7
on the default 2 partitions: the task of nine buckets ran ~9/16 of detection's first pass while the
other core waited for it, in every micro-batch. A checkpoint started by this version keys bucket `b`
by the smallest `b + buckets * m` that Spark sends to partition `b mod partitions`
(`spread_bucket_keys`), so that each partition runs as many buckets as the next. The keys are the
state's keys for the checkpoint's whole life: the live job writes them in the checkpoint's layout file
(streaming/job/session.py), and a checkpoint of the versions before runs on with its buckets as keys.
Every key maps back to its bucket (`bucket_of_key`): key mod buckets; the parse stage's negative
buckets (quarantine, source clocks) are their own keys.
"""

from __future__ import annotations

__all__ = ["bucket_count_changed", "bucket_of_key", "shuffle_partition_of", "spread_bucket_keys"]

_SPARK_HASH_SEED = 42  # Murmur3Hash's default, which HashPartitioning uses


def _rotate_left(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & 0xFFFFFFFF


def _murmur3_int(value: int, seed: int = _SPARK_HASH_SEED) -> int:
    """Spark's Murmur3_x86_32.hashInt: the hash of an int column's value, as a signed 32-bit int."""
    k1 = _rotate_left((value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = (_rotate_left(seed ^ k1, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4  # the input's length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def shuffle_partition_of(key: int, partitions: int) -> int:
    """The shuffle partition Spark runs the operator's (int) key in: pmod(hash(key), partitions)."""
    return _murmur3_int(key) % partitions


def spread_bucket_keys(buckets: int, partitions: int) -> tuple[int, ...]:
    """The key of each bucket (by its number) that puts bucket `b` in shuffle partition `b mod partitions`."""
    keys = []
    for bucket in range(buckets):
        key = bucket
        while shuffle_partition_of(key, partitions) != bucket % partitions:
            key += buckets  # (about `partitions` tries: the hash spreads evenly)
        keys.append(key)
    return tuple(keys)


def bucket_count_changed(stored: int, configured: int) -> str:
    """The one line that refuses a checkpoint of `stored` buckets under spark.state_buckets `configured`,
    at the job's start (a checkpoint that records its keys) or at its first batch (one that does not)."""
    return (f"the checkpoint's detection state has {stored} buckets but spark.state_buckets is {configured}: "
            f"set it back to {stored}, or start a new checkpoint")


def bucket_of_key(key: int, buckets: int) -> int:
    """The bucket the operator's key stands for, whichever keys the checkpoint has."""
    return key % buckets if key >= 0 else key
