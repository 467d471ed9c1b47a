"""What a trial runs with, found where the campaign does not declare it: its code version
(the working directory's git state, or the digest of the files that are its code) and its
dependencies (docs/record.md, "The identity of a result")."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from dse.campaign._code import CodeScan, detect_code_version
from dse.campaign._deps import detect_dependencies

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from dse.campaign._model import EnvironmentConfig


def detect_workload(environment: EnvironmentConfig, *, workspace: Path,
                    data: Sequence[Path] = (), where: str = "environment") -> EnvironmentConfig:
    """*environment* with what it does not declare found: the code version (the working
    directory's git state; outside git, or with ``code`` declared, the digest of the files
    that are its code) and the dependencies (docs/record.md, "The identity of a result").

    :param workspace: the dse workspace: never code, and where file digests are cached.
    :param data: the ``[data]`` paths: data, never code.
    """
    workdir = environment.workdir
    assert workdir is not None
    scan = CodeScan(workdir, spec=environment.code, never=(workspace, *data),
                    cache_dir=workspace, where=where)
    changes: dict[str, Any] = {}
    if environment.code_version is None:
        # A campaign file names its workload's directory: its git state is the code version.
        version = detect_code_version(workdir, exclude=workspace)
        if version is None or environment.code.include:
            files = scan.command(environment.command, shell=environment.shell,
                                 env=environment.env)
            if files is not None:
                version = files.version if version is None else f"{version}+{files.version}"
                changes["code_files"] = files.files
        changes["code_version"] = version
    if environment.dependencies is None and environment.command:
        changes["dependencies"] = detect_dependencies(
            environment.command, shell=environment.shell, env=environment.env,
            workdir=workdir, digests=scan.digests)
        scan.digests.save()
    return dataclasses.replace(environment, **changes)
