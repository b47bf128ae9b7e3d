"""Simulated users, conversations, personas, emotion rewards and the simulation summary, with
scripted chat models (no real model): every end condition, the analysis bounds, `<think>`
hiding, trajectory-id keying, seeds, persona files in both formats, reward formulas by hand."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from rubricrl.dialogue.persona import Persona, load_personas
from rubricrl.dialogue.rewards import EmotionReward, emotion_reward, step_rewards
from rubricrl.dialogue.rollout import (
    PolicyReply,
    Slot,
    Transcript,
    Turn,
    converse,
    plan,
    run_conversations,
    user_seed,
)
from rubricrl.dialogue.summary import summarize_simulation
from rubricrl.reports.simulation import render_simulation_report
from rubricrl.dialogue.user import (
    Analysis,
    SimulatedUser,
    UserSettings,
    parse_analysis,
    visible_text,
)
from rubricrl.llm.endpoint import ChatResult

# ---------------------------------------------------------------- scripted models


def persona(pid: str = "p1", name: str = "Ines", first: str | None = None, **extra) -> Persona:
    return Persona(id=pid, name=name, background=f"{name}'s background", situation=f"{name}'s situation",
                   hidden_need=f"{name} wants to be heard", first_message=first or f"hello from {pid}", **extra)


def analysis_json(change, leave=False, reasons="because") -> str:
    return json.dumps({"reasons": reasons, "change": change, "leave": leave})


class FakeUserModel:
    """A chat model playing the user. Analysis calls (they pass a JSON schema) and reply calls are
    answered from separate queues or functions of the messages; every call is recorded."""

    name = "fake-user"

    def __init__(self, analyses=None, replies=None):
        self.analyses = analyses if callable(analyses) else list(analyses or [])
        self.replies = replies if callable(replies) else list(replies or [])
        self.calls: list[dict] = []

    @property
    def analysis_calls(self) -> list[dict]:
        return [c for c in self.calls if c["kind"] == "analysis"]

    @property
    def reply_calls(self) -> list[dict]:
        return [c for c in self.calls if c["kind"] == "reply"]

    async def chat(self, messages, *, max_tokens=256, temperature=0.0, seed=None, json_schema=None) -> ChatResult:
        kind = "analysis" if json_schema is not None else "reply"
        self.calls.append({"kind": kind, "messages": messages, "seed": seed, "schema": json_schema})
        await asyncio.sleep(0)  # let other conversations interleave
        source = self.analyses if kind == "analysis" else self.replies
        if callable(source):
            answer = source(messages)
        elif source:
            answer = source.pop(0)
        else:
            answer = analysis_json(0) if kind == "analysis" else "ok."
        if isinstance(answer, ChatResult):
            return answer
        if isinstance(answer, dict):
            answer = json.dumps(answer)
        return ChatResult(text=answer, finish_reason="stop", completion_tokens=len(answer.split()), attempts=1)


class ScriptedPolicy:
    """A supporter returning queued PolicyReplies (or a default), recording what it was shown."""

    def __init__(self, replies=None, default="I hear you. What happened?"):
        self.replies = list(replies or [])
        self.default = default
        self.seen: list[list[dict]] = []

    async def __call__(self, slot: Slot, messages: list[dict]) -> PolicyReply:
        self.seen.append([dict(m) for m in messages])
        if self.replies:
            reply = self.replies.pop(0)
            return reply if isinstance(reply, PolicyReply) else PolicyReply(reply)
        return PolicyReply(self.default)


def run(coro):
    return asyncio.run(coro)


def talk(analyses, replies=None, policy=None, **settings) -> tuple[Transcript, FakeUserModel, ScriptedPolicy]:
    model = FakeUserModel(analyses, replies)
    policy = policy or ScriptedPolicy()
    p = persona()
    slot = Slot("t1", p, "g1", 1234)
    transcript = run(converse(slot, policy, SimulatedUser(model, UserSettings(**settings))))
    return transcript, model, policy


# ---------------------------------------------------------------- analysis parsing and bounds


def test_parse_analysis_clamps_and_keeps_raw():
    a = parse_analysis(analysis_json(25), 10)
    assert isinstance(a, Analysis) and (a.change, a.raw_change, a.leave) == (10, 25, False)
    a = parse_analysis(analysis_json(-40, leave=True), 10)
    assert (a.change, a.raw_change, a.leave) == (-10, -40, True)
    a = parse_analysis(analysis_json(7), 10)
    assert (a.change, a.raw_change) == (7, 7)
    a = parse_analysis('Sure! {"reasons": "warm", "change": 3.6} hope that helps', 5)  # prose around, no leave
    assert (a.change, a.raw_change, a.leave, a.reasons) == (4, 4, False, "warm")
    a = parse_analysis(analysis_json(4, leave="yes"), 10)  # only JSON true means leave
    assert a.leave is False


@pytest.mark.parametrize("text", [
    "I feel a bit better", "", '{"reasons": "x", "change": "five"}', '{"reasons": "x", "change": true}',
    '{"reasons": "x", "change": null}', '{"reasons": "x"}', '{change: 5}', '{"change": 5,}',
    '{"change": NaN}', '{"change": Infinity}', '{"change": -1e999}', "[1, 2]",
])
def test_parse_analysis_rejects_non_numeric_and_invalid_json(text):
    result = parse_analysis(text, 10)
    assert isinstance(result, str) and result  # a problem description, never an Analysis with change 0


def test_emotion_is_clamped_to_0_100_in_converse():
    high, _, _ = talk([analysis_json(10)], start_emotion=95)
    assert high.final_emotion == 100 and high.turns[-1].emotion == 100 and high.end_reason == "success"
    low, _, _ = talk([analysis_json(-10)], start_emotion=5)
    assert low.final_emotion == 0 and low.turns[-1].emotion == 0 and low.end_reason == "failure"
    big, _, _ = talk([analysis_json(60)], max_change=10, max_turns=1)  # raw 60 is clamped to +10
    assert (big.turns[-1].change, big.turns[-1].raw_change, big.final_emotion) == (10, 60, 50)


# ---------------------------------------------------------------- end conditions


def test_goodbye_generates_and_records_a_goodbye_reply():
    t, model, _ = talk([analysis_json(5), analysis_json(3, leave=True)], ["tell you more", "thanks, bye!"])
    assert t.end_reason == "goodbye" and t.supporter_turns == 2
    assert [x.role for x in t.turns] == ["user", "supporter", "user", "supporter", "user"]
    assert t.turns[-1].text == "thanks, bye!" and t.turns[-1].emotion == 48 and t.final_emotion == 48
    assert t.emotions == [40, 45, 48] and t.changes == [5, 3]
    assert "Say goodbye" in model.reply_calls[-1]["messages"][0]["content"]
    assert "Say goodbye" not in model.reply_calls[0]["messages"][0]["content"]


def test_success_ends_at_100_without_a_reply():
    t, model, _ = talk([analysis_json(10), analysis_json(10)], ["better"], start_emotion=80)
    assert t.end_reason == "success" and t.final_emotion == 100 and t.supporter_turns == 2
    assert len(model.reply_calls) == 1 and t.turns[-1].text == ""


def test_failure_ends_below_10():
    t, model, _ = talk([analysis_json(-10), analysis_json(-10)], ["worse"], start_emotion=25)
    assert t.end_reason == "failure" and t.final_emotion == 5 and t.supporter_turns == 2
    assert len(model.reply_calls) == 1


def test_exactly_10_is_not_a_failure():
    t, _, _ = talk([analysis_json(-10)], start_emotion=20, max_turns=1)
    assert t.final_emotion == 10 and t.end_reason == "max_turns"


def test_max_turns_cuts_the_conversation():
    t, model, policy = talk([analysis_json(1)] * 5, max_turns=3)
    assert t.end_reason == "max_turns" and t.supporter_turns == 3 and len(policy.seen) == 3
    assert len(model.analysis_calls) == 3 and len(model.reply_calls) == 2  # no reply after the last turn
    assert t.final_emotion == 43 and t.turns[-1].text == ""


def test_unparsable_analysis_is_an_error_turn_after_exactly_retries_plus_one_calls():
    answers = ["no json here", ChatResult(error="timeout", attempts=1), '{"change": "lots"}', analysis_json(9)]
    t, model, _ = talk(answers, analysis_retries=2)
    assert len(model.analysis_calls) == 3 and model.reply_calls == []
    assert t.end_reason == "error" and t.final_emotion == 40  # unchanged because nothing was measured
    last = t.turns[-1]
    assert last.role == "user" and last.error and last.error.startswith("user: analysis")
    assert last.emotion is None and last.change is None  # never recorded as a change of 0
    assert t.changes == [] and "3 attempt(s)" in last.error
    assert len({c["seed"] for c in model.analysis_calls}) == 3  # every re-ask is a fresh sample


def test_analysis_retry_recovers():
    t, model, _ = talk(["garbage", analysis_json(4)], max_turns=1, analysis_retries=2)
    assert len(model.analysis_calls) == 2 and t.end_reason == "max_turns" and t.final_emotion == 44


def test_zero_retries_means_one_call():
    t, model, _ = talk(["garbage", analysis_json(4)], analysis_retries=0)
    assert len(model.analysis_calls) == 1 and t.end_reason == "error"


def test_user_reply_that_stays_empty_is_an_error():
    t, model, _ = talk([analysis_json(5)], ["", "   ", "User:"], analysis_retries=2)
    assert len(model.reply_calls) == 3
    assert t.end_reason == "error" and "reply stayed empty" in t.turns[-1].error
    assert t.turns[-1].change == 5 and t.final_emotion == 45  # the analysis itself was measured


TOO_LONG = ("too_long: the prompt is 4313 tokens + up to 160 answer tokens, more than the llama.cpp context of 4096 "
            "tokens; raise the context with ?context=N in the llamacpp spec, e.g. llamacpp?context=8192")


def test_a_prompt_too_long_for_the_user_model_is_said_so_and_not_re_asked():
    t, model, _ = talk([ChatResult(error=TOO_LONG, attempts=0)], analysis_retries=2)
    assert len(model.analysis_calls) == 1 and t.end_reason == "error"
    assert t.turns[-1].error == f"user: analysis call failed: {TOO_LONG}; not re-asked"
    t, model, _ = talk([analysis_json(5)], [ChatResult(error=TOO_LONG, attempts=0)], analysis_retries=2)
    assert len(model.reply_calls) == 1
    assert t.turns[-1].error == f"user: reply call failed: {TOO_LONG}; not re-asked" and t.turns[-1].change == 5


def test_an_analysis_cut_short_says_whether_the_token_limit_or_the_context_cut_it():
    cut = '{"reasons": "the supporter listened and'
    at_limit = ChatResult(text=cut, finish_reason="length", prompt_tokens=900, completion_tokens=160, attempts=1)
    t, _, _ = talk([at_limit], analysis_retries=0, max_analysis_tokens=160)
    assert t.turns[-1].error == ("user: analysis unparsable (no JSON object; the answer was cut at "
                                 f"max_analysis_tokens=160 tokens); answer began {cut!r} after 1 attempt(s)")
    full = ChatResult(text=cut, finish_reason="length", prompt_tokens=4030, completion_tokens=66, attempts=1)
    t, _, _ = talk([full], analysis_retries=0, max_analysis_tokens=160)
    assert t.turns[-1].error == (
        "user: analysis unparsable (no JSON object; the answer was cut after 66 tokens because the model's context "
        "was full (4030 prompt tokens); give the model a longer context (llamacpp?context=N)); "
        f"answer began {cut!r} after 1 attempt(s)")


def test_reply_calls_that_fail_say_why():
    t, model, _ = talk([analysis_json(5)], [ChatResult(error="timeout", attempts=1)] * 2, analysis_retries=1)
    assert len(model.reply_calls) == 2
    assert t.turns[-1].error == "user: reply call failed: timeout after 2 attempt(s)"


def test_policy_error_ends_the_conversation():
    t, model, _ = talk([analysis_json(5)], policy=ScriptedPolicy([PolicyReply(error="out of memory")]))
    assert t.end_reason == "error" and t.turns[-1].role == "supporter"
    assert t.turns[-1].error == "policy: out of memory" and model.calls == []


def test_empty_policy_text_is_a_note_not_an_error():
    t, model, _ = talk([analysis_json(-3)], policy=ScriptedPolicy(["", "<think>only thinking</think>"]),
                       max_turns=2)
    assert t.end_reason == "max_turns" and t.notes == ["empty_supporter_reply"] * 2
    assert all(x.error is None for x in t.turns)
    shown = model.analysis_calls[0]["messages"][1]["content"]
    assert "Supporter: (the supporter said nothing)" in shown
    summary = summarize_simulation([t])
    assert summary.empty_supporter_replies == 2 and summary.errors == 0


# ---------------------------------------------------------------- <think> hiding


def test_visible_text():
    assert visible_text("<think>plan</think>Hello") == "Hello"
    assert visible_text("plan started in the prompt</think> Hello") == "Hello"
    assert visible_text("<THINK>a</Think>Hi <think>b</think>there") == "Hi there"
    assert visible_text("<think>never closed, cut at the token limit") == ""
    assert visible_text("Hello <think>second thought cut") == "Hello"
    assert visible_text("  plain  ") == "plain"


def test_user_never_sees_think_blocks():
    secret = "SECRET-PLAN"
    replies = [f"<think>{secret} 1</think>That sounds lonely.", f"{secret} 2</think>What happened?",
               f"Tell me more. <think>{secret} 3 cut off at the limit"]
    t, model, policy = talk([analysis_json(2)] * 3, ["it was my birthday", "nobody came"],
                            policy=ScriptedPolicy(replies), max_turns=3)
    assert t.end_reason == "max_turns" and len(model.calls) == 5
    for call in model.calls:
        assert all(secret not in m["content"] and "<think>" not in m["content"] for m in call["messages"])
    assert "Supporter: That sounds lonely." in model.calls[0]["messages"][1]["content"]
    assert secret in t.turns[1].text  # the transcript keeps the policy's full text
    for shown in policy.seen:  # the policy's own history holds what was said, not what was thought
        assert all(secret not in m["content"] for m in shown)


# ---------------------------------------------------------------- concurrency and keying

SCRIPTS = {  # persona name -> (emotion changes per supporter turn, turn at which the user leaves); start 40
    "Ana": ([5], 1),                 # 45 and leaves: goodbye after turn 1
    "Ben": ([-15, -20], None),       # 25, 5: failure after turn 2
    "Dee": ([20, 20, 20], None),     # 60, 80, 100: success after turn 3
    "Cy": ([2, 2, 2, 2], None),      # 42, 44, 46, 48: max_turns after turn 4
}
EXPECTED = {"Ana": ("goodbye", 1, 45), "Ben": ("failure", 2, 5), "Dee": ("success", 3, 100),
            "Cy": ("max_turns", 4, 48)}


def scripted_by_persona(messages) -> str:
    """The analysis for whoever is asked, computed from the prompt: persona from the card, turn
    number from the supporter lines in the conversation so far."""
    name = re.match(r"You are (\w+)\.", messages[0]["content"]).group(1)
    turn = messages[1]["content"].count("\nSupporter: ")
    changes, leave_at = SCRIPTS[name]
    return analysis_json(changes[turn - 1], leave=turn == leave_at)


def test_run_conversations_keys_by_trajectory_id_with_different_end_turns():
    people = {n: persona(n.lower(), n) for n in SCRIPTS}
    slots = [Slot(f"traj-{i}", people[n], f"g-{n}", 100 + i) for i, n in enumerate(["Cy", "Ana", "Dee", "Ben"])]

    async def policy(slot, messages):
        await asyncio.sleep(0.001 * (slot.persona.name == "Cy"))  # uneven pacing between conversations
        return PolicyReply(f"reply {len(messages)} to {slot.persona.name}")

    order: list[str] = []
    model = FakeUserModel(scripted_by_persona, lambda m: "and then?")
    settings = UserSettings(max_turns=4, max_change=20)
    results = run(run_conversations(slots, policy, SimulatedUser(model, settings), concurrency=4,
                                    on_done=lambda t: order.append(t.trajectory_id)))
    assert set(results) == {s.trajectory_id for s in slots} and sorted(order) == sorted(results)
    for slot in slots:
        t = results[slot.trajectory_id]
        name = slot.persona.name
        assert t.persona_id == slot.persona.id and t.seed == slot.seed and t.group == slot.group
        assert t.turns[0].text == slot.persona.first_message
        said = [x.text for x in t.turns if x.role == "supporter"]
        assert said == [f"reply {2 * k + 1} to {name}" for k in range(len(said))]  # its own policy turns only
        assert (t.end_reason, t.supporter_turns, t.final_emotion) == EXPECTED[name], name
    # the short conversation finished first and the long one last, yet every id holds its own persona
    assert order[0] == "traj-1" and order[-1] == "traj-0"


def test_run_conversations_refuses_duplicate_ids():
    p = persona()
    slots = [Slot("same", p, "g", 1), Slot("same", p, "g", 2)]
    with pytest.raises(ValueError, match="unique"):
        run(run_conversations(slots, ScriptedPolicy(), SimulatedUser(FakeUserModel())))


def test_an_exception_in_one_conversation_becomes_an_error_transcript():
    good, bad = persona("good", "Ana"), persona("bad", "Ben")
    slots = [Slot("a", good, "g1", 1), Slot("b", bad, "g2", 2), Slot("c", good, "g3", 3)]

    async def policy(slot, messages):
        if slot.persona.id == "bad":
            raise RuntimeError("policy crashed")
        return PolicyReply("I am listening.")

    done = []
    user = SimulatedUser(FakeUserModel(lambda m: analysis_json(1), lambda m: "go on"), UserSettings(max_turns=2))
    out = run(run_conversations(slots, policy, user, concurrency=2, on_done=done.append))
    assert out["b"].end_reason == "error" and out["b"].persona_id == "bad"
    assert out["b"].turns[0].error == "RuntimeError: policy crashed" and out["b"].final_emotion == 40
    assert out["a"].end_reason == out["c"].end_reason == "max_turns" and out["a"].final_emotion == 42
    assert len(done) == 3
    assert summarize_simulation(list(out.values())).error_reasons == {"RuntimeError": 1}


# ---------------------------------------------------------------- plan and seeds


def test_plan_seeds_identical_within_a_group_and_different_across():
    people = [persona("a"), persona("b"), persona("c")]
    slots = plan(people, repeats=2, group_size=3, seed=7)
    assert len(slots) == 18 and len({s.trajectory_id for s in slots}) == 18
    groups: dict[str, set[int]] = {}
    for s in slots:
        groups.setdefault(s.group, set()).add(s.seed)
    assert len(groups) == 6 and all(len(seeds) == 1 for seeds in groups.values())
    assert len({next(iter(seeds)) for seeds in groups.values()}) == 6  # one seed per group, all different
    assert [s.group for s in slots[:3]] == ["a/r0"] * 3 and slots[0].trajectory_id == "a/r0/s0"
    assert slots[0].seed == user_seed(7, "a", "a/r0")
    assert plan(people, repeats=2, group_size=3, seed=7) == slots  # deterministic
    assert {s.seed for s in plan(people, seed=8)}.isdisjoint({s.seed for s in plan(people, seed=7)})
    single = plan(people)
    assert [s.trajectory_id for s in single] == ["a/r0", "b/r0", "c/r0"]


def test_same_group_users_receive_the_same_seeds():
    p = persona()
    slots = plan([p], group_size=2) + plan([p], repeats=2, seed=1)[1:]
    model = FakeUserModel(lambda m: analysis_json(1), lambda m: "hm")
    run(run_conversations(slots, ScriptedPolicy(), SimulatedUser(model, UserSettings(max_turns=2)), concurrency=1))
    first_turn_seeds = [c["seed"] for c in model.analysis_calls]
    assert len(first_turn_seeds) == 6
    by_slot = [first_turn_seeds[i:i + 2] for i in range(0, 6, 2)]  # concurrency 1: one conversation at a time
    assert by_slot[0] == by_slot[1] != by_slot[2]


# ---------------------------------------------------------------- persona files

PERSONA_YAML = """\
- id: one
  name: Ana
  background: A nurse.
  situation: Night shifts.
  hidden_need: To be heard.
  first_message: I am so tired.
  difficulty: easy
