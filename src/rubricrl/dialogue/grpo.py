"""Multi-turn GRPO through TRL's `rollout_func`: the policy being trained talks to simulated users.

For each prompt row (a persona's opening message; TRL repeats it `num_generations` times in a
row), one conversation runs; the G conversations of a group meet identically seeded users. A
trajectory is one token sequence: `prompt_ids` (system + opening message) then `completion_ids`
= policy turn, user turn, policy turn, ... `env_mask` is 1 on the tokens the policy generated
and 0 on user and chat-template tokens, so TRL's loss trains only the policy's own tokens.
Transcripts go to the reward functions in the `transcript` column, keyed by trajectory id.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from rubricrl.dialogue.persona import Persona
from rubricrl.dialogue.rollout import SUPPORTER_SYSTEM, PolicyReply, Slot, Transcript, converse, user_seed
from rubricrl.dialogue.user import SimulatedUser


def opening_prompt(persona: Persona, system: str = SUPPORTER_SYSTEM) -> list[dict[str, str]]:
    """The dataset prompt for a persona: the rollout recognises the persona by its opening message."""
    return [{"role": "system", "content": system}, {"role": "user", "content": persona.first_message}]


@dataclass
class TokenTrajectory:
    prompt_ids: list[int]
    messages: list[dict[str, str]]  # as rendered for the policy, with the policy's full text
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)


def between_tokens(tokenizer, messages: list[dict[str, str]], user_text: str) -> list[int]:
    """Template tokens after the policy's last end-of-turn token up to the next assistant turn's
    start, with the user's message inside: `messages` ends with the policy's (assistant) turn."""
    eos = tokenizer.eos_token
    before = tokenizer.apply_chat_template(messages, tokenize=False)
    after = tokenizer.apply_chat_template(messages + [{"role": "user", "content": user_text}], tokenize=False,
                                          add_generation_prompt=True)
    cut = before.rfind(eos) + len(eos)
    if cut < len(eos) or not after.startswith(before[:cut]):
        raise ValueError("the chat template does not render a conversation as a prefix of its continuation; "
                         "multi-turn training needs a template that appends turns (e.g. ChatML)")
    return tokenizer.encode(after[cut:], add_special_tokens=False)


class LockstepGenerator:
    """Collects the policy turns of all running conversations and generates them as one batch
    once every running conversation is waiting (the simulated users answer in between)."""

    def __init__(self, generate, active: int):
        self.generate = generate  # list[list[int]] -> list[list[int]] (new tokens per sequence)
        self.active = active
        self.pending: list[tuple[list[int], asyncio.Future]] = []

    async def ask(self, ids: list[int]) -> list[int]:
        future = asyncio.get_running_loop().create_future()
        self.pending.append((ids, future))
        self._maybe_flush()
        return await future

    def finished(self) -> None:
        self.active -= 1
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if not self.pending or len(self.pending) < self.active:
            return
        batch, self.pending = self.pending, []
        try:
            outputs = self.generate([ids for ids, _ in batch])
            for (_, future), out in zip(batch, outputs):
                future.set_result(out)
        except Exception as exc:  # noqa: BLE001 - every waiting conversation gets the failure
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)


class DialogueRollout:
    """`rollout_func(prompts, trainer)` for TRL's GRPOTrainer."""

    def __init__(self, personas: list[Persona], user: SimulatedUser, *, max_new_tokens: int = 64, seed: int = 0):
        self.by_opening = {p.first_message: p for p in personas}
        if len(self.by_opening) != len(personas):
            raise ValueError("personas used for training need distinct first messages (the rollout recognises "
                             "a persona by its opening message)")
        self.user, self.max_new_tokens, self.seed = user, max_new_tokens, seed
        self.last_transcripts: list[Transcript] = []

    def persona_for(self, prompt: list[dict[str, str]]) -> Persona:
        opening = next(m["content"] for m in reversed(prompt) if m["role"] == "user")
        if opening not in self.by_opening:
            raise ValueError(f"no persona opens with {opening[:60]!r}; build the dataset with opening_prompt()")
        return self.by_opening[opening]

    def __call__(self, prompts: list, trainer) -> dict:
        tokenizer = trainer.processing_class
        group_size = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        step = trainer.state.global_step
        slots, states = [], {}
        for i, prompt in enumerate(prompts):
            persona = self.persona_for(prompt)
            group = f"step{step}/{persona.id}/g{i // group_size}"
            slot = Slot(f"{group}/s{i % group_size}", persona, group, user_seed(self.seed, persona.id, group))
            ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                                return_dict=True)["input_ids"]
            slots.append(slot)
            states[slot.trajectory_id] = TokenTrajectory(list(ids), [dict(m) for m in prompt])
        transcripts = asyncio.run(self._run(slots, states, trainer))
        self.last_transcripts = [transcripts[s.trajectory_id] for s in slots]
        ordered = [states[s.trajectory_id] for s in slots]
        return {"prompt_ids": [t.prompt_ids for t in ordered], "completion_ids": [t.completion_ids for t in ordered],
                "logprobs": None, "env_mask": [t.env_mask for t in ordered],
                "transcript": [t.model_dump(mode="json") for t in self.last_transcripts]}

    async def _run(self, slots: list[Slot], states: dict[str, TokenTrajectory], trainer) -> dict[str, Transcript]:
        tokenizer = trainer.processing_class
        lockstep = LockstepGenerator(lambda batch: self._generate(trainer, batch), len(slots))

        async def policy(slot: Slot, messages: list[dict[str, str]]) -> PolicyReply:
            traj = states[slot.trajectory_id]
            if traj.completion_ids:  # a user turn arrived since the policy last spoke
                user_text = messages[-1]["content"]
                segment = between_tokens(tokenizer, traj.messages, user_text)
                traj.completion_ids += segment
                traj.env_mask += [0] * len(segment)
                traj.messages.append({"role": "user", "content": user_text})
            new = await lockstep.ask(traj.prompt_ids + traj.completion_ids)
            generated = new
            if tokenizer.eos_token_id in new:
                generated = new[: new.index(tokenizer.eos_token_id) + 1]
                traj.completion_ids += generated
                traj.env_mask += [1] * len(generated)
            else:  # cut at max_new_tokens: close the turn with an end token the policy is not trained on
                traj.completion_ids += generated + [tokenizer.eos_token_id]
                traj.env_mask += [1] * len(generated) + [0]
            text = tokenizer.decode(generated, skip_special_tokens=True).strip()
            traj.messages.append({"role": "assistant", "content": text})
            return PolicyReply(text)

        async def one(slot: Slot) -> Transcript:
            try:
                return await converse(slot, policy, self.user)
            finally:
                lockstep.finished()

        done = await asyncio.gather(*(one(s) for s in slots))
        return {t.trajectory_id: t for t in done}

    def _generate(self, trainer, batch: list[list[int]]) -> list[list[int]]:
        import torch

        tokenizer, model = trainer.processing_class, trainer.accelerator.unwrap_model(trainer.model)
        width = max(len(ids) for ids in batch)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in batch], device=model.device)
        attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch], device=model.device)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                out = model.generate(input_ids=input_ids, attention_mask=attention, max_new_tokens=self.max_new_tokens,
                                     do_sample=True, temperature=trainer.args.temperature, top_p=trainer.args.top_p,
                                     pad_token_id=pad)
        finally:
            model.train(was_training)
        new = out[:, width:].tolist()
        return [_until_pad(row, tokenizer.eos_token_id, pad) for row in new]


def _until_pad(row: list[int], eos: int, pad: int) -> list[int]:
    """Generated tokens up to and including the first end token (generate pads after it)."""
    return row[: row.index(eos) + 1] if eos in row else [t for t in row if t != pad] if pad != eos else row
