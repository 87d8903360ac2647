"""The detection state's stored format: one shard's engine as bytes in the job's state store.

The Spark job keeps each shard's engine (`ShardEngine`, `HolderShard`) pickled in its checkpoint
(streaming/pipeline/state.py). Pickle writes an object's class by module and name and its fields
as they are, and a checkpoint outlives the code that wrote it: the layouts are read here, and
only here.

- `_TAG`, one byte of version, then the engine's pickle.
- Version 3: the two-pass job (README.md, "Shards and scale-out").
- Version 4: a cluster's advertisements are kept per pair (`misroutes.Advert`: addresses, lease,
  listed or registered) instead of one lease for the whole cluster (issue 27). A version 3
  state is upgraded: each pair keeps the cluster's lease, and counts as listed, so the next
  broker list of its cluster that omits it ends it (version 3 never forgot a pair a list
  omitted; such pairs are what the upgrade lets go).
- Versions 1 (untagged) and 2 were written by the job of one stateful stage, whose checkpoints
  Spark refuses to continue with two (STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA;
  the job names the checkpoint to move aside before it starts: streaming/job/session.py).
  None can reach this code; one that did is refused with the same advice.

A class that moves keeps its old home readable: `_MOVED` maps the module a state names to where the
class lives now (issue 46 moved the ground floor's records: `streaming.alert` is `streaming.records.alert`).

A layout change that needs more than a class default (a field added with a plain default needs
nothing: an object pickled without it reads the class's default): bump STATE_FORMAT_VERSION and
add the upgrade from the version before it to `_UPGRADES`. Caches are no part of the format:
each class leaves them out of its pickle (`__getstate__`) and rebuilds them when loaded.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streaming.detect.engine import ShardEngine
    from streaming.detect.holder_shard import HolderShard

__all__ = ["STATE_FORMAT_VERSION", "dump_engine", "load_engine"]

STATE_FORMAT_VERSION = 4
_TAG = b"fwds"  # never the start of a pickle (protocol 2 on begins with 0x80)
_OLDEST_READ = 3  # the first version of the two-pass job


def dump_engine(engine: ShardEngine | HolderShard) -> bytes:
    return _TAG + bytes([STATE_FORMAT_VERSION]) + pickle.dumps(engine, protocol=pickle.HIGHEST_PROTOCOL)


def load_engine(data: bytes) -> ShardEngine | HolderShard:
    """An engine as `dump_engine` wrote it, or as an earlier version of the two-pass job did, in today's layout."""
    version = data[len(_TAG)] if data.startswith(_TAG) else 1
    if version > STATE_FORMAT_VERSION:
        raise ValueError(f"detection state of format {version}, written by a newer fleetwatch "
                         f"(this one reads up to {STATE_FORMAT_VERSION})")
    if version < _OLDEST_READ:
        raise ValueError(f"detection state of format {version}, written by the fleetwatch of one detection stage: "
                         "start a new checkpoint (move the old one aside)")
    body = memoryview(data)[len(_TAG) + 1:]
    try:
        # pickle's own class lookup: `_Unpickler`'s, in Python, took a seventh of the load of a cluster's engine
        engine: ShardEngine | HolderShard = pickle.loads(body)
    except ModuleNotFoundError:  # a class that moved since the state was written
        engine = _Unpickler(io.BytesIO(body)).load()
    for upgrade in range(version, STATE_FORMAT_VERSION):
        _UPGRADES[upgrade](engine)
    return engine


# module a state written before a move names -> where its classes are now
_MOVED = {"streaming.alert": "streaming.records.alert", "streaming.layout_contract": "streaming.records.layout"}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(_MOVED.get(module, module), name)


def _per_pair_advertisements(engine: ShardEngine | HolderShard) -> None:
    """3 -> 4: `Advertisements` held `by_node` (node id -> addresses) and one `lease` for them all."""
    from streaming.detect.misroutes import Advert

    adverts = getattr(engine, "advertisements", None)
    if adverts is None:
        return  # a second-pass shard: its layout did not change
    renewed = adverts.__dict__.pop("lease").renewed_ms
    adverts.by_node = {} if renewed is None else {
        node: Advert(addresses, renewed, True) for node, addresses in adverts.by_node.items()}


# version -> the upgrade of an engine loaded in that version's layout to the next version's
_UPGRADES: dict[int, Callable[[ShardEngine | HolderShard], None]] = {3: _per_pair_advertisements}