- id: two
  name: Ben
  background: A student.
  situation: Exams.
  first_message: I failed again.
- id: three
  name: Cy
  background: A cook.
  situation: Lost a job.
  hidden_need: Not to be blamed.
  first_message: They let me go.
  mood: sad
- id: four
  name: Dee
  background: A retiree.
  situation: Lonely.
  hidden_need: Company.
  first_message: Nobody calls.
"""


def test_bundled_personas_load():
    loaded = load_personas()
    assert loaded.problems == [] and len(loaded.personas) >= 30
    ids = [p.id for p in loaded.personas]
    assert len(set(ids)) == len(ids)
    assert len({p.first_message for p in loaded.personas}) == len(ids)  # training recognises personas by these
    assert all(p.hidden_need.strip() and p.first_message.strip() for p in loaded.personas)
    assert load_personas("support_seekers").personas == loaded.personas  # by bundled name


def test_rubricrl_yaml_with_a_missing_and_an_unknown_field(tmp_path):
    path = tmp_path / "people.yaml"
    path.write_text(PERSONA_YAML)
    loaded = load_personas(path)
    assert [p.id for p in loaded.personas] == ["one", "four"]
    assert loaded.personas[0].difficulty == "easy" and loaded.personas[1].language == "en"
    missing, unknown = loaded.problems
    assert (missing.line, missing.field, missing.fix) == (8, "hidden_need", "add the missing field")
    assert (unknown.line, unknown.field) == (13, "mood") and "unknown field" in unknown.fix
    assert str(missing).startswith(f"{path}:8: hidden_need:")


def test_rubricrl_jsonl(tmp_path):
    good = {"id": "j1", "name": "Eve", "background": "b", "situation": "s", "hidden_need": "h",
            "first_message": "hi", "need": "heard", "difficulty": "hard"}
    rows = [json.dumps(good), "", json.dumps({**good, "id": "j2", "first_message": ""}),
            "{not json", json.dumps({**good, "id": "j3", "first_message": "hey", "difficulty": "extreme"}),
            json.dumps({**good, "id": "j1", "first_message": "again"}), json.dumps({**good, "id": "j4", "first_message": "yo"})]
    path = tmp_path / "people.jsonl"
    path.write_text("\n".join(rows) + "\n")
    loaded = load_personas(path)
    assert [p.id for p in loaded.personas] == ["j1", "j4"]
    assert loaded.personas[0].difficulty == "hard" and loaded.personas[0].need == "heard"
    where = sorted((p.line, p.field) for p in loaded.problems)
    assert where == [(3, "first_message"), (4, ""), (5, "difficulty"), (6, "id")]
    assert any("duplicate persona id" in p.message for p in loaded.problems if p.line == 6)


SAGE_PROFILES = Path(__file__).parent / "data" / "sage" / "simulator_profile_withfirsttalk.jsonl"
NEGATIVE = "negative type: irritable and quick to complain, easily provoked, slow to be won over"
PASSIVE = "passive type: waits to be asked, rarely leads the conversation, goes along with the other person"
AVOIDANT = "avoidant type: guarded, sidesteps painful subjects and withdraws when pressed"


def test_sage_profiles_map_type_traits_and_name():
    """Rows shaped like SAGE's profile/simulator_profile_withfirsttalk.jsonl: main_cha is the
    personality type, cha_group its trait words, the name is the profile's 姓名 line."""
    loaded = load_personas(SAGE_PROFILES)
    assert loaded.problems == []
    rows = [json.loads(line) for line in SAGE_PROFILES.read_text(encoding="utf-8").splitlines()]
    assert [set(r) for r in rows] == [{"id", "player", "scene", "main_cha", "cha_group", "task", "first_talk"}] * 3
    angry, quiet, shy = loaded.personas
    assert [p.name for p in loaded.personas] == ["周晓岚", "何子明", "许安"]
    assert angry.personality == NEGATIVE + "; traits: 暴躁, 多疑, 刻薄"
    assert quiet.personality == PASSIVE + "; traits: 内向, 谨慎, 耐心"
    assert shy.personality == AVOIDANT + "; traits: 敏感, 逃避, 沉默寡言"
    for persona_, row in zip(loaded.personas, rows):
        assert (persona_.id, persona_.background, persona_.situation) == (row["id"], row["player"], row["scene"])
        assert (persona_.hidden_need, persona_.first_message) == (row["task"], row["first_talk"])
        assert persona_.language == "zh" and persona_.speaking_style == ""
        assert "others in the scene" not in persona_.background


