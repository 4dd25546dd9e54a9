"""``python -m privstream ...``: the same entry point as the console script."""

from privstream.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
