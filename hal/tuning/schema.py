"""Kernel parameter schemas: named parameters, allowed values, constraints, defaults.

A backend declares one :class:`KernelSchema` per kernel family it launches. The
tuning tables store parameter sets by name; every set they hand out is checked
against the schema and the current device first (MIOpen's
``IsValidPerformanceConfig``), so a table can never serve a config nobody checked.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hal.backends.base import DeviceInfo

#: a constraint returns None when ``params`` suit ``device``, else the reason they do not.
Constraint = Callable[[Mapping[str, int], "DeviceInfo"], "str | None"]


@dataclass(frozen=True)
class Param:
    """One tunable kernel parameter, passed to the kernel as ``-D NAME=value``."""

    name: str
    values: tuple[int, ...]
    default: int
    doc: str = ""
    #: allowed values the tuner never offers (served only where a table entry or a caller names
    #: them): they give up a guarantee the others keep, such as a precision bound, which a
    #: timing cannot weigh
    untuned: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.default not in self.values:
            raise ValueError(f"{self.name}: default {self.default} not among {self.values}")
        if self.default in self.untuned or not set(self.untuned) <= set(self.values):
            raise ValueError(f"{self.name}: untuned values {self.untuned} must be allowed ones other than the default")


@dataclass(frozen=True)
class KernelSchema:
    """The tunable parameters of one kernel family on one backend."""

    backend: str
    kernel: str
    params: tuple[Param, ...]
    constraints: tuple[Constraint, ...] = field(default=())
    #: maps a parameter set to the one that builds the same kernel (parameters that only
    #: matter for some value of another reset to their defaults); the tuner then never
    #: measures one kernel twice under two names
    canonical: Callable[[dict[str, int]], dict[str, int]] | None = None

    def defaults(self) -> dict[str, int]:
        """The default parameter set (must be valid on every device the backend runs)."""
        return {p.name: p.default for p in self.params}

    def validate(self, params: Mapping[str, int], device: DeviceInfo) -> str | None:
        """None when ``params`` is a complete, allowed set valid on ``device``; else why not."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(params) - set(known))
        if unknown:
            return f"unknown parameters {unknown}"
        for name, spec in known.items():
            if name not in params:
                return f"missing parameter {name}"
            value = params[name]
            if value not in spec.values:
                return f"{name}={value} not among the allowed values {spec.values}"
        for constraint in self.constraints:
            reason = constraint(params, device)
            if reason:
                return reason
        return None

    def size(self) -> int:
        """How many combinations ``candidates`` would enumerate (before ``canonical``'s merging)."""
        return math.prod(len([v for v in p.values if v not in p.untuned]) for p in self.params)

    def draw(
        self, rng: random.Random, count: int, accept: Callable[[dict[str, int]], bool],
        vary: Collection[str] | None = None,
    ) -> list[dict[str, int]]:
        """Up to ``count`` distinct candidates (canonical where the schema merges them), each a uniform
        random pick among every parameter's tuned values (only those named in ``vary``, where given:
        the others keep their defaults), kept where ``accept`` says so; at most 64 draws per wanted
        one. For spaces too large to enumerate: CUDA's conv2d has about 3e19 combinations, its
        batch_norm 5e6 (15 s and gigabytes as a list)."""
        tuned = [(p.name, [v for v in p.values if v not in p.untuned] if vary is None or p.name in vary
                  else [p.default]) for p in self.params]
        found: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}
        for _ in range(64 * count):
            if len(found) >= count:
                break
            combo = {name: rng.choice(values) for name, values in tuned}
            if self.canonical is not None:
                combo = self.canonical(combo)
            key = tuple(sorted(combo.items()))
            if key not in found and accept(combo):
                found[key] = combo
        return list(found.values())

    def candidates(self) -> list[dict[str, int]]:
        """Every combination of allowed values other than untuned ones, one per distinct kernel (the
        tuner filters by constraints)."""
        combos: list[dict[str, int]] = [{}]
        for p in self.params:
            combos = [{**c, p.name: v} for c in combos for v in p.values if v not in p.untuned]
        if self.canonical is None:
            return combos
        unique: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}
        for c in combos:
            canon = self.canonical(c)
            unique.setdefault(tuple(sorted(canon.items())), canon)
        return list(unique.values())