def test_sage_persona_card_shows_the_type_not_the_trait_words_as_people():
    model = FakeUserModel([analysis_json(1)], ["嗯"])
    angry = load_personas(SAGE_PROFILES).personas[0]
    run(converse(Slot("s", angry, "g", 1), ScriptedPolicy(), SimulatedUser(model, UserSettings(max_turns=1))))
    card = model.calls[0]["messages"][0]["content"]
    assert card.startswith("You are 周晓岚. Background: * 姓名：周晓岚")
    assert f"Personality: {NEGATIVE}; traits: 暴躁, 多疑, 刻薄\n" in card


def test_sage_row_from_the_profile_builder_with_topic_and_unknown_type(tmp_path):
    """build_profile.py also writes `topic` and `3-question`; a type SAGE does not define is kept verbatim;
    a profile without a name line gets the neutral label User."""
    row = {"id": "b1", "player": "A 34-year-old primary school teacher who hides stress behind jokes.",
           "scene": "Her school will merge with another and her post may be cut.", "3-question": [
               "Did you see the match?", "Ha, fine, whatever.", "What do you do to relax?"],
           "main_cha": "主动型", "cha_group": ["外向", "急躁"], "topic": "work stress",
           "task": "She wants her care for her pupils seen before any talk about jobs.",
           "first_talk": "Ha, so apparently I might be 'restructured'. Fun times."}
    path = tmp_path / "built.jsonl"
    path.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    loaded = load_personas(path)
    assert loaded.problems == []
    [p] = loaded.personas
    assert (p.name, p.language, p.personality) == ("User", "en", "主动型; traits: 外向, 急躁")
    assert p.situation == "Topic: work stress\nHer school will merge with another and her post may be cut."
    assert p.speaking_style == ("things you have said to a friend: Did you see the match? / Ha, fine, whatever. / "
                                "What do you do to relax?")
    assert p.background == row["player"]


