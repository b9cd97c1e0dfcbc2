"""What the ZooKeeper and etcd ``MetadataStore`` plugins share: the key layout and counters.

Both map keys one-to-one onto the service's own names (a znode path, an etcd key), so both refuse
the same malformed keys, lay out an election as Kafka does on ZooKeeper (``/<name>`` held by the
leader, ``/<name>_epoch`` counting leaders) and register brokers under ``/brokers/ids``. Counters
(``next_id``) need nothing but ``get`` and a version-checked ``put``, so one loop serves both.
"""

from __future__ import annotations

from .interfaces import ABSENT, MetadataConflict, MetadataStore

#: Where brokers register (ephemeral ``/brokers/ids/<id>``), as on Kafka's ZooKeeper.
BROKER_IDS = "/brokers/ids"


def check_key(key: str) -> str:
    """``key`` if it is an absolute path such as ``/brokers/ids/1``; ValueError otherwise."""
    if not key.startswith("/") or key.endswith("/") or "//" in key:
        raise ValueError(f"metadata key {key!r} must be an absolute path like /brokers/ids/1")
    return key


def check_prefix(prefix: str) -> str:
    """``prefix`` without trailing slashes, if it is absolute; ValueError otherwise."""
    if not prefix.startswith("/"):
        raise ValueError(f"metadata prefix {prefix!r} must start with /")
    return prefix.rstrip("/")


def broker_key(broker_id: int) -> str:
    """The registration key of ``broker_id``."""
    return f"{BROKER_IDS}/{broker_id}"


def election_keys(name: str) -> tuple[str, str]:
    """(leader key, epoch counter key) of election ``name``: ``/<name>`` and ``/<name>_epoch``."""
    return f"/{name}", f"/{name}_epoch"


async def increment_counter(store: MetadataStore, key: str) -> int:
    """Increment the decimal counter at ``key`` (absent = 0) by compare-and-set; the new value.

    A ``MetadataConflict`` means another writer got there first: read again and retry.
    """
    while True:
        current = await store.get(key)
        value = int(current.value) + 1 if current is not None else 1
        try:
            await store.put(key, str(value).encode(), expect=current.version if current is not None else ABSENT)
        except MetadataConflict:
            continue
        return value


__all__ = ["BROKER_IDS", "broker_key", "check_key", "check_prefix", "election_keys", "increment_counter"]
