"""The campaigns' leases a store holds: each campaign's word in the record that one controller
drives it, on any host (table ``leases``), renewed in a pass's commit, taken over once it
expires, and a commit after a takeover failed whole (fencing)."""

from __future__ import annotations

import secrets
import socket
import time
from typing import TYPE_CHECKING, Any

from dse.model._errors import LeaseLostError, LockedError
from dse.record._batch import dumps
from dse.record.sql._rows import loads

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dse.record.sql._rows import Connection


LEASE_FLOOR_S = 15.0


"""The shortest lease a campaign's controller holds: a controller stalled longer than this
(a machine swapping, a process stopped) loses its campaign to another."""


class Leases:
    """The leases one store holds: campaign -> (token, TTL, when it was last renewed on this
    process's monotonic clock). Its statements run in the store's transactions."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[str, tuple[str, float, float]] = {}

    def campaigns(self) -> list[str]:
        """The campaigns whose lease is held."""
        return list(self._held)

    def take(self, db: Connection, campaign: str, holder: Mapping[str, Any],
             ttl: float) -> str:
        """In a transaction: take *campaign*'s lease for *holder* (refused while another
        controller's is fresh); the new token."""
        token = secrets.token_hex(16)
        found = db.execute("SELECT holder, token, renewed_at, ttl_s, dse_now() FROM leases"
                           " WHERE campaign = ?", (campaign,)).fetchone()
        ours = found is not None and campaign in self._held and found[1] == self._held[campaign][0]
        if (found is not None and not ours
                and float(found[2]) + float(found[3]) >= float(found[4])
                and not gone_here(found[0], me_too=True)):
            raise LockedError(
                f"campaign {campaign!r} is already running: driven by {_holder(found[0])}, as"
                " the record says (its lease, renewed"
                f" {max(float(found[4]) - float(found[2]), 0):.1f} s ago; taken over once not"
                f" renewed for {float(found[3]):.0f} s)")
        db.execute(
            "INSERT INTO leases(campaign, holder, token, renewed_at, ttl_s)"
            " VALUES (?, ?, ?, dse_now(), ?) ON CONFLICT (campaign) DO UPDATE SET"
            " holder = excluded.holder, token = excluded.token,"
            " renewed_at = excluded.renewed_at, ttl_s = excluded.ttl_s",
            (campaign, dumps(dict(holder)), token, ttl))
        return token

    def taken(self, campaign: str, token: str, ttl: float) -> None:
        """*campaign*'s lease is this store's (its transaction committed)."""
        self._held[campaign] = (token, ttl, time.monotonic())

    def drop(self, campaign: str) -> str | None:
        """Forget *campaign*'s lease; its token (``None``: not held)."""
        held = self._held.pop(campaign, None)
        return None if held is None else held[0]

    @staticmethod
    def delete(db: Connection, campaign: str, token: str) -> None:
        """In a transaction: give up the lease of *campaign* that *token* holds."""
        db.execute("DELETE FROM leases WHERE campaign = ? AND token = ?", (campaign, token))

    def due(self) -> list[str]:
        """The leases due a renewal (a quarter of their TTL old)."""
        now = time.monotonic()
        return [c for c, (_, ttl, at) in self._held.items() if now - at >= ttl / 4]

    def renew(self, db: Connection, campaigns: list[str], where: str) -> None:
        """In a commit's transaction: renew each lease of *campaigns*; a lease another
        controller took fails it (:class:`LeaseLostError`): this store stops writing."""
        for campaign in campaigns:
            changed = db.execute(
                "UPDATE leases SET renewed_at = dse_now() WHERE campaign = ? AND token = ?",
                (campaign, self._held[campaign][0])).rowcount
            if changed != 1:
                raise _lost(where, campaign)

    def check(self, db: Connection, where: str) -> None:
        """Raise :class:`LeaseLostError` if another controller took a lease this store held
        (read on a connection of its own, after this store's was lost)."""
        for campaign, (token, _, _) in self._held.items():
            row = db.execute("SELECT token FROM leases WHERE campaign = ?",
                             (campaign,)).fetchone()
            if row is None or row[0] != token:
                raise _lost(where, campaign)

    def shortest(self) -> float | None:
        """The shortest TTL of the leases held (seconds; ``None``: none held)."""
        return min((ttl for _, ttl, _ in self._held.values()), default=None)

    def renewed(self, campaigns: list[str]) -> None:
        """The renewals of *campaigns* committed."""
        now = time.monotonic()
        for campaign in campaigns:
            token, ttl, _ = self._held[campaign]
            self._held[campaign] = (token, ttl, now)

    @staticmethod
    def state(db: Connection, campaign: str) -> bool | None:
        """Whether *campaign*'s lease is fresh (renewed within its TTL, by a controller not
        known to be gone); ``None``: it has none."""
        row = db.execute(
            "SELECT renewed_at + ttl_s >= dse_now(), holder FROM leases WHERE campaign = ?",
            (campaign,)).fetchone()
        return None if row is None else bool(row[0]) and not gone_here(row[1])


def _lost(where: str, campaign: str) -> LeaseLostError:
    return LeaseLostError(
        f"{where}: campaign {campaign!r} was taken over by another controller (this one's"
        " lease expired: it was stopped or stalled longer than its lease); this controller"
        " stops and writes nothing more")


def gone_here(text: str | None, *, me_too: bool = False) -> bool:
    """Whether a lease's holder (JSON) is a controller of this host that is gone (its pid
    ended, or names another process now): this host's fast path, before its lease expires.
    With *me_too*, this very process too (another of its stores, which it left: a new one
    takes the campaign over)."""
    from dse.record._lock import LockHolder

    holder = LockHolder.from_json(text) if text else None
    if holder is None or holder.host != socket.gethostname():
        return False
    me = LockHolder.current()
    return ((me_too and (holder.pid, holder.start_ticks) == (me.pid, me.start_ticks))
            or not holder.is_running())


def _holder(text: str | None) -> str:
    """A lease's holder (JSON: host, pid, started) as a message says it."""
    try:
        holder = loads(text) if text else {}
    except ValueError:
        holder = {}
    if not isinstance(holder, dict):
        return "(unknown)"
    return f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}"