def test_sage_row_with_an_unexpected_key_or_no_first_talk(tmp_path):
    rows = [json.loads(line) for line in SAGE_PROFILES.read_text(encoding="utf-8").splitlines()]
    no_talk = {k: v for k, v in rows[2].items() if k != "first_talk"}
    path = tmp_path / "sage.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                            for r in [rows[0], {**rows[1], "emotion_level": 30}, no_talk,
                                      {**rows[1], "id": "x", "cha_group": [1, 2]}]), encoding="utf-8")
    loaded = load_personas(path)
    assert [p.id for p in loaded.personas] == [rows[0]["id"]]
    extra, missing, bad = loaded.problems
    assert extra.line == 2 and "unexpected key(s) ['emotion_level']" in extra.message
    assert missing.line == 3 and missing.message == (
        "missing SAGE field(s) ['first_talk'] (SAGE's profile/simulator_profile.jsonl has no opening line; "
        "use profile/simulator_profile_withfirsttalk.jsonl)")
    assert bad.line == 4 and bad.message == "cha_group must be a list of strings, got [1, 2]"


def test_chinese_persona_asks_the_user_to_write_chinese():
    model = FakeUserModel([analysis_json(1)], ["好的"])
    zh = persona("zh", "小林", first="我很累", language="zh")
    run(converse(Slot("z", zh, "g", 1), ScriptedPolicy(), SimulatedUser(model, UserSettings(max_turns=2))))
    assert all("Write in Chinese." in c["messages"][0]["content"] for c in model.calls)


