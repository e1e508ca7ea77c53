"""One module per ``scowl`` command (SPEC §6), registered on the app by ``scowl.cli``.

Each module defines one function named after its command, whose typer
parameters are the command's arguments and options and whose docstring is
its ``--help``. Command modules import the shared helpers (``scowl.common``,
``scowl.progress``, ``scowl.signals``), never ``scowl.cli``.

================ ===================================================
module           command
================ ===================================================
``check``        ``scowl check DIR``: compile, print diagnostics
``plan``         ``scowl plan DIR [--json]``: the compiled plan
``explain``      ``scowl explain DIR FEATURE``: state, lineage
``backfill``     ``scowl backfill DIR --events PATH…``: Spark batch
``serve``        ``scowl serve DIR``: the event API
``stream``       ``scowl stream DIR --source …``: Structured Streaming
``replay``       ``scowl replay DIR --events PATH… --out DIR``
``status``       ``scowl status DIR``: coverage, gaps, size
``demo``         ``scowl demo``: the main job on nycflights13
``ui``           ``scowl ui [DIR]``: the feature explorer
================ ===================================================
"""
