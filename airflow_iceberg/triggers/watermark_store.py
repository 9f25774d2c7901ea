"""Where an ``AssetWatcher``'s snapshot trigger keeps its watermark: Airflow 3.3's asset state store.

The triggerer gives an event trigger that watches assets ``self.asset_state_store``, the state of
the asset(s) it watches, kept in Airflow's metadata database across triggerer restarts. The
watermark is stored under a key of its own per *watch* (connection, table, branch, filters), so
two watchers of one asset that watch different tables or filters do not share it. Pacing
arguments (``poll_interval``, ``poll_retries``) are not part of the key: a DAG that changes
them gets a new trigger that resumes where the old one stopped.

The stored value names its watch as well as the watermark; a value whose watch differs (a hash
collision, a hand-edited row) is ignored, as if none were stored.

A trigger that several assets share (Airflow deduplicates triggers with equal arguments, so two
assets watching the same table with the same arguments share one) has no single asset to keep it
under: Airflow's accessor refuses to pick one. Such a trigger keeps no watermark and says so.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from airflow_iceberg.catalog.snapshot_watermark import Watermark

KEY_PREFIX = "airflow_iceberg.snapshot_trigger.watermark."
#: What Airflow's ``AssetStateStoreAccessors`` says when the trigger watches several assets.
SEVERAL_ASSETS_MESSAGE = "concrete inlets and outlets"


def watermark_key(watch: Mapping[str, Any]) -> str:
    """The state store key of one watch: a prefix and a digest of the watch's canonical JSON."""
    digest = hashlib.sha256(json.dumps(watch, sort_keys=True).encode()).hexdigest()[:16]
    return KEY_PREFIX + digest


class SeveralAssetsError(Exception):
    """The trigger watches several assets, so there is no one asset to keep its watermark under."""


class WatermarkStore:
    """Read and write one watch's :class:`Watermark` through an asset's state store accessor."""

    def __init__(self, accessor: Any, watch: Mapping[str, Any]) -> None:
        self.accessor = accessor
        self.watch = dict(watch)
        self.key = watermark_key(self.watch)

    async def load(self) -> Watermark | None:
        """The stored watermark of this watch; ``None`` when there is none (or it is not ours).

        Raises :class:`SeveralAssetsError` when the trigger watches more than one asset.
        """
        try:
            if hasattr(self.accessor, "aget"):  # Airflow 3.3.2+
                stored = await self.accessor.aget(self.key, None)
            else:  # 3.3.0 and 3.3.1 have only the blocking call
                stored = await asyncio.to_thread(self.accessor.get, self.key, None)
        except ValueError as error:
            if SEVERAL_ASSETS_MESSAGE in str(error):
                raise SeveralAssetsError(str(error)) from error
            raise
        if not isinstance(stored, dict) or stored.get("watch") != self.watch:
            return None
        return Watermark.from_json(stored.get("watermark"))

    async def save(self, watermark: Watermark) -> None:
        """Store ``watermark``; returns once Airflow has written it to its database."""
        value = {"watch": self.watch, "watermark": watermark.to_json()}
        if hasattr(self.accessor, "aset"):
            await self.accessor.aset(self.key, value)
        else:
            await asyncio.to_thread(self.accessor.set, self.key, value)
