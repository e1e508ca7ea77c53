"""``python -m scowl`` runs the ``scowl`` command."""

from scowl.cli import main

main()
