"""batchsim's layers, read from its source: no import circle, no arrow running back up, no
module taking another's private names.

Every module of ``batchsim`` is parsed (``ast``; nothing is imported, so this takes a few
tenths of a second) and every import statement is an arrow from its module to the module it
names: at the top of a module, inside a function (run later, but a dependency all the same)
or under ``if TYPE_CHECKING:`` (never run, but the module still knows the other). Importing
``a.b.c`` also runs the packages ``a`` and ``a.b``; those implied arrows are not counted.

The layers, lowest first: ``core`` (what both clocks run), ``sim`` (the simulated clock),
``machine`` (hardware, models and their bills), ``teach`` (lessons and scenarios), ``cli``.
A module may import its own layer and those below, never one above; nothing in batchsim
imports torch (or what brings it) or realrun. realrun is read the same way, with layers of its own
(``REALRUN_RANKS``): ``engine``, ``clock``, ``timing``, ``judge``, ``reference``, ``classroom``,
``cli``.

What breaks a rule today in files owned by other developers is listed in the allow-lists
below, each with its reason: the test passes now, and the lists are what is left to do. An
entry that no longer matches anything fails the test, so the lists only shrink.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "batchsim"

#: Each layer's rank: a module may import only layers of its rank or below.
#: ``textbook`` is the simulated clock written to be read (``batchsim.textbook``): sim's rank.
RANKS = {"core": 0, "sim": 1, "textbook": 1, "machine": 2, "teach": 3, "cli": 4}
#: Parts of batchsim outside the layers: the package's own front door (it re-exports every layer)
#: and ``python -m batchsim``. ``traces`` (the shipped trace files and their own fetch command,
#: which borrows the CLI's parser while teach reads the traces) has no rank yet: its owner's to
#: give.
UNRANKED = {"", "__main__", "traces"}
#: Packages batchsim never imports: realrun sits on top of it, and torch is realrun's (vLLM and
#: transformers bring torch with them).
FORBIDDEN_ROOTS = {"realrun", "torch", "transformers", "vllm"}


#: Arrows (importer, imported) allowed to close a circle or to run back up, with the reason.
ALLOWED_ARROWS: dict[tuple[str, str], str] = {}

#: realrun's layers, lowest first, each a subpackage: ``engine`` (the model and its forward passes),
#: ``clock`` (the wall-clock driver), ``timing`` (the passes timed: profile, canary, drift),
#: ``judge`` (predicted against measured, and the verdicts), ``reference`` (what our engine is held
#: against: Hugging Face, vLLM, the course's shipped reference), ``classroom`` (serve, load, the
#: lesson), ``cli``.
REALRUN_RANKS = {
    "engine": 0,
    "clock": 1,
    "timing": 2,
    "judge": 3,
    "reference": 4,
    "classroom": 5,
    "cli": 6,
}
#: realrun's only modules outside the layers: its front door (each public name imported from its
#: layer when first used) and ``python -m realrun``.
REALRUN_UNRANKED = {"", "__main__"}
#: realrun's arrows allowed to close a circle between its layers or to run back up, with the reason.
REALRUN_ALLOWED_ARROWS: dict[tuple[str, str], str] = {}
#: realrun's private names allowed, as above.
REALRUN_ALLOWED_PRIVATE: dict[tuple[str, str, str], str] = {}

#: Private names taken from another module: (importer, module, name), with the reason.
ALLOWED_PRIVATE: dict[tuple[str, str, str], str] = {}


@dataclass(frozen=True)
class Arrow:
    """One import: ``source`` imports ``target`` at ``line``, at the top of the module, in a
    function, or for type hints only."""

    source: str
    target: str
    line: int
    kind: str  # "module", "function" or "type-only"

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line}, {self.kind})"


def modules(package: str = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """Every module of the package by dotted name: its file, and whether it is a package's
    __init__."""
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


# Import statements sit only among statements: the walk skips expressions, most of a tree's nodes.
_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)


def _imports(tree: ast.Module):
    """(node, kind) for every import statement of a module, walking into functions, classes and
    blocks."""
    todo = [(node, "module") for node in tree.body]
    while todo:
        node, kind = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, kind
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            kind = "function" if kind == "module" else kind
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend((n, "type-only") for n in node.body)
            todo.extend((n, kind) for n in node.orelse)
            continue
        todo.extend((n, kind) for n in ast.iter_child_nodes(node) if isinstance(n, _BLOCKS))


@dataclass
class Graph:
    arrows: list[Arrow]
    private: list[tuple[str, str, str, int]]  # (importer, module, name, line)
    forbidden: list[tuple[str, str, int]]  # (importer, what it imports, line)


@functools.lru_cache(maxsize=2)
def read_graph(package: str = PACKAGE) -> Graph:
    """Every arrow, private name and forbidden import of a package (batchsim unless told), read once
    for all the tests; an arrow into another package is not followed (realrun's into batchsim)."""
    mods = modules(package)

    def owner(name: str) -> str | None:
        """The batchsim module a dotted name lives in (the longest prefix that is one)."""
        while name not in mods and "." in name:
            name = name.rsplit(".", 1)[0]
        return name if name in mods else None

    graph = Graph([], [], [])
    for mod, (path, is_package) in mods.items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, str(path))
        here = mod.split(".") if is_package else mod.split(".")[:-1]
        bound: dict[str, str] = {}  # local names bound to batchsim modules (for ``mod._private``)
        for node, kind in _imports(tree):
            # (module, name taken from it or None, the local name bound to that module or None)
            named: list[tuple[str, str | None, str | None]] = []
            # ``import a.b`` binds ``a``, not ``a.b``; ``import a.b as m`` binds it
            if isinstance(node, ast.Import):
                named = [(a.name, None, a.asname) for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = here[: len(here) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                for a in node.names:
                    full = f"{base}.{a.name}"
                    named.append(
                        (full, None, a.asname or a.name)
                        if full in mods
                        else (base, a.name, a.asname or a.name)
                    )
            for target, name, local in named:
                root = target.split(".")[0]
                if root in FORBIDDEN_ROOTS:
                    graph.forbidden.append((mod, target, node.lineno))
                if root != package:
                    continue
                t = owner(target)
                if t is None:
                    continue
                if name is None and local is not None:
                    bound[local] = t
                if t != mod:
                    graph.arrows.append(Arrow(mod, t, node.lineno, kind))
                    if name is not None and _private(name):
                        graph.private.append((mod, t, name, node.lineno))
        # ``from . import grid2d; grid2d._plain(...)``: a private name all the same. The text is
        # searched first: walking every expression of every module would cost most of this test's
        # time.
        if any(re.search(rf"\b{re.escape(local)}\._", text) for local in bound):
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in bound
                    and _private(node.attr)
                    and bound[node.value.id] != mod
                ):
                    graph.private.append((mod, bound[node.value.id], node.attr, node.lineno))
    return graph


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def circles(arrows: list[Arrow]) -> list[list[Arrow]]:
    """One shortest circle through each group of modules that import one another (Tarjan's strongly
    connected components, then a breadth-first search inside each)."""
    out: dict[str, dict[str, Arrow]] = {}
    for a in arrows:
        out.setdefault(a.source, {}).setdefault(a.target, a)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(
        v: str,
    ) -> None:  # recursion is fine: the import graph is a few hundred modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in out.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(out):
        if v not in index:
            visit(v)
    return [_shortest_circle(group[0], set(group), out) for group in groups]


def _shortest_circle(
    start: str, members: set[str], out: dict[str, dict[str, Arrow]]
) -> list[Arrow]:
    """The fewest arrows from ``start`` back to itself inside one group (breadth first)."""
    # the arrow by which each module was first reached
    came: dict[str, Arrow | None] = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w, a in out.get(v, {}).items():
                if w == start:
                    chain = [a]
                    while came[chain[0].source] is not None:
                        chain.insert(0, came[chain[0].source])
                    return chain
                if w in members and w not in came:
                    came[w] = a
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(
        f"{start}: a group of modules that import one another has a circle through each"
    )


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_part_of_batchsim_has_a_layer():
    unknown = sorted({layer(m) for m in modules()} - set(RANKS) - UNRANKED)
    assert not unknown, (
        f"give these parts of batchsim a rank in RANKS (or a reason in UNRANKED): {unknown}"
    )


def test_no_import_circle():
    graph = read_graph()
    arrows = [a for a in graph.arrows if (a.source, a.target) not in ALLOWED_ARROWS]
    found = circles(arrows)
    assert not found, "import circles among batchsim's modules:\n" + "\n".join(
        "  " + "\n    ".join(str(a) for a in chain) for chain in found
    )


def test_no_arrow_runs_back_up():
    graph = read_graph()
    up = [
        a
        for a in graph.arrows
        if layer(a.source) in RANKS
        and layer(a.target) in RANKS
        and RANKS[layer(a.target)] > RANKS[layer(a.source)]
        and (a.source, a.target) not in ALLOWED_ARROWS
    ]
    assert not up, "arrows running back up (a lower layer importing a higher one):\n" + "\n".join(
        f"  {a}: {layer(a.source)} must not import {layer(a.target)}" for a in up
    )
    assert not graph.forbidden, (
        "batchsim imports what it must not (torch is realrun's; realrun sits on top):\n"
        + "\n".join(f"  {m} -> {t} (line {n})" for m, t, n in graph.forbidden)
    )


def test_no_module_takes_another_modules_private_names():
    graph = read_graph()
    taken = [p for p in graph.private if p[:3] not in ALLOWED_PRIVATE]
    assert not taken, (
        "private names taken from another module (make them public, or move them):\n"
        + "\n".join(f"  {m} takes {t}.{name} (line {n})" for m, t, name, n in taken)
    )


def test_the_allow_lists_hold_only_what_still_happens():
    graph = read_graph()
    arrows = {(a.source, a.target) for a in graph.arrows}
    private = {p[:3] for p in graph.private}
    stale = [f"  ALLOWED_ARROWS {k}" for k in ALLOWED_ARROWS if k not in arrows]
    stale += [f"  ALLOWED_PRIVATE {k}" for k in ALLOWED_PRIVATE if k not in private]
    assert not stale, "fixed, so take them off the allow-list:\n" + "\n".join(stale)
    assert all(reason for reason in {**ALLOWED_ARROWS, **ALLOWED_PRIVATE}.values())


def test_realrun_has_no_circle_and_takes_no_private_name():
    graph = read_graph("realrun")
    found = circles(graph.arrows)
    assert not found, "import circles among realrun's modules:\n" + "\n".join(
        "  " + "\n    ".join(str(a) for a in chain) for chain in found
    )
    taken = [p for p in graph.private if p[:3] not in REALRUN_ALLOWED_PRIVATE]
    assert not taken, (
        "realrun: private names taken from another module (make them public, or move them):\n"
        + "\n".join(f"  {m} takes {t}.{name} (line {n})" for m, t, name, n in taken)
    )
    stale = [k for k in REALRUN_ALLOWED_PRIVATE if k not in {p[:3] for p in graph.private}]
    assert not stale, f"fixed, so take them off REALRUN_ALLOWED_PRIVATE: {stale}"


def test_every_part_of_realrun_has_a_layer():
    unknown = sorted({layer(m) for m in modules("realrun")} - set(REALRUN_RANKS) - REALRUN_UNRANKED)
    assert not unknown, (
        f"put these realrun modules in a layer (a subpackage ranked in REALRUN_RANKS): {unknown}"
    )


def _up(arrows: list[Arrow], ranks: dict[str, int]) -> list[Arrow]:
    """The arrows from a ranked layer into a higher one."""
    return [
        a
        for a in arrows
        if layer(a.source) in ranks
        and layer(a.target) in ranks
        and ranks[layer(a.target)] > ranks[layer(a.source)]
    ]


def _between_layers(arrows: list[Arrow]) -> list[Arrow]:
    """The arrows as from layer to layer (one per pair of layers), for circles among the layers
    themselves."""
    return [
        Arrow(f"realrun.{layer(a.source)}", f"realrun.{layer(a.target)}", a.line, f"{a.kind}: {a}")
        for a in arrows
        if layer(a.source) != layer(a.target)
        and layer(a.source) in REALRUN_RANKS
        and layer(a.target) in REALRUN_RANKS
    ]


def test_realrun_layers_have_no_circle_and_no_arrow_back_up():
    graph = read_graph("realrun")
    arrows = [a for a in graph.arrows if (a.source, a.target) not in REALRUN_ALLOWED_ARROWS]
    found = circles(_between_layers(arrows))
    assert not found, "import circles among realrun's layers:\n" + "\n".join(
        "  " + "\n    ".join(a.kind for a in chain) for chain in found
    )
    up = _up(arrows, REALRUN_RANKS)
    assert not up, (
        "realrun: arrows running back up (a lower layer importing a higher one):\n"
        + "\n".join(f"  {a}: {layer(a.source)} must not import {layer(a.target)}" for a in up)
    )
    stale = [
        k for k in REALRUN_ALLOWED_ARROWS if k not in {(a.source, a.target) for a in graph.arrows}
    ]
    assert not stale, f"fixed, so take them off REALRUN_ALLOWED_ARROWS: {stale}"
    assert all(REALRUN_ALLOWED_ARROWS.values())


def test_the_checks_see_a_circle_an_arrow_back_up_and_a_private_name():
    # The checks themselves, on a made-up graph: a test that cannot fail is a defect.
    a, b, c = "batchsim.core.a", "batchsim.core.b", "batchsim.sim.c"
    chain = [Arrow(a, b, 1, "module"), Arrow(b, c, 2, "function"), Arrow(c, a, 3, "type-only")]
    (found,) = circles(chain + [Arrow(a, "batchsim.core.d", 4, "module")])
    assert [x.source for x in found] == [a, b, c] and found[-1].target == a
    assert "batchsim.core.b -> batchsim.sim.c (line 2, function)" in [str(x) for x in found]
    assert circles(chain[:2]) == []
    assert RANKS[layer(c)] > RANKS[layer(b)]
    assert _private("_get") and not _private("__all__") and not _private("get")
    # realrun's layers: an engine importing the CLI runs up, and two layers importing each other
    # close a circle.
    e, k = "realrun.engine.model", "realrun.cli.run"
    assert _up([Arrow(e, k, 1, "function")], REALRUN_RANKS) and not _up(
        [Arrow(k, e, 1, "module")], REALRUN_RANKS
    )
    (ring,) = circles(
        _between_layers(
            [Arrow(e, k, 1, "function"), Arrow(k, "realrun.engine.inputs", 2, "module")]
        )
    )
    assert [x.source for x in ring] in (
        ["realrun.engine", "realrun.cli"],
        ["realrun.cli", "realrun.engine"],
    )