def test_missing_persona_file_names_the_bundled_ones(tmp_path):
    with pytest.raises(FileNotFoundError, match="support_seekers"):
        load_personas(tmp_path / "nope.yaml")


# ---------------------------------------------------------------- rewards


def hand_transcript(changes, start=40.0, end_reason="max_turns", tid="t") -> Transcript:
    turns, emotion = [Turn(role="user", text="opening", emotion=start)], start
    for d in changes:
        emotion = min(100.0, max(0.0, emotion + d))
        turns += [Turn(role="supporter", text="reply"), Turn(role="user", text="more", emotion=emotion, change=d,
                                                              raw_change=d)]
    return Transcript(trajectory_id=tid, persona_id="p", group="g", seed=0, start_emotion=start, turns=turns,
                      final_emotion=emotion, end_reason=end_reason)


def test_emotion_reward_by_hand():
    t = hand_transcript([10, -5, 5])  # 40 -> 50 -> 45 -> 50
    # final: 50 / 100
    assert emotion_reward(t, "final") == pytest.approx(0.5)
    # per-turn r_t = d_t / (2B) + 1/2 with B = 10: [1.0, 0.25, 0.75]
    assert step_rewards(t.changes, 10) == pytest.approx([1.0, 0.25, 0.75])
    # step: (1.0 + 0.25 + 0.75) / 3 = 0.666667
    assert emotion_reward(t, "step", max_change=10) == pytest.approx(2 / 3)
    # mixed, gamma 0.9: G = (1.0 * 1 + 0.25 * 0.9 + 0.75 * 0.81) / (1 + 0.9 + 0.81) = 1.8325 / 2.71 = 0.676199
    # alpha 0.5: 0.5 * 0.666667 + 0.5 * 0.676199 = 0.671433
    assert emotion_reward(t, "mixed", max_change=10, alpha=0.5, gamma=0.9) == pytest.approx(0.671433, abs=1e-6)
    # alpha 0 is step, alpha 1 is the normalised discounted return
    assert emotion_reward(t, "mixed", alpha=0.0) == pytest.approx(2 / 3)
    assert emotion_reward(t, "mixed", alpha=1.0, gamma=0.9) == pytest.approx(1.8325 / 2.71)
    # B = 5 on the same changes: r = [1.5, 0.0, 1.0] -> step 2.5 / 3 (the bound is the user's max_change)
    assert emotion_reward(t, "step", max_change=5) == pytest.approx(2.5 / 3)


