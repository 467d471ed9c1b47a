"""Entry script of the attempt wrapper (see ``_wrapper.py``); kept tiny so Python caches
the wrapper's compiled code instead of compiling a script on every start.

``_launch.py --serve N`` runs the wrapper server (N spare wrappers), ``_launch.py --serve N
--preload ARGV...`` one that imports the Python function *ARGV* runs first (``_warm.py``);
``_launch.py DIR ... -- ARGV`` one wrapper."""

import os
import sys

from _wrapper import main, serve  # type: ignore[import-not-found]

if __name__ == "__main__":  # not when a child of a warm trial imports the main module
    if sys.argv[1:2] == ["--serve"]:
        spares, warm = int(sys.argv[2]), None
        if sys.argv[3:4] == ["--preload"]:
            from _warm import load  # type: ignore[import-not-found]

            warm = load(sys.argv[4:])  # the worker sets sys.argv as a script expects it
            if warm is None:
                os.write(1, b"0\n")  # could not: the controller starts these attempts cold
                os._exit(0)
        serve(spares, warm)
        os._exit(0)  # nothing to flush (it writes with os.write): no interpreter teardown
    sys.exit(main(sys.argv[1:]))
