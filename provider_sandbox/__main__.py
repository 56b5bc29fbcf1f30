"""``python -m provider_sandbox --port PORT --state PATH``: see ``provider_sandbox.server``."""

from provider_sandbox.server import main

if __name__ == "__main__":
    raise SystemExit(main())
