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


def tuple_index(e: object, size: int) -> int:
    """Return the constant component index of ``x[k]`` on a tuple of ``size``.

    Args:
        e: the ``index`` expression (``compiler.plan.Expr``; ``args[1]`` the index).
        size: number of tuple components.

    Returns:
        ``k`` (``0 <= k < size``; the checker already turned negative constants around).

    Raises:
        UnsupportedError: the index is not an int literal in range (shared by
            both generators, so they refuse the same nodes).
    """
    idx = e.args[1]  # type: ignore[attr-defined]
    k = idx.value if idx.kind == "lit" else None
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < size:
        raise UnsupportedError(f"a tuple index must be an int literal 0 to {size - 1}", e)
    return k