def test_emotion_reward_of_an_error_transcript_is_none():
    t = hand_transcript([10, -5], end_reason="error")
    assert all(emotion_reward(t, mode) is None for mode in ("final", "step", "mixed"))
    empty = hand_transcript([])  # no measured change: nothing to average
    assert emotion_reward(empty, "step") is None and emotion_reward(empty, "final") == pytest.approx(0.4)


def test_emotion_reward_logs_metrics_and_records():
    transcripts = [hand_transcript([10, -5, 5], tid="a"), hand_transcript([10, 10], start=80, end_reason="success",
                                                                          tid="b"),
                   hand_transcript([3], end_reason="error", tid="c")]
    logged: dict[str, float] = {}
    reward = EmotionReward("final")
    out = reward(prompts=[None] * 3, completions=[None] * 3,
                 transcript=[t.model_dump(mode="json") for t in transcripts], log_metric=logged.__setitem__)
    assert out == [pytest.approx(0.5), pytest.approx(1.0), None]
    assert logged["emotion/final_emotion"] == pytest.approx(75.0)  # (50 + 100) / 2, the error left out
    assert logged["emotion/errors"] == 1.0 and logged["emotion/turns"] == pytest.approx((3 + 2 + 1) / 3)
    assert dict(reward.totals) == {"conversations": 3, "errors": 1}
    assert [r["trajectory_id"] for r in reward.last_records] == ["a", "b", "c"]
    assert reward.last_records[0]["completion"].startswith("Supporter: reply\nUser [+10 -> 50]: more")
    assert reward.last_records[1]["end_reason"] == "success" and len(reward.last_records[0]["turns"]) == 7


