from __future__ import annotations

import sys

from dse._cli import main

sys.exit(main())
