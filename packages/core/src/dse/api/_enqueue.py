"""Enqueueing configurations for a campaign (:func:`enqueue`, ``dse enqueue``): each is checked
against the campaign's space and constraints and put in the record's queue, which the
campaign's next pass takes from before it asks the agent (``docs/campaign.md``,
``[[enqueue]]``)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["enqueue"]


def enqueue(
    campaign: Mapping[str, Any] | str | os.PathLike[str],
    configs: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    workspace: str | os.PathLike[str] | None = None,
    record: str | None = None,
    source: str = "python",
) -> int:
    """Enqueue *configs* (one params mapping, or a list of them) for *campaign* (a dict
    shaped as a campaign file, or a campaign file's path, as :func:`dse.run` takes it): its
    running controller takes them next (within a second), else its next ``dse run``; each
    runs before the agent's proposals — deduplicated, within the budget and the constraints
    like any proposal — and the agent is told its result. Returns how many configurations
    wait for the campaign now.

    :param workspace: the record's directory (default: the campaign's).
    :param record: a ``postgresql://`` URL, the record (else ``DSE_RECORD``, else the
        campaign's, else the workspace's ``dse.sqlite``).
    :raises ConfigError: a configuration the space or a constraint refuses (nothing is
        enqueued then), or a campaign file that does not load.
    """
    return enqueue_named(campaign, configs, workspace=workspace, record=record,
                         source=source)[1]


def enqueue_named(
    campaign: Mapping[str, Any] | str | os.PathLike[str],
    configs: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    workspace: str | os.PathLike[str] | None = None,
    record: str | None = None,
    source: str = "python",
) -> tuple[str, int]:
    """:func:`enqueue`, also answering the campaign's name."""
    from dse.api._api import as_toml
    from dse.campaign._campaign import campaign_from_dict
    from dse.campaign._campaignfile import read_campaign_file
    from dse.campaign._seeding import enqueued_params
    from dse.record._open import record_url, writer

    if isinstance(campaign, Mapping):
        path, data = None, as_toml(campaign)
    else:
        path = Path(os.fspath(campaign))
        data = read_campaign_file(path)
    built = campaign_from_dict(data, source=path, detect=False,
                               workspace=None if workspace is None else Path(workspace))
    items = [configs] if isinstance(configs, Mapping) else list(configs)
    where = f"{path or '<campaign>'}: enqueue"
    checked = [enqueued_params(item, where + (f"[{i}]" if len(items) > 1 else ""),
                               built.space, built.constraints) for i, item in enumerate(items)]
    store = writer(built.workspace, record_url(record, built.record))
    try:
        store.enqueue(built.name, checked, source, time.time())
        return built.name, len(store.reads.enqueued(built.name))
    finally:
        store.close()
