#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tiffin.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        # Load the settings first: an environment value they refuse (a missing SECRET_KEY,
        # a malformed number) stops the process with its message alone, exit status 1.
        settings.INSTALLED_APPS  # noqa: B018
    except ImproperlyConfigured as exc:
        sys.exit(f"configuration error: {exc}")
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
