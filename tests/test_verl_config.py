"""examples/verl against verl's own code, per verl release: the example configs and run_grpo.sh's
overrides composed with hydra on top of the ppo_trainer.yaml of each release, then handed to that
release's own config-reading functions (main_ppo's legacy-key migration where main_ppo runs it, and
verl/trainer/ppo/reward.py's get_custom_reward_fn), and the function they load called like verl's
reward managers call it. No GPU, no Ray, no verl install: each release's wheel is downloaded from
PyPI once (`pip download --no-deps`) and only its config files and those three source files are
kept, in RUBRICRL_TEST_CACHE (default ~/.cache/rubricrl-test)/verl/VERSION. rubricrl ships none of them.

verl 0.5.0-0.7.0 read the top-level `custom_reward_function.*` (examples/verl/config_legacy.yaml);
0.7.1 moved it to `reward.custom_reward_function.*` (config.yaml). 0.7.1 and 0.8.0's main_ppo still
copy the old keys over; 0.9.1's does not, so there they compose and are then ignored."""

from __future__ import annotations

import __future__
import ast
import importlib
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import types
import warnings
import zipfile
from functools import lru_cache, partial
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf, open_dict

from rubricrl.rewards import JudgeFailure

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "verl"
LAYOUT = {"0.5.0": "legacy", "0.6.1": "legacy", "0.7.0": "legacy",  # the last of each minor with the old keys
          "0.7.1": "reward", "0.8.0": "reward", "0.9.1": "reward"}  # the first with the new ones, and the latest
CONFIG = {"legacy": "config_legacy", "reward": "config"}
KEEP = ("verl/trainer/config/", "verl/trainer/main_ppo.py", "verl/trainer/ppo/reward.py",
        "verl/experimental/reward_loop/reward_loop.py", "verl/utils/import_utils.py")
RUBRIC = {"id": "rules-only", "criteria": [
    {"id": "thanks", "text": "Thanks the person.", "weight": 2, "check": {"type": "contains", "any_of": ["thank"]}},
    {"id": "short", "text": "At most 6 words.", "weight": 1, "check": {"type": "length", "unit": "words", "max": 6}},
]}
MODEL_ONLY = {"criteria": [{"id": "warm", "text": "Is warm."}]}  # the rule judge decides nothing: unscored
DOCUMENTED = {  # the command-line overrides docs/scaling.md ("Which verl") gives for each layout
    "reward": ["reward.custom_reward_function.path=pkg://rubricrl.integrations.verl",
               "reward.custom_reward_function.name=compute_score",
               "+reward.custom_reward_function.reward_kwargs.error_policy=zero",
               "reward.reward_manager.name=naive", "reward.num_workers=4"],
    "legacy": ['custom_reward_function.path="$PWD/examples/verl/reward.py"',
               "custom_reward_function.name=compute_score",
               "+custom_reward_function.reward_kwargs.error_policy=zero",
               "reward_model.reward_manager=naive"],
}


@lru_cache(maxsize=None)
def verl_release(version: str) -> Path:
    """A directory holding verl VERSION's config files and the few sources these tests read."""
    cache = Path(os.environ.get("RUBRICRL_TEST_CACHE") or Path.home() / ".cache" / "rubricrl-test") / "verl"
    dest = cache / version
    if (dest / "COMPLETE").is_file():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
               f"verl=={version}", "--dest", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        wheels = list(Path(tmp).glob("verl-*.whl"))
        if done.returncode or not wheels:
            pytest.fail(f"could not download verl {version} from PyPI with `{' '.join(cmd)}`:\n{done.stderr[-2000:]}\n"
                        "These tests read verl's own config files from its wheel: they need PyPI once, "
                        f"then use the copy in {cache}.", pytrace=False)
        staging = Path(tmp) / "files"
        with zipfile.ZipFile(wheels[0]) as wheel:
            for name in wheel.namelist():
                if name.startswith(KEEP):
                    wheel.extract(name, staging)
        (staging / "COMPLETE").write_text(wheels[0].name + "\n")
        try:
            staging.rename(dest)
        except OSError:  # another run got there first
            if not (dest / "COMPLETE").is_file():
                raise
    return dest


