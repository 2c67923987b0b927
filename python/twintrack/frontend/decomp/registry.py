"""The one registry of the frontend's decompositions.

Each module of this package is a family of entries (scans, sorts, linear
algebra, ...) and holds one `Family`: an entry is registered with
`@FAMILY.register(*ops)`, or with `FAMILY.add(op, fn)` where a function
builds it (one per op of a list).

An entry may decline a call by returning NotImplemented (an integer input
where only floats need fixing, a dtype torch-mlir lowers right). The table
then runs what it held for the op before: the entry of an earlier family,
or of the core table (`falling_back`). That is the only way entries
combine, and `decomp/__init__.py` fixes the order of the families.
"""

from __future__ import annotations

from typing import Callable


def falling_back(decomposition: Callable, previous: Callable | None) -> Callable:
    """`decomposition`, or where it declines (NotImplemented) `previous`, if any."""
    if previous is None:
        return decomposition

    def chained(*args, **kwargs):
        result = decomposition(*args, **kwargs)
        return previous(*args, **kwargs) if result is NotImplemented else result
    return chained


class Family:
    """The entries of one family, by op."""

    def __init__(self, name: str, entries: dict | None = None):
        """`entries`: op -> function, each added as by `add`."""
        self.name = name
        self.entries: dict = {}
        for op, decomposition in (entries or {}).items():
            self.add(op, decomposition)

    def register(self, *ops):
        """Decorator: the function is the entry of each of `ops`."""
        def decorate(fn):
            for op in ops:
                self.add(op, fn)
            return fn
        return decorate

    def add(self, op, decomposition: Callable, *, first: bool = False) -> None:
        """`decomposition` as the entry of `op`. With `first`, an entry the
        family already holds for `op` stays, behind it: it runs where
        `decomposition` declines. Without, a second entry is an error."""
        if op in self.entries and not first:
            raise ValueError(f"{self.name}: a second entry for {op} (add it with first=True to chain the two)")
        self.entries[op] = falling_back(decomposition, self.entries.get(op))

    def over(self, table: dict) -> dict:
        """The family's entries for the table so far, each falling back to
        the table's own entry for its op."""
        return {op: falling_back(fn, table.get(op)) for op, fn in self.entries.items()}