def test_emotion_reward_without_the_transcript_column_is_a_clear_error():
    with pytest.raises(ValueError, match="transcript"):
        EmotionReward()(prompts=["p"], completions=["c"])
    with pytest.raises(ValueError, match="transcript"):
        EmotionReward()(prompts=["p", "q"], completions=["c", "d"], transcript=[hand_transcript([1]).model_dump()])
    with pytest.raises(ValueError, match="final, step or mixed"):
        EmotionReward("sum")


# ---------------------------------------------------------------- summary


def test_summarize_simulation_by_hand():
    transcripts = [
        hand_transcript([10, 10, 10, 10, 10, 10], tid="win", end_reason="success"),  # 40 -> 100, 6 turns
        hand_transcript([-10, -10, -10, -5], tid="lose", end_reason="failure"),      # 40 -> 5, 4 turns
        hand_transcript([5, 5, 5, 5, 5, 5, 5, 5], tid="cut"),                       # 40 -> 80, 8 turns
        hand_transcript([-10], tid="broken", end_reason="error"),                   # excluded, counted
    ]
    transcripts[3].turns[-1].error = "user: analysis unparsable (no JSON object) after 3 attempt(s)"
    s = summarize_simulation(transcripts)
    assert (s.conversations, s.scored, s.errors) == (4, 3, 1)
    assert s.score.mean == pytest.approx((100 + 5 + 80) / 3) and s.score.n == 3  # 61.67
    assert s.score.ci_low <= s.score.mean <= s.score.ci_high
    assert (s.successes, s.failures) == (1, 1)
    assert s.mean_turns == pytest.approx((6 + 4 + 8) / 3)
    assert s.end_reasons == {"success": 1, "failure": 1, "max_turns": 1, "error": 1}
    assert s.error_reasons == {"user": 1}
    assert s.per_persona == {"p": pytest.approx(185 / 3)}
    d = s.to_dict()
    assert json.loads(json.dumps(d))["score"]["mean"] == pytest.approx(61.6667, abs=1e-3)
    page = render_simulation_report(transcripts, s, "test")
    assert "data:image/png;base64," in page and "61.7" in page


