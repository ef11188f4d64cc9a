"""Which FP8 cell each NVFP4 cell is judged against: the one pairing rule.

A pair is two formats of one model, served by the same stack with the same config. The matrix says
which models are formats of one another: `family` on each (the NVFP4 model meets the one FP8 model
of its family) or `compare_with` on the NVFP4 model (the FP8 model's key). Nothing is guessed from
model names: two different models of one config are never compared. The pairing is computed here,
once, when the matrix is expanded; the plan shows it, each NVFP4 cell's result stores it
(`CellResult.compare_with`), and the judge, the report and `harness compare` read that.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Protocol

from harness.matrix.model import Model
from harness.matrix.problem import problem


def partner_models(models: Mapping[str, Model]) -> tuple[dict[str, str], list[str]]:
    """(NVFP4 model key -> FP8 model key, problems). A model with no partner is absent."""
    fp8_of: defaultdict[str, list[str]] = defaultdict(list)
    for key, m in models.items():
        if m.quantization == "fp8" and m.family:
            fp8_of[m.family].append(key)
    out: dict[str, str] = {}
    problems: list[str] = []
    for key, m in models.items():
        if m.compare_with is not None:
            where = f"models.{key}.compare_with"
            target = models.get(m.compare_with)
            if m.quantization != "nvfp4":
                problems.append(problem(where, f"set on a {m.quantization} model",
                                        "compare_with belongs on the NVFP4 model: move it there, or remove it"))
            elif target is None:
                problems.append(problem(where, f"'{m.compare_with}' is not a model of this matrix",
                                        f"name an FP8 model: {', '.join(k for k, v in models.items() if v.quantization == 'fp8') or 'none is defined'}"))
            elif target.quantization != "fp8":
                problems.append(problem(where, f"'{m.compare_with}' is a {target.quantization} model",
                                        "name the FP8 format of the same model"))
            elif m.family and target.family and m.family != target.family:
                problems.append(problem(where, f"'{m.compare_with}' is of family '{target.family}', "
                                        f"this model of '{m.family}'",
                                        "a pair is one model in two formats: correct the family or compare_with"))
            else:
                out[key] = m.compare_with
            continue
        if m.quantization != "nvfp4" or not m.family:
            continue
        candidates = fp8_of[m.family]
        if len(candidates) > 1:
            problems.append(problem(f"models.{key}.family",
                                    f"family '{m.family}' has {len(candidates)} FP8 models "
                                    f"({', '.join(candidates)}): the pair is ambiguous",
                                    f"set compare_with on {key} to the one it is judged against"))
        elif candidates:
            out[key] = candidates[0]
    return out, problems


class _Cell(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def stack_name(self) -> str: ...
    @property
    def model_name(self) -> str: ...
    @property
    def config_name(self) -> str: ...


def pair_cells(cells: Iterable[_Cell], models: Mapping[str, Model]) -> dict[str, str]:
    """NVFP4 cell id -> the id of the FP8 cell it is judged against, among `cells` (a filtered
    run compares only what it runs). The matrix was validated: partner_models has no problems."""
    partners, _ = partner_models(models)
    cells = list(cells)
    ids = {(c.stack_name, c.model_name, c.config_name): c.id for c in cells}
    out = {}
    for c in cells:
        partner = partners.get(c.model_name)
        fp8 = ids.get((c.stack_name, partner, c.config_name)) if partner else None
        if fp8 is not None:
            out[c.id] = fp8
    return out
