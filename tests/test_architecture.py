"""The package graph: every package imports only the packages below it, and none of another's private names.

    clikit records wire           settings→CLI; the contracts (call record, wire formats): import no project package
    lm  sandboxes  rehearsal      the model layer (target, engine, taps; its CPU stand-in server); the Docker sandboxes; the scripted brain
    serving                       the real engine (vLLM): its environment, launch flags and target checks
    proxy    trainer              the recording relay; the drafter's data, model, training and evaluation
    factory                       the job that runs everything

docs/architecture.md draws it. grimp reads every import in the source, function-level ones included, so an
import hidden inside a function to dodge a cycle fails here as well.
"""

from __future__ import annotations

import grimp
import pytest

PACKAGES = (
    "clikit",
    "records",
    "wire",
    "lm",
    "rehearsal",
    "serving",
    "sandboxes",
    "proxy",
    "trainer",
    "factory",
)
ALLOWED = {
    "clikit": set(),
    "records": set(),
    "wire": set(),
    "lm": {"clikit", "records", "wire"},
    "sandboxes": {"clikit", "records"},
    "rehearsal": {"clikit", "records"},
    "proxy": {"clikit", "records", "wire"},
    "serving": {"clikit", "lm"},
    "trainer": {"clikit", "records", "wire", "lm", "serving"},
    "factory": {"clikit", "records", "wire", "sandboxes", "serving", "proxy"},
}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, include_external_packages=False)


def _imports(graph: grimp.ImportGraph, importer: str, imported: str) -> list[str]:
    found = graph.find_matching_direct_imports(import_expression=f"{importer}.** -> {imported}.**")
    found += graph.find_matching_direct_imports(import_expression=f"{importer} -> {imported}.**")
    return sorted(f"{i['importer']} -> {i['imported']}" for i in found)


@pytest.mark.parametrize("importer", PACKAGES)
def test_packages_import_only_downward(graph: grimp.ImportGraph, importer: str) -> None:
    wrong = [
        line
        for imported in PACKAGES
        if imported != importer and imported not in ALLOWED[importer]
        for line in _imports(graph, importer, imported)
    ]
    assert wrong == [], f"{importer} may import only {sorted(ALLOWED[importer])}"


def test_no_private_module_of_another_package_is_imported(graph: grimp.ImportGraph) -> None:
    wrong = []
    for importer in PACKAGES:
        for imported in ALLOWED[importer]:
            for line in _imports(graph, importer, imported):
                target = line.split(" -> ")[1]
                if any(part.startswith("_") and part != "__init__" for part in target.split(".")):
                    wrong.append(line)
    assert wrong == []


def test_no_cycles_between_packages(graph: grimp.ImportGraph) -> None:
    for a in PACKAGES:
        for b in ALLOWED[a]:
            assert a not in ALLOWED[b], f"{a} and {b} may import each other"
            assert not graph.chain_exists(importer=b, imported=a, as_packages=True), f"{b} reaches {a}"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    group = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        group.append(w)
                        if w == v:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


def test_no_cycles_between_modules(graph: grimp.ImportGraph) -> None:
    """No two modules reach each other, even through imports only type checkers read (a class cut in two
    across files was proxy.relay <-> proxy.forward)."""
    edges = {m: set(graph.find_modules_directly_imported_by(m)) & graph.modules for m in graph.modules}
    assert _cycles(edges) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the check works


def test_the_model_layer_never_imports_its_stand_in_server(graph: grimp.ImportGraph) -> None:
    """`lm` is the real model layer the trainer and the gate stand on; `lm.standin` (the CPU server standing
    in for vLLM) is built on it, never the other way round."""
    found = graph.find_matching_direct_imports(import_expression="lm.* -> lm.standin.**")
    found += graph.find_matching_direct_imports(import_expression="lm -> lm.standin.**")
    assert [
        f"{i['importer']} -> {i['imported']}" for i in found if not i["importer"].startswith("lm.standin")
    ] == []
