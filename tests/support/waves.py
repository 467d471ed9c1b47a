"""Driving an agent directly (``propose``, then ``observe``) in waves, as the engine does in
``waves`` mode, without the engine: for tests of an agent's search."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dse

if TYPE_CHECKING:
    from collections.abc import Callable


def completed(p: dict[str, Any], number: int, loss: float) -> dse.Observation:
    """Trial *number* with params *p* completed with *loss*."""
    return dse.Observation(params=p, status=dse.TrialStatus.COMPLETED, score=loss,
                           metrics={"loss": loss}, trial_number=number)


def run_waves(agent: dse.Agent, space: dse.Space, loss: Callable[[dict[str, Any]], float | None],
              *, trials: int, p: int) -> list[tuple[dict[str, Any], float | None]]:
    """Drive *agent* in waves of *p* until *trials* have run; a loss of ``None`` is a failed
    trial. Returns every (params, loss) in order."""
    seen: list[tuple[dict[str, Any], float | None]] = []
    while len(seen) < trials:
        batch = [space.coerce(x) for x in agent.propose(p, [])]
        assert batch
        obs = []
        for params in batch:
            value = loss(params)
            number = len(seen) + 1
            seen.append((params, value))
            if value is None:
                obs.append(dse.Observation(params=params, status=dse.TrialStatus.FAILED,
                                           trial_number=number,
                                           failure=dse.FailureClass.NONZERO_EXIT))
            else:
                obs.append(completed(params, number, value))
        agent.observe(obs)
    return seen
