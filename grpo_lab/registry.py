"""One registry per axis: a name -> small pure function map that refuses duplicates
and fails on an unknown name with the list of valid ones."""

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """Functions of one axis (advantage, surrogate, ...) keyed by their paper name."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._fns: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def add(fn: F) -> F:
            if name in self._fns:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            if not (fn.__doc__ or "").strip():
                raise ValueError(f"{self.kind} {name!r} needs a docstring saying how it departs from GRPO")
            self._fns[name] = fn
            return fn

        return add

    def get(self, name: str) -> F:
        try:
            return self._fns[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; valid: {', '.join(self.names())}") from None

    def names(self) -> list[str]:
        return list(self._fns)

    def __contains__(self, name: object) -> bool:
        return name in self._fns

    def __iter__(self) -> Iterator[str]:
        return iter(self._fns)

    def __len__(self) -> int:
        return len(self._fns)
