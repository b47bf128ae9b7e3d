"""The package layout is part of the design: data flows one way, rubric -> judge -> verdicts ->
score -> reward -> trainer, and the folders show it (docs/architecture.md). These tests read the
source (imports inside functions included) and fail when a lower layer imports a higher one, when
packages import each other in a cycle, or when the root fills up with loose modules again."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "rubricrl"

# Lowest first. A package may import only packages listed before it.
LAYERS = [
    "core",          # messages, verdicts, problems, JSONL and file helpers, bundled data paths
    "rubrics",       # the rubric model, checks, loaders, rows
    "llm",           # model specs, the HTTP endpoint client, chat models, llama.cpp, the encoder
    "judges",        # the judge protocol and every judge kind, cache, routing, defences, registry
    "scoring",       # formulas, result records, batch scoring, run summaries
    "judge_tools",   # fitting exemplar models, agreement with human labels, calibration, probes
    "rewards",       # TRL reward functions and row rewards for trainers
    "tactics",       # tactic taxonomies, classifier, novelty reward
    "authoring",     # rubric generation and refinement
    "evaluation",    # eval runs, their summaries, comparisons
    "dialogue",      # simulated users, rollouts, multi-turn GRPO
    "train",         # the GRPO training recipe
    "serve",         # the reward server
    "integrations",  # verl, OpenRLHF, public re-export paths
    "reports",       # HTML views of run, eval, comparison, agreement and simulation files
    "cli",           # the `rubricrl` command
]
MAX_ROOT_MODULES = 4
MAX_MODULE_LINES = 500


def _imports(path: Path) -> set[str]:
    """rubricrl top-level packages a module imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "rubricrl" else [node.module]
        elif isinstance(node, ast.ImportFrom) and node.level:
            pytest.fail(f"{path}: relative import; rubricrl uses absolute imports so a move is a search and replace")
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "rubricrl" and len(parts) > 1 and (PACKAGE / parts[1]).is_dir():
                found.add(parts[1])
    return found


def package_graph() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> the files that import it."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if len(rel.parts) == 1:
            continue  # the root package is the facade that re-exports the public API
        for target in _imports(path) - {rel.parts[0]}:
            graph[rel.parts[0]][target].append(rel.as_posix())
    return graph


def test_every_package_has_a_layer():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(LAYERS), "add the new package to LAYERS and to docs/architecture.md"


def test_no_lower_layer_imports_a_higher_one():
    rank = {name: i for i, name in enumerate(LAYERS)}
    wrong = [f"{src} imports {dst} ({', '.join(files)})" for src, targets in package_graph().items()
             for dst, files in targets.items() if rank[dst] >= rank[src]]
    assert not wrong, "data flows one way (docs/architecture.md):\n" + "\n".join(wrong)


def test_no_import_cycle_between_packages():
    graph = {src: set(targets) for src, targets in package_graph().items()}
    cycles = []

    def visit(node, stack):
        for nxt in sorted(graph.get(node, ())):
            if nxt in stack:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif len(stack) < len(LAYERS):
                visit(nxt, stack + [nxt])

    for start in sorted(graph):
        visit(start, [start])
    assert not cycles, "\n".join(sorted(set(cycles)))


def test_the_layer_check_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from rubricrl.cli import app\n    import rubricrl.judges.base\n")
    assert _imports(module) == {"cli", "judges"}


def test_root_and_module_sizes():
    root = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(root) <= MAX_ROOT_MODULES, root
    long = [f"{p.relative_to(PACKAGE)}: {n}" for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
