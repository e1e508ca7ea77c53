"""Code generators for the scalar expression IR (SPEC §5.10).

One generator per target, both consuming :class:`compiler.plan.Expr`:
:mod:`compiler.codegen.python` (serving) and :mod:`compiler.codegen.spark`
(writer). A generator that cannot express a node raises
:class:`UnsupportedError` at compile time, never at run time.
"""

from __future__ import annotations


class UnsupportedError(Exception):
    """A node a code generator cannot express (raised at compile time).

    Attributes:
        message: what is unsupported and why.
        node: the offending expression node, when known.
    """

    def __init__(self, message: str, node: object = None) -> None:
        super().__init__(message)
        self.message = message
        self.node = node
