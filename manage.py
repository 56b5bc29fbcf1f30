#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import sys


def main() -> None:
    from django.core.management import execute_from_command_line

    from tiffin.env import settings_load_or_exit

    # An environment value the settings refuse (a missing SECRET_KEY, a malformed number)
    # stops the process with its message alone, exit status 1.
    settings_load_or_exit()
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
