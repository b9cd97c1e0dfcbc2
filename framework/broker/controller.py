"""The controller's election duty: give offline partitions a new leader (Kafka's controller,
``PartitionStateMachine`` offline-partition election).

Every broker campaigns for the ``controller`` election in the metadata store; the winner (the only
broker on a single node) elects leaders for partitions whose leader is not a live broker: the first
replica in assignment order that is alive and in the ISR, or, with
``unclean.leader.election.enable``, the first live replica (its ISR then becomes just itself).
Each election bumps the leader epoch and is a compare-and-set on the partition state carrying the
controller's fence, so a deposed controller's late writes fail. It runs once on winning and again
whenever the set of live brokers changes.

What a full cluster controller adds later (ISR changes proposed by leaders, preferred-leader
election, controlled shutdown, reassignment) builds on the same loop and fence.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from ..config import Config
from ..interfaces import Check, Leadership, MetadataCompacted, MetadataConflict, MetadataStore, Put
from .metadata_cache import BROKERS_PREFIX, CONTROLLER_ELECTION, MetadataCache, PartitionState, partition_state_key

log = logging.getLogger(__name__)


class Controller:
    """Campaigns for controllership and, while holding it, elects leaders of offline partitions."""

    def __init__(self, config: Config, store: MetadataStore, cache: MetadataCache) -> None:
        self.config = config
        self.store = store
        self.cache = cache
        self.leadership: Leadership | None = None

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Campaign (blocks while another broker controls), then elect on every broker change.
        Reports started as soon as *some* broker is known to be the controller."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._lead)
            await self.cache.controller_known.wait()
            task_status.started()

    async def _lead(self) -> None:
        self.leadership = await self.store.campaign(CONTROLLER_ELECTION, str(self.config.broker_id).encode())
        log.info("broker %d is the controller (epoch %d)", self.config.broker_id, self.leadership.epoch)
        await self.cache.refresh_controller()
        while True:
            _, revision = await self.store.list(BROKERS_PREFIX)
            await self.elect_offline_leaders()
            try:
                async for _ev in self.store.watch(BROKERS_PREFIX, after_revision=revision):
                    break  # a broker came or went: elect again on fresh state
                else:
                    return  # the session ended
            except MetadataCompacted:
                continue

    async def elect_offline_leaders(self) -> int:
        """One election pass over every partition; returns how many got a new leader."""
        leadership = self.leadership
        if leadership is None:
            return 0
        brokers, _ = await self.store.list(BROKERS_PREFIX)
        live = {int(k[len(BROKERS_PREFIX) :]) for k in brokers if k[len(BROKERS_PREFIX) :].isdigit()}
        elected = 0
        for topic in list(self.cache.topics.values()):
            changed = False
            unclean = bool(self._topic_setting(topic.name, "unclean.leader.election.enable"))
            for p, replicas in sorted(topic.assignment.items()):
                state = topic.states.get(p)
                if state is None or state.leader in live:
                    continue
                new = elect_leader(replicas, state, live, unclean)
                if new is None:
                    log.warning(
                        "%s-%d has no eligible leader (replicas %s, isr %s)", topic.name, p, replicas, state.isr
                    )
                    continue
                key = partition_state_key(topic.name, p)
                try:
                    await self.store.txn(
                        [leadership.fence, Check(key, state.version)], [Put(key, new.to_json(leadership.epoch))]
                    )
                except MetadataConflict as exc:
                    if exc.key == leadership.fence.key:
                        log.warning("lost controllership; stopping elections")
                        self.leadership = None
                        return elected
                    continue  # the partition changed meanwhile: the next pass sees it
                log.info("%s-%d: elected leader %d at epoch %d", topic.name, p, new.leader, new.leader_epoch)
                elected += 1
                changed = True
            if changed:
                await self.cache.refresh_topic(topic.name)
        return elected

    def _topic_setting(self, topic: str, name: str) -> object:
        config = self.cache.topic_config(topic)
        return config[name] if config is not None else self.config.topic_config()[name]


def elect_leader(
    replicas: tuple[int, ...], state: PartitionState, live: set[int], unclean: bool
) -> PartitionState | None:
    """Kafka's ``offlinePartitionLeaderElection``: the new state, or None when nobody qualifies."""
    in_sync_live = [r for r in replicas if r in live and r in state.isr]
    if in_sync_live:
        return PartitionState(in_sync_live[0], state.leader_epoch + 1, tuple(in_sync_live), state.version)
    if unclean:
        live_replicas = [r for r in replicas if r in live]
        if live_replicas:
            return PartitionState(live_replicas[0], state.leader_epoch + 1, (live_replicas[0],), state.version)
    return None
