"""odradek built-in plugin storage_segment: Kafka's segmented log on local disks.

:class:`~odradek.plugins.storage_segment.storage.SegmentLogStorage` (Kafka's ``LogManager``)
holds one :class:`~odradek.plugins.storage_segment.log.SegmentLog` (``UnifiedLog``) per
partition, each a run of :class:`~odradek.plugins.storage_segment.segment.LogSegment` files.
See docs/storage.md for the layout on disk, recovery, retention and compaction.
"""
