"""The reasons clients give for joining and leaving a classic group (KIP-800).

JoinGroup v8+ and LeaveGroup v5+ carry a free-text ``reason`` ("rebalance failed due to ...",
"the consumer is being closed"). Kafka uses it only in its coordinator's log lines, so that an
operator sees why a group rebalanced; odradek logs it the same way, one INFO line per request
that carries one, from the handlers (the coordinator's own rebalance lines stay as they are).
"""

from __future__ import annotations

import logging

log = logging.getLogger("odradek.broker.group")


def log_client_reason(action: str, group_id: str, member_id: str, reason: str | None) -> None:
    """Log ``reason`` for ``member_id`` (or a batch of members) of ``group_id`` doing ``action``
    (``joins``, ``leaves``); nothing when the client gave none (older versions, or null)."""
    if reason:
        log.info("member %s %s group %s (client reason: %s)", member_id or "(new)", action, group_id, reason)


__all__ = ["log_client_reason"]
