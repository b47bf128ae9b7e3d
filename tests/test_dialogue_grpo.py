"""Multi-turn GRPO through TRL's rollout_func: the token sequence and loss mask of every
trajectory checked token by token against the chat template, then real training steps and a
real `rubricrl simulate` run on the embedded model with the user on a loopback llama.cpp server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from rubricrl.dialogue.grpo import DialogueRollout, between_tokens, opening_prompt
from rubricrl.dialogue.persona import Persona
from rubricrl.dialogue.rollout import Transcript
from rubricrl.dialogue.user import SimulatedUser, UserSettings
from rubricrl.llm.endpoint import ChatResult

pytestmark = pytest.mark.slow  # every test here loads the embedded model or talks to a real server


@pytest.fixture(scope="module")
def embedded():
    from rubricrl.llm.models import load_causal_lm

    model, tokenizer = load_causal_lm()
    return model, tokenizer


def persona(pid: str, name: str, first: str) -> Persona:
    return Persona(id=pid, name=name, background="b", situation="s", hidden_need="h", first_message=first)


ANA = persona("ana", "Ana", "I feel awful today and I don't know why.")
BEN = persona("ben", "Ben", "My dog died on Sunday.")


class ScriptedUser:
    """Ana says goodbye after the first supporter turn; Ben talks until max_turns. Answers are
    computed from the prompt (persona card, supporter lines so far); seeds are recorded."""

    name = "scripted-user"

    def __init__(self):
        self.analysis_seeds: dict[tuple[str, int], list[int]] = {}

    async def chat(self, messages, *, max_tokens=256, temperature=0.0, seed=None, json_schema=None) -> ChatResult:
        who = re.match(r"You are (\w+)\.", messages[0]["content"]).group(1)
        turn = messages[1]["content"].count("\nSupporter: ")
        if json_schema is not None:
            self.analysis_seeds.setdefault((who, turn), []).append(seed)
            leave = who == "Ana"
            return ChatResult(text=json.dumps({"reasons": "r", "change": 3 if leave else -2, "leave": leave}))
        if who == "Ana":
            return ChatResult(text="Thanks, I have to go now. Bye!")
        return ChatResult(text=f"He was called Biscuit, twelve years old. (turn {turn}) Café walks every day.")


def fake_trainer(tokenizer, *, training=True, generations=2, eval_generations=2, model=None, step=3):
    return SimpleNamespace(
        processing_class=tokenizer, num_generations=generations, num_generations_eval=eval_generations,
        model=model if model is not None else SimpleNamespace(training=training),
        state=SimpleNamespace(global_step=step), accelerator=SimpleNamespace(unwrap_model=lambda m: m),
        args=SimpleNamespace(temperature=1.0, top_p=1.0))


POLICY_TEXTS = [
    "I hear you. That sounds really hard; can you tell me more?",
    "<think>be gentle, ask first</think>What happened on Sunday?",
    "It makes sense that you feel tired and a bit lost right now, and",
    "Thank you for telling me about him.",
]


def runs(mask: list[int], ids: list[int]) -> list[tuple[int, list[int]]]:
    """Maximal runs of equal mask values: [(mask value, token ids), ...]."""
    out: list[tuple[int, list[int]]] = []
    for m, t in zip(mask, ids):
        if out and out[-1][0] == m:
            out[-1][1].append(t)
        else:
            out.append((m, [t]))
    return out


def conversation_messages(prompt: list[dict], transcript: Transcript) -> list[dict]:
    """The conversation the policy was trained on: its prompt, then every supporter turn and the
    user replies that came before a later supporter turn (a goodbye after the last one is not in it)."""
    messages = [dict(m) for m in prompt]
    turns = transcript.turns[1:]
    for k, turn in enumerate(turns):
        if turn.role == "supporter":
            messages.append({"role": "assistant", "content": turn.text})
        elif any(later.role == "supporter" for later in turns[k + 1:]):
            messages.append({"role": "user", "content": turn.text})
    return messages


def test_rollout_tokens_and_env_mask_token_by_token(embedded, monkeypatch):
    _, tok = embedded
    eos = tok.eos_token_id
    batches: list[list[list[int]]] = []
    segments: list[list[int]] = []  # what each policy turn contributes as its own tokens

    def scripted_generate(self, trainer, batch):
        batches.append([list(ids) for ids in batch])
        out = []
        for ids in batch:
            k = len(segments)
            enc = tok.encode(POLICY_TEXTS[k % len(POLICY_TEXTS)], add_special_tokens=False)
            if k in (2, 7):  # cut at max_new_tokens: no end token (mid-conversation, and on a last turn)
                new = own = enc[: 9 if k == 2 else 6]
            elif k == 5:  # generate ran on past the end token: the rollout keeps up to eos
                new, own = enc + [eos] + enc[:3], enc + [eos]
            else:
                new, own = enc + [eos], enc + [eos]
            segments.append(own)
            out.append(new)
        return out

    monkeypatch.setattr(DialogueRollout, "_generate", scripted_generate)
    user = ScriptedUser()
    rollout = DialogueRollout([ANA, BEN], SimulatedUser(user, UserSettings(max_turns=3, start_emotion=30)),
                              max_new_tokens=9, seed=5)
    prompts = [opening_prompt(ANA)] * 2 + [opening_prompt(BEN)] * 2
    out = rollout(prompts, fake_trainer(tok))

    assert out["logprobs"] is None and len(out["prompt_ids"]) == len(out["completion_ids"]) == 4
    # lockstep: all four first turns in one batch; Ana's users leave, Ben's two talk on for turns 2 and 3
    assert [len(b) for b in batches] == [4, 2, 2]
    transcripts = [Transcript.model_validate(t) for t in out["transcript"]]
    assert [t.trajectory_id for t in transcripts] == ["step3/ana/g0/s0", "step3/ana/g0/s1", "step3/ben/g1/s0",
                                                      "step3/ben/g1/s1"]
    assert [t.end_reason for t in transcripts] == ["goodbye", "goodbye", "max_turns", "max_turns"]
    assert rollout.last_transcripts == transcripts

    # groups of num_generations consecutive prompts meet identically seeded users; groups differ
    seeds = [t.seed for t in transcripts]
    assert seeds[0] == seeds[1] != seeds[2] == seeds[3]
    assert user.analysis_seeds[("Ana", 1)] == [seeds[0] + 1000] * 2
    assert user.analysis_seeds[("Ben", 3)] == [seeds[2] + 3000] * 2

    own_turns = []
    for i, (prompt, t) in enumerate(zip(prompts, transcripts)):
        prompt_ids, completion, mask = out["prompt_ids"][i], out["completion_ids"][i], out["env_mask"][i]
        assert len(mask) == len(completion) and set(mask) <= {0, 1}
        expected_prompt = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                                  return_dict=True)["input_ids"]
        assert prompt_ids == list(expected_prompt)

        said = [x.text for x in t.turns if x.role == "supporter"]
        replies = [m["content"] for m in conversation_messages(prompt, t)[len(prompt):] if m["role"] == "user"]
        parts = runs(mask, completion)
        policy_parts = [ids for m, ids in parts if m == 1]
        env_parts = [ids for m, ids in parts if m == 0]
        assert parts[0][0] == 1 and len(policy_parts) == len(said) == t.supporter_turns
        for k, ids in enumerate(policy_parts):
            # mask 1 = exactly the tokens the policy generated for that turn (its end token included)
            assert ids in segments
            own_turns.append(ids)
            assert tok.decode(ids, skip_special_tokens=True).strip() == said[k]
            cut = ids[-1] != eos
            if k < len(policy_parts) - 1:  # mask 0 = template tokens around the user's message
                expected = ("<|im_end|>" if cut else "") + f"\n<|im_start|>user\n{replies[k]}<|im_end|>\n" \
                                                           "<|im_start|>assistant\n"
                assert tok.decode(env_parts[k], skip_special_tokens=False) == expected
                assert env_parts[k][(1 if cut else 0):] == between_tokens(
                    tok, conversation_messages(prompt, t)[: len(prompt) + 2 * k + 1], replies[k])
            elif cut:  # a cut last turn is closed with an end token the policy is not trained on
                assert env_parts[-1] == [eos]
            else:
                assert len(env_parts) == len(policy_parts) - 1

        # the whole sequence is the chat template's rendering of the conversation, except the
        # template's newline after the final end token (the trajectory stops at that end token)
        rendered = tok.apply_chat_template(conversation_messages(prompt, t), tokenize=True,
                                           return_dict=True)["input_ids"]
        assert prompt_ids + completion == list(rendered[:-1]) and tok.decode(rendered[-1:]) == "\n"
        assert completion[-1] == eos
        # the goodbye is in the transcript (the user said it) but not in the policy's sequence
        if t.end_reason == "goodbye":
            assert t.turns[-1].text == "Thanks, I have to go now. Bye!"
            assert "Bye!" not in tok.decode(completion)

    # every generated turn appears in exactly one trajectory, including the cut one and its eos
    assert sorted(own_turns) == sorted(segments) and len(segments) == 8
    cut_turn = segments[2]
    assert cut_turn[-1] != eos and any(cut_turn in [ids for m, ids in runs(out["env_mask"][i], c) if m == 1]
                                       for i, c in enumerate(out["completion_ids"]))
    # what the policy was asked to continue is always its own trajectory so far, ending at "assistant\n"
    full = [p + c for p, c in zip(out["prompt_ids"], out["completion_ids"])]
    for batch in batches:
        for ids in batch:
            assert any(seq[: len(ids)] == ids for seq in full)
            assert tok.decode(ids).endswith("<|im_start|>assistant\n")


def test_cut_think_block_is_hidden_from_the_user(embedded, monkeypatch):
    """A turn cut inside `<think>` (common at max_new_tokens) reaches the user as an empty reply."""
    _, tok = embedded
    shown: list[str] = []

    class Listener(ScriptedUser):
        async def chat(self, messages, **kw):
            shown.append(messages[1]["content"])
            return await super().chat(messages, **kw)

    def thinking(self, trainer, batch):
        return [tok.encode("<think>I should tell him to get a new dog", add_special_tokens=False) for _ in batch]

    monkeypatch.setattr(DialogueRollout, "_generate", thinking)
    rollout = DialogueRollout([BEN], SimulatedUser(Listener(), UserSettings(max_turns=1)))
    out = rollout([opening_prompt(BEN)] * 2, fake_trainer(tok))
    assert shown and all("new dog" not in s and "<think>" not in s for s in shown)
    assert all(Transcript.model_validate(t).notes == ["empty_supporter_reply"] for t in out["transcript"])
    assert all(m[-1] == 0 and sum(m) == len(m) - 1 for m in out["env_mask"])  # generated 1s, added eos 0


def test_rollout_group_size_follows_train_or_eval_mode(embedded, monkeypatch):
    _, tok = embedded
    monkeypatch.setattr(DialogueRollout, "_generate",
                        lambda self, trainer, batch: [tok.encode("Okay.", add_special_tokens=False)
                                                      + [tok.eos_token_id] for _ in batch])
    rollout = DialogueRollout([ANA, BEN], SimulatedUser(ScriptedUser(), UserSettings(max_turns=1)))
    prompts = [opening_prompt(ANA)] * 3 + [opening_prompt(BEN)] * 3
    evaluated = rollout(prompts, fake_trainer(tok, training=False, generations=2, eval_generations=3))
    seeds = [t["seed"] for t in evaluated["transcript"]]
    assert seeds[:3] == [seeds[0]] * 3 and seeds[3:] == [seeds[3]] * 3 and seeds[0] != seeds[3]
    trained = rollout(prompts[:2] + prompts[3:5], fake_trainer(tok, generations=2))
    assert [t["group"] for t in trained["transcript"]] == ["step3/ana/g0"] * 2 + ["step3/ben/g1"] * 2


def test_rollout_refuses_unknown_or_ambiguous_personas(embedded):
    _, tok = embedded
    with pytest.raises(ValueError, match="distinct first messages"):
        DialogueRollout([ANA, persona("ana2", "Anna", ANA.first_message)], SimulatedUser(ScriptedUser()))
    rollout = DialogueRollout([ANA], SimulatedUser(ScriptedUser()))
    with pytest.raises(ValueError, match="opening_prompt"):
        rollout([opening_prompt(BEN)] * 2, fake_trainer(tok))


def test_rollout_with_real_generation(embedded):
    """The real batched, left-padded generation path: masks line up with what was generated."""
    model, tok = embedded
    trainer = fake_trainer(tok, model=model)
    model.train()  # the rollout must switch to eval for generation and back
    rollout = DialogueRollout([ANA, BEN], SimulatedUser(ScriptedUser(), UserSettings(max_turns=2)), max_new_tokens=12)
    prompts = [opening_prompt(ANA)] * 2 + [opening_prompt(BEN)] * 2
    torch.manual_seed(0)
    out = rollout(prompts, trainer)
    assert model.training
    for i, raw in enumerate(out["transcript"]):
        t = Transcript.model_validate(raw)
        completion, mask = out["completion_ids"][i], out["env_mask"][i]
        assert len(mask) == len(completion) and completion[-1] == tok.eos_token_id
        policy_parts = [ids for m, ids in runs(mask, completion) if m == 1]
        said = [x.text for x in t.turns if x.role == "supporter"]
        assert len(policy_parts) == len(said) == t.supporter_turns >= 1
        for ids, text in zip(policy_parts, said):
            assert len(ids) <= 12 and (ids[-1] == tok.eos_token_id or len(ids) == 12)
            assert tok.decode(ids, skip_special_tokens=True).strip() == text
        env_parts = [ids for m, ids in runs(mask, completion) if m == 0]
        replies = [x.text for x in t.turns[2:] if x.role == "user" and x.text][: len(said) - 1]
        for k, reply in enumerate(replies):  # mask 0 between turns: (a closing eos if cut) + the user's turn
            assert tok.decode(env_parts[k]).endswith(f"<|im_start|>user\n{reply}<|im_end|>\n<|im_start|>assistant\n")


# ---------------------------------------------------------------- real training and simulate runs


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def dialogue_run(tmp_path_factory, llama_url):
    from rubricrl.train.config import load_config
    from rubricrl.train.run import run_training

    tmp = tmp_path_factory.mktemp("dialogue-train")
    config = {
        "output_dir": str(tmp / "run"),
        "dialogue": {"enabled": True, "limit": 2, "max_turns": 2, "max_new_tokens": 24,
                     "user_model": f"openai:{llama_url}"},
        "grpo": {"max_steps": 2, "per_device_train_batch_size": 4, "num_generations": 2,
                 "max_completion_length": 512, "save_steps": 2, "save_total_limit": 1,
                 "learning_rate": 1e-4},
    }
    path = tmp / "dialogue.yaml"
    path.write_text(yaml.safe_dump(config))
    logs: list[str] = []
    summary = run_training(load_config(path), log=logs.append)
    from rubricrl.reports.training import write_report

    write_report(config["output_dir"])  # as `rubricrl train` does after the run
    yield Path(config["output_dir"]), summary, logs
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)  # checkpoints are large; a small CI disk runs out


def test_dialogue_training_changes_parameters(dialogue_run):
    from safetensors.torch import load_file

    from rubricrl.llm.models import resolve

    run_dir, summary, _ = dialogue_run
    before = load_file(str(Path(resolve(None)) / "model.safetensors"))
    after = load_file(str(run_dir / "final" / "model.safetensors"))
    changed = [k for k in before if k in after and not torch.equal(before[k], after[k])]
    assert len(changed) > len(before) // 2
    assert summary["steps"] == 2 and summary["dialogue"] is True
    assert (run_dir / "checkpoints" / "checkpoint-2").is_dir()


def test_dialogue_training_run_files(dialogue_run):
    run_dir, _, logs = dialogue_run
    assert any("dialogue: 2 personas" in line for line in logs)
    metrics = [m for m in read_jsonl(run_dir / "metrics.jsonl") if "reward" in m]
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert "emotion/final_emotion" in m and "emotion/errors" in m and "emotion/turns" in m
        assert 0 <= m["emotion/final_emotion"] <= 100 or m["emotion/errors"] == 4
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert len(samples) == 2 * 4 and {s["step"] for s in samples} == {1, 2}
    for s in samples:
        assert re.fullmatch(r"step\d+/[\w-]+/g\d/s\d", s["trajectory_id"])
        assert s["turns"][0]["role"] == "user" and any(x["role"] == "supporter" for x in s["turns"])
        assert s["completion"].startswith("Supporter: ") and s["end_reason"] in (
            "goodbye", "success", "failure", "max_turns", "error")
    assert len({s["trajectory_id"] for s in samples}) == 8
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["reward_totals"]["conversations"] == 8 and "rubricrl simulate" in saved["evaluate_with"]
    assert (run_dir / "report.html").is_file() and (run_dir / "report.html").stat().st_size > 1000


def simulate(out: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rubricrl.cli", "simulate", "--out", str(out),
                           "--policy", f"openai:{url}", "--user-model", f"openai:{url}", "--max-turns", "2", *extra],
                          check=False, capture_output=True, text=True, timeout=1800)


SIMULATE_FIELDS = {"conversations", "scored", "errors", "score", "successes", "failures", "mean_turns", "end_reasons",
                   "error_reasons", "empty_supporter_replies", "per_persona", "personas_skipped"}


def test_simulate_cli_end_to_end(tmp_path, llama_url):
    out = tmp_path / "sim"
    result = simulate(out, llama_url, "--limit", "2")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    lines = (out / "transcripts.jsonl").read_text().splitlines()
    transcripts = [Transcript.model_validate_json(line) for line in lines]
    assert len(transcripts) == 2 and {t.persona_id for t in transcripts} == {"new-city-loneliness",
                                                                             "breakup-after-seven-years"}
    assert all(1 <= t.supporter_turns <= 2 and t.start_emotion == 40 for t in transcripts)
    summary = json.loads((out / "summary.json").read_text())
    assert SIMULATE_FIELDS <= set(summary) and summary["conversations"] == 2 and summary["personas_skipped"] == 0
    if summary["scored"]:  # the Sentient score: mean final emotion over conversations that did not error
        finals = [t.final_emotion for t in transcripts if t.end_reason != "error"]
        assert summary["score"]["mean"] == pytest.approx(sum(finals) / len(finals))
    assert summary["successes"] + summary["failures"] <= summary["scored"]
    assert "mean final emotion" in result.stdout
    page = (out / "report.html").read_text()
    assert re.search(r"<img[^>]+src=['\"]data:image/png;base64,", page)
    again = simulate(out, llama_url, "--limit", "2")  # never appends to an existing run
    assert again.returncode != 0 and "already has transcripts" in again.stderr


def test_simulate_skips_a_bad_persona_row(tmp_path, llama_url):
    good = [ANA.model_dump(), BEN.model_dump()]
    bad = {**BEN.model_dump(), "id": "broken", "first_message": "Another one.", "mood": "sad"}
    path = tmp_path / "people.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (good[0], bad, good[1])))
    out = tmp_path / "sim"
    result = simulate(out, llama_url, "--personas", str(path), "--max-turns", "1")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "skipped persona" in result.stderr and "mood" in result.stderr and ":2:" in result.stderr
    assert len((out / "transcripts.jsonl").read_text().splitlines()) == 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["personas_skipped"] == 1 and summary["conversations"] == 2
