"""dse-core's pytest plugin (the ``pytest11`` entry point ``dse``): registers the contract
suites for pytest's assertion rewriting, so a failing contract test shows the values it
compared (``assert '' ... where '' = Agent.version``), not a bare ``AssertionError``.

pytest rewrites the assertions of test modules and conftest files only; a suite imported
from an installed package must be registered before it is imported, which a plugin loaded
by entry point is (pytest loads those before collecting). The suites stay lazy imports of
:mod:`dse.testing`, so this costs pytest's start nothing more than importing ``dse``.
"""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite(
    "dse.testing.contracts", "dse.testing._agent_contract", "dse.testing._backend_contract"
)
