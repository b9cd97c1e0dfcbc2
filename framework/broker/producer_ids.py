"""Producer id allocation and InitProducerId (Kafka's ``ProducerIdManager`` and the first job of
its ``TransactionCoordinator``).

Ids come in blocks of 1000 reserved through ``MetadataStore.next_id``, so a broker touches the
store once per thousand producers and two brokers never hand out the same id (Kafka's
``/latest_producer_id_block``). An idempotent producer gets a fresh id at epoch 0, or, asking with
the id and epoch it holds (InitProducerId v3+, KIP-360), that id with the epoch bumped (a fresh id
when the epoch would overflow). A producer with
a ``transactional.id`` gets the id that transactional id had before with the epoch bumped, which
fences the previous instance (its writes now carry an older epoch and are refused); the mapping
is kept in the store under ``/transactions/ids/<transactional.id>``.
"""

from __future__ import annotations

import json

import trio

from ..errors import ErrorCode
from ..interfaces import ABSENT, MetadataConflict, MetadataStore
from .api import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, InitProducerIdResult

PRODUCER_ID_BLOCK_KEY = "/latest_producer_id_block"
PRODUCER_ID_BLOCK_SIZE = 1000
TRANSACTIONAL_IDS_PREFIX = "/transactions/ids/"
#: Kafka bumps to a new producer id before the epoch (an int16) would overflow.
MAX_EPOCH = 32767 - 1


class ProducerIdManager:
    """Hands out producer ids from blocks reserved in the metadata store."""

    def __init__(self, store: MetadataStore, transaction_max_timeout_ms: int = 900_000) -> None:
        self.store = store
        self.transaction_max_timeout_ms = transaction_max_timeout_ms
        self._next = 0
        self._end = 0
        self._lock = trio.Lock()

    async def generate_producer_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                block = await self.store.next_id(PRODUCER_ID_BLOCK_KEY)  # 1, 2, 3, ...
                self._next = (block - 1) * PRODUCER_ID_BLOCK_SIZE
                self._end = self._next + PRODUCER_ID_BLOCK_SIZE
            pid = self._next
            self._next += 1
            return pid

    async def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> InitProducerIdResult:
        if transactional_id is None:
            if producer_id >= 0 and 0 <= producer_epoch < MAX_EPOCH:
                # KIP-360: an idempotent producer that must restart its sequences (a batch timed
                # out, UNKNOWN_PRODUCER_ID) keeps its id with the epoch bumped; partitions take
                # the new epoch from sequence 0. There is no central state to check it against:
                # any client may write with any producer id already, as in Kafka without ACLs
                return InitProducerIdResult(ErrorCode.NONE, producer_id, producer_epoch + 1)
            return InitProducerIdResult(ErrorCode.NONE, await self.generate_producer_id(), 0)
        if transactional_id == "":
            return InitProducerIdResult(ErrorCode.INVALID_REQUEST)
        if not 0 < transaction_timeout_ms <= self.transaction_max_timeout_ms:
            return InitProducerIdResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        key = TRANSACTIONAL_IDS_PREFIX + transactional_id
        while True:
            current = await self.store.get(key)
            if current is None:
                pid, epoch = await self.generate_producer_id(), 0
            else:
                doc = json.loads(current.value)
                pid, epoch = int(doc["producer_id"]), int(doc["producer_epoch"])
                if producer_id >= 0 and (producer_id, producer_epoch) != (pid, epoch):
                    # KIP-360: a producer may only re-initialise from the id and epoch it holds
                    return InitProducerIdResult(ErrorCode.PRODUCER_FENCED)
                if epoch >= MAX_EPOCH:
                    pid, epoch = await self.generate_producer_id(), 0
                else:
                    epoch += 1
            value = json.dumps(
                {"producer_id": pid, "producer_epoch": epoch, "timeout_ms": transaction_timeout_ms}
            ).encode()
            try:
                await self.store.put(key, value, expect=current.version if current is not None else ABSENT)
            except MetadataConflict:
                continue  # another broker initialised the same transactional id: read again
            return InitProducerIdResult(ErrorCode.NONE, pid, epoch)
