"""Settings for the test suite: the project's own, with a key and the development tools.

The suite runs with DEBUG off, as production does, and the settings then refuse to start
without a SECRET_KEY. This one is set in the environment before they load, unless one is
given, so the processes the scenarios start (which inherit the environment) share it.
"""

from __future__ import annotations

import os

os.environ.setdefault("SECRET_KEY", "tiffin-test-suite-only-key-never-used-outside-the-tests-7c1d9e4b2a")
# The development tools (``simulation``, test-only job modules, Redis) with DEBUG off: the
# suite tests them, and the processes it starts inherit the switch with the key.
os.environ.setdefault("TIFFIN_DEVELOPMENT", "1")

from tiffin.settings import *  # noqa: F403
