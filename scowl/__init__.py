"""Scowl feature service (SPEC §1): the ``scowl`` command (``scowl.cli``) and a small library API.

Library API, imported lazily (``import scowl`` does not import pyspark or
the compiler; the first use of a name below imports its module):

* :func:`scowl.training_set` -- the point-in-time training set of one event
  type as a Spark DataFrame (``scowl replay`` on your SparkSession, SPEC §5.8);
* :func:`scowl.training_sets` -- several event types from one read;
* :func:`scowl.to_pandas` -- collect one to pandas with typed times;
* :class:`scowl.TopologyError` -- the ``ValueError`` a topology with errors raises.

All four live in :mod:`scowl.training`; ``docs/notebooks.md`` shows them in use.
"""

from __future__ import annotations

from typing import Any

#: Public name -> the module that defines it (module ``__getattr__``, PEP 562).
_LAZY = {
    "training_set": "scowl.training",
    "training_sets": "scowl.training",
    "to_pandas": "scowl.training",
    "TopologyError": "scowl.training",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    """Import the module of a public name on first use (:data:`_LAZY`) and return the name.

    Raises:
        AttributeError: ``name`` is not a public name of the package (nor a submodule already imported).
    """
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'scowl' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names and the lazy public ones."""
    return sorted({*globals(), *_LAZY})
