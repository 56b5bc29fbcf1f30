"""Settings for the test suite: the project's own, with a key for the tests.

The suite runs with DEBUG off, as production does, and the settings then refuse to start
without a SECRET_KEY. This one is set in the environment before they load, unless one is
given, so the processes the scenarios start (which inherit the environment) share it.
"""

from __future__ import annotations

import os

os.environ.setdefault("SECRET_KEY", "tiffin-test-suite-only-key-never-used-outside-the-tests-7c1d9e4b2a")

from tiffin.settings import *  # noqa: F403
