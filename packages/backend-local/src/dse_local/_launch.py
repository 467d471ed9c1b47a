"""Entry script of the attempt wrapper (see ``_wrapper.py``); kept tiny so Python caches
the wrapper's compiled code instead of compiling a script on every start.

``_launch.py --serve`` runs the wrapper server; ``_launch.py DIR ... -- ARGV`` one wrapper."""

import sys

from _wrapper import main, serve  # type: ignore[import-not-found]

sys.exit(serve() if sys.argv[1:] == ["--serve"] else main(sys.argv[1:]))