def config_dir(version: str) -> Path:
    return verl_release(version) / "verl" / "trainer" / "config"


def compose_example(version: str, name: str, overrides=()):
    """examples/verl/NAME.yaml composed on top of verl VERSION's ppo_trainer.yaml, as
    `main_ppo --config-path examples/verl --config-name NAME OVERRIDES` composes it."""
    with initialize_config_dir(config_dir=str(EXAMPLES), version_base=None):
        return compose(name, overrides=[f"hydra.searchpath=[file://{config_dir(version)}]", *overrides])


def compose_verl(version: str, overrides=()):
    """verl VERSION's own ppo_trainer config with command-line overrides."""
    with initialize_config_dir(config_dir=str(config_dir(version)), version_base=None):
        return compose("ppo_trainer", overrides=list(overrides))


def verl_functions(path: Path, names: set[str], namespace: dict) -> dict:
    """The named top-level functions of a verl source file, defined in `namespace` (without running
    the rest of the module, whose imports need torch and Ray)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in names]
    assert {n.name for n in body} == names, f"{path}: verl renamed {names - {n.name for n in body}}"
    code = compile(ast.Module(body=body, type_ignores=[]), str(path), "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, namespace)
    return namespace


def as_main_ppo_does(version: str, cfg):
    """What verl VERSION's main_ppo does to the composed config before training: runs
    migrate_legacy_reward_impl on it where main_ppo calls it (0.7.1, 0.8.x), nothing otherwise."""
    root = verl_release(version) / "verl"
    main = ast.parse((root / "trainer" / "main_ppo.py").read_text(encoding="utf-8"))
    calls = {n.func.id for n in ast.walk(main) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    if "migrate_legacy_reward_impl" not in calls:
        return cfg
    migrate = verl_functions(root / "experimental" / "reward_loop" / "reward_loop.py",
                             {"migrate_legacy_reward_impl"}, {"open_dict": open_dict})["migrate_legacy_reward_impl"]
    return migrate(cfg)


def verl_reward_fn(version: str, cfg, monkeypatch):
    """verl VERSION's get_custom_reward_fn(cfg): the reward function verl loads, kwargs bound, or None."""
    root = verl_release(version) / "verl"
    utils = importlib.util.spec_from_file_location("verl.utils.import_utils", root / "utils" / "import_utils.py")
    import_utils = importlib.util.module_from_spec(utils)
    utils.loader.exec_module(import_utils)  # stdlib only; 0.7.0+ load pkg:// and file paths with it
    for name, module in (("verl", types.ModuleType("verl")), ("verl.utils", types.ModuleType("verl.utils")),
                         ("verl.utils.import_utils", import_utils)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setitem(sys.modules, "custom_module", None)  # 0.6.x reuses a module loaded before
    namespace = {"os": os, "sys": sys, "importlib": importlib, "inspect": inspect, "partial": partial,
                 "warnings": warnings, "__name__": f"verl_{version}_reward"}
    source = root / "trainer" / "ppo" / "reward.py"
    names = {"get_custom_reward_fn", "_call_with_kwargs"}
    if "_call_with_kwargs_async" in source.read_text(encoding="utf-8"):  # 0.6.0 and later
        names.add("_call_with_kwargs_async")
    return verl_functions(source, names, namespace)["get_custom_reward_fn"](cfg)


def call_like_verl(fn, text: str, rubric: dict) -> dict:
    """One sample, as verl's naive managers and reward loop call the function."""
    extra = {"split": "train", "index": 3, "id": "row-3", "prompt": [{"role": "user", "content": "I did it."}],
             "num_turns": None, "rollout_reward_scores": {}}
    return fn(data_source="rubricrl/rules-only", solution_str=text, ground_truth=json.dumps(rubric), extra_info=extra)


def script_overrides() -> list[str]:
    """The overrides run_grpo.sh passes to main_ppo, with its shell variables filled in."""
    script = (EXAMPLES / "run_grpo.sh").read_text(encoding="utf-8")
    launch = script[script.index("python3 -m verl.trainer.main_ppo"):]
    pairs = re.findall(r"^\s+([\w.+]+)=(\S+?)\s*\\$", launch, flags=re.MULTILINE)
    assert len(pairs) >= 8, launch
    return [f"{k}={v.strip(chr(34)).replace('$DATA', 'data/verl')}" for k, v in pairs]


def leaf_keys(node, prefix=""):
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and key != "reward_kwargs":
            yield from leaf_keys(value, path + ".")
        elif key != "reward_kwargs":
            yield path


@pytest.fixture(autouse=True)
def rules_judge(monkeypatch):
    monkeypatch.setenv("RUBRICRL_JUDGE", "rules")
    monkeypatch.delenv("RUBRICRL_RUBRIC", raising=False)
    monkeypatch.delenv("RUBRICRL_ERROR_POLICY", raising=False)


@pytest.mark.parametrize("version", list(LAYOUT))
def test_example_config_puts_the_reward_where_this_verl_reads_it(version, monkeypatch):
    layout, name = LAYOUT[version], CONFIG[LAYOUT[version]]
    path_override = [f"custom_reward_function.path={EXAMPLES / 'reward.py'}"] if layout == "legacy" else []
    cfg = as_main_ppo_does(version, compose_example(version, name, [*path_override, *script_overrides()]))
    fn = verl_reward_fn(version, cfg, monkeypatch)
    assert fn is not None, f"verl {version} finds no reward function in {name}.yaml"
    # "Thank you!" meets thanks (2) and short (1): 3/3; ten words meet thanks only: 2/3
    assert call_like_verl(fn, "Thank you!", RUBRIC)["score"] == pytest.approx(1.0)
    assert call_like_verl(fn, "Thank you so much, that was really brave of you.", RUBRIC)["score"] == \
        pytest.approx(2 / 3)
    unscored = call_like_verl(fn, "Thank you!", MODEL_ONLY)  # reward_kwargs.error_policy: zero
    assert unscored["score"] == 0.0 and unscored["rubric_scored"] == 0.0
    # reward_kwargs reach the function: an override in the config's own key turns the policy to raise
    key = "reward.custom_reward_function" if layout == "reward" else "custom_reward_function"
    strict = as_main_ppo_does(version, compose_example(version, name, [*path_override,
                                                                       f"{key}.reward_kwargs.error_policy=raise"]))
    with pytest.raises(JudgeFailure, match="sample id='row-3', split='train', index=3"):
        call_like_verl(verl_reward_fn(version, strict, monkeypatch), "Thank you!", MODEL_ONLY)
    if layout == "reward":
        assert cfg.reward.custom_reward_function.path == "pkg://rubricrl.integrations.verl"
        assert cfg.reward.num_workers == 4 and cfg.reward.reward_manager.name == "naive"


@pytest.mark.parametrize("version", list(LAYOUT))
def test_every_key_the_example_sets_is_in_this_verls_schema(version):
    """A hydra config file may add keys verl does not have (they compose silently and do nothing):
    every key our example sets must already be in verl's own config, except reward_kwargs (free-form,
    passed to the function). run_grpo.sh's overrides would fail to compose otherwise; checked above."""
    name = CONFIG[LAYOUT[version]]
    ours = OmegaConf.to_container(OmegaConf.load(EXAMPLES / f"{name}.yaml"))
    keys = list(leaf_keys({k: v for k, v in ours.items() if k not in ("hydra", "defaults")}))
    assert "data.reward_fn_key" in keys and len(keys) >= 8
    base = compose_verl(version)
    missing = [k for k in keys if OmegaConf.select(base, k, default=KeyError) is KeyError]
    assert missing == [], f"verl {version} has no {missing}"


@pytest.mark.parametrize("version", list(LAYOUT))
def test_documented_overrides_compose_on_verls_own_config_and_load_the_reward(version, monkeypatch):
    overrides = DOCUMENTED[LAYOUT[version]]
    docs = (ROOT / "docs" / "scaling.md").read_text(encoding="utf-8")
    assert [o for o in overrides if o not in docs] == []
    filled = [o.replace('"$PWD', str(ROOT)).replace('.py"', ".py") for o in overrides]
    fn = verl_reward_fn(version, as_main_ppo_does(version, compose_verl(version, filled)), monkeypatch)
    assert call_like_verl(fn, "Thank you!", RUBRIC)["score"] == pytest.approx(1.0)


@pytest.mark.parametrize("version", ["0.7.1", "0.8.0", "0.9.1"])
def test_old_keys_on_new_verl_are_migrated_until_0_9_then_ignored(version, monkeypatch):
    cfg = compose_example(version, "config_legacy", [f"custom_reward_function.path={EXAMPLES / 'reward.py'}",
                                                     "reward_model.num_workers=4"])
    assert cfg.custom_reward_function.path.endswith("reward.py")  # composes without an error everywhere
    cfg = as_main_ppo_does(version, cfg)
    fn = verl_reward_fn(version, cfg, monkeypatch)
    if version == "0.9.1":  # nothing reads the old keys: verl falls back to its built-in scorers
        assert fn is None
        assert cfg.reward.custom_reward_function.path is None and cfg.reward.num_workers == 8
    else:
        assert call_like_verl(fn, "Thank you!", RUBRIC)["score"] == pytest.approx(1.0)
        assert cfg.reward.num_workers == 4 and "custom_reward_function" not in cfg
    with pytest.raises(ConfigCompositionException, match="use_reward_loop"):  # gone since 0.7.1
        compose_verl(version, ["reward_model.use_reward_loop=false"])


@pytest.mark.parametrize("version", ["0.5.0", "0.6.1", "0.7.0"])
def test_new_keys_on_old_verl_are_not_read(version, monkeypatch):
    cfg = compose_example(version, "config")  # composes (a config file may add keys), but nothing reads `reward.*`
    assert verl_reward_fn(version, as_main_ppo_does(version, cfg), monkeypatch) is None
    with pytest.raises(ConfigCompositionException):
        compose_verl(version, ["reward.custom_reward_function.path=pkg://rubricrl.integrations.verl"])


def test_use_reward_loop_and_the_batch_manager_exist_only_up_to_0_7_0():
    assert compose_verl("0.7.0", ["reward_model.use_reward_loop=false", "reward_model.reward_manager=batch"]
                        ).reward_model.use_reward_loop is False
    for version in ("0.5.0", "0.6.1"):  # no reward loop yet: the batch manager is reward_model.reward_manager=batch
        assert compose_verl(version, ["reward_model.reward_manager=batch"]).reward_model.reward_manager == "batch"
        with pytest.raises(ConfigCompositionException, match="use_reward_loop"):
            compose_verl(version, ["reward_model.use_reward_loop=false"])


@pytest.mark.parametrize("version", list(LAYOUT))
def test_run_grpo_picks_the_layout_this_verl_has(version):
    """run_grpo.sh looks for verl/trainer/config/reward/reward.yaml in the installed verl."""
    script = (EXAMPLES / "run_grpo.sh").read_text(encoding="utf-8")
    probe = re.search(r"<<'EOF'\n(.*?)\nEOF\n", script, flags=re.DOTALL).group(1)
    env = {**os.environ, "PYTHONPATH": str(verl_release(version))}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == LAYOUT[version]
    assert 'config_legacy custom_reward_function.path="$HERE/reward.py"' in script  # what the tests above pass
    subprocess.run(["bash", "-n", str(EXAMPLES / "run_grpo.sh")], check=True)  # and the script parses
