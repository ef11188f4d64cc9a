"""Matrix expansion: a pure function from a validated matrix to frozen cells.

Cell ids are `<stack>/<model>/<config>`: stable across runs (they are the keys that `compare`
matches on) and readable in a terminal. Cells that share a stack share an image and are grouped,
so each image is built once.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass

from harness.errors import ConfigError
from harness.matrix.load import Matrix
from harness.matrix.model import Config, Model, Quantization, Stack
from harness.matrix.pairs import pair_cells
from harness.matrix.select import SelectionError, compile_expression

MAX_CELLS = 20_000  # a real matrix has tens of cells; a 4 MiB file could name billions


@dataclass(frozen=True)
class Cell:
    id: str
    stack_name: str
    model_name: str
    config_name: str
    stack: Stack
    model: Model
    config: Config
    compare_with: str | None = None  # NVFP4: the FP8 cell it is judged against (harness.matrix.pairs)

    @property
    def quantization(self) -> Quantization:
        return self.model.quantization

    @property
    def served_name(self) -> str:
        return self.model.served_name or self.model_name


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def expand(matrix: Matrix, k: str | None = None) -> list[Cell]:
    """All cells of the matrix, in file order (stacks, then models, then configs), filtered by -k."""
    spec = matrix.spec
    rule = spec.cells
    try:
        keep = compile_expression(k) if k else (lambda _s: True)
    except SelectionError as exc:
        raise ConfigError(f"-k: {exc}", hint="use words joined by and/or/not, e.g. -k 'nvfp4 and not marlin'") from None
    if (product := len(spec.stacks) * len(spec.models) * len(spec.configs)) > MAX_CELLS:
        raise ConfigError(f"{matrix.path}: {len(spec.stacks)} stacks x {len(spec.models)} models x "
                          f"{len(spec.configs)} configs is {product} cells, over {MAX_CELLS}",
                          hint="split the matrix: a run of that many cells would take years")
    cells: list[Cell] = []
    for sname, stack in spec.stacks.items():
        if not _matches(sname, rule.stacks):
            continue
        for mname, model in spec.models.items():
            if not _matches(mname, rule.models):
                continue
            for cname, config in spec.configs.items():
                if not _matches(cname, rule.configs):
                    continue
                triple = (sname, mname, cname)
                if any(_hit(f, triple) for f in rule.exclude):
                    continue
                if rule.only and not any(_hit(f, triple) for f in rule.only):
                    continue
                cell_id = f"{sname}/{mname}/{cname}"
                if keep(cell_id):
                    cells.append(Cell(cell_id, sname, mname, cname, stack, model, config))
    pairs = pair_cells(cells, spec.models)
    return [dataclasses.replace(c, compare_with=pairs.get(c.id)) for c in cells]


def _hit(flt, triple: tuple[str, str, str]) -> bool:
    s, m, c = triple
    return (fnmatch.fnmatchcase(s, flt.stack) and fnmatch.fnmatchcase(m, flt.model)
            and fnmatch.fnmatchcase(c, flt.config))


def group_by_stack(cells: list[Cell]) -> dict[str, list[Cell]]:
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.stack_name, []).append(cell)
    return groups
