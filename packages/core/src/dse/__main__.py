from __future__ import annotations

import sys

from dse.cli._cli import main

sys.exit(main())