def test_summarize_only_errors():
    s = summarize_simulation([hand_transcript([1], end_reason="error")])
    assert s.score is None and s.mean_turns is None and s.errors == 1 and s.successes == 0
    assert "no conversation completed" in render_simulation_report([], s, "x")


def test_transcripts_round_trip_as_json():
    t, _, _ = talk([analysis_json(5), analysis_json(3, leave=True)], ["more", "bye"])
    again = Transcript.model_validate_json(t.model_dump_json())
    assert again == t and again.emotions == [40, 45, 48]


def test_settings_reject_bad_values():
    with pytest.raises(ValueError):
        UserSettings(start_emotion=120)
    with pytest.raises(ValueError):
        UserSettings(unknown=1)


# ---------------------------------------------------------------- rubric rewards over a transcript


class QuestionJudge:
    """Met when the response asks a question; an `error` verdict when it contains ERR."""

    def __init__(self):
        self.requests = []

    async def judge(self, requests):
        from rubricrl.core.verdicts import Status, Verdict

        self.requests += requests
        out = []
        for r in requests:
            status = Status.ERROR if "ERR" in r.response else Status.MET if "?" in r.response else Status.UNMET
            out.append([Verdict(criterion_id=c.id, status=status, judge_id="q") for c in r.criteria])
        return out


def question_rubric(tmp_path):
    from rubricrl.rubrics.loading import load_rubric

    path = tmp_path / "q.yaml"
    path.write_text("id: q\ncriteria:\n  - id: asks\n    text: Asks a question.\n    weight: 1\n"
                    "    check: {type: contains, any_of: ['?']}\n")
    return load_rubric(path)


def two_turns(first: str, second: str, end_reason="max_turns", tid="t") -> Transcript:
    return Transcript(trajectory_id=tid, persona_id="p", group="g", seed=0, start_emotion=40, final_emotion=42,
                      end_reason=end_reason, turns=[
                          Turn(role="user", text="I lost my job.", emotion=40),
                          Turn(role="supporter", text=first), Turn(role="user", text="yes", emotion=41, change=1),
                          Turn(role="supporter", text=second), Turn(role="user", text="", emotion=42, change=1)])


def test_dialogue_rubric_reward_per_turn_and_per_conversation(tmp_path):
    from rubricrl.dialogue.rewards import DialogueRubricReward

    rubric = question_rubric(tmp_path)
    t = two_turns("<think>ask first?</think>That is a shock. How are you", "I see, that must hurt?")
    judge = QuestionJudge()
    per_turn = DialogueRubricReward(judge, rubric, "turn", soft=False)
    assert per_turn([None], [None], transcript=[t.model_dump()]) == [0.5]  # turn 1 unmet (think hidden), turn 2 met
    first, second = judge.requests
    assert first.response == "That is a shock. How are you" and [m.content for m in first.conversation] == [
        "I lost my job."]
    assert [m.role for m in second.conversation] == ["user", "assistant", "user"]
    assert second.conversation[1].content == "That is a shock. How are you"
    judge = QuestionJudge()
    whole = DialogueRubricReward(judge, rubric, "conversation", soft=False)
    assert whole([None], [None], transcript=[t]) == [1.0]
    [request] = judge.requests
    assert request.response.startswith("Supporter: That is a shock.") and "ask first" not in request.response


def test_dialogue_rubric_reward_masks_errors(tmp_path):
    from rubricrl.dialogue.rewards import DialogueRubricReward

    judge = QuestionJudge()
    reward = DialogueRubricReward(judge, question_rubric(tmp_path), "turn")
    broken = two_turns("How are you?", "Why?", end_reason="error", tid="broken")
    judge_failed = two_turns("How are you?", "ERR", tid="judge-failed")
    fine = two_turns("How are you?", "Why?", tid="fine")
    out = reward([None] * 3, [None] * 3, transcript=[broken, judge_failed, fine])
    # an error conversation is masked (None), never scored as if only the rubric mattered
    assert out == [None, None, 1.0] and reward.totals["masked"] == 2
    assert len(judge.requests) == 4  # nothing asked about the error conversation
