"""Entry script of the attempt wrapper (see ``_wrapper.py``); kept tiny so Python caches
the wrapper's compiled code instead of compiling a script on every start.

``_launch.py --serve N`` runs the wrapper server (N spare wrappers); ``_launch.py DIR ... --
ARGV`` one wrapper."""

import os
import sys

from _wrapper import main, serve  # type: ignore[import-not-found]

if sys.argv[1:2] == ["--serve"]:
    serve(int(sys.argv[2]))
    os._exit(0)  # nothing to flush (it writes with os.write): no interpreter teardown
sys.exit(main(sys.argv[1:]))
