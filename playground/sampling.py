"""Choosing each next token, and its text: the sampler and the incremental detokenizer.

    sampler = Sampler(GenerationSettings(temperature=0.8, top_k=50, seed=1))
    token, prob, top = sampler.choose(ids, logits, k=5)      # (id, its probability, [(id, prob)] best first)
    piece = Detokenizer(tokenizer, prompt_ids).add(token)     # "" until a multi-byte character completes

Left out: repetition penalties and other logits processors (transformers has them; none is wired in).
"""
from __future__ import annotations

import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from .config import GenerationSettings


class Sampler:
    """Greedy argmax, or transformers' warpers (temperature -> top-k -> top-p, as in generate()) then a draw."""

    def __init__(self, settings: GenerationSettings):
        self.greedy = settings.greedy
        self.warpers = LogitsProcessorList()
        if not self.greedy:
            self.warpers.append(TemperatureLogitsWarper(float(settings.temperature)))
            if settings.top_k:
                self.warpers.append(TopKLogitsWarper(settings.top_k))
            if settings.top_p < 1.0:
                self.warpers.append(TopPLogitsWarper(float(settings.top_p)))
        self.generator = torch.Generator(device="cpu")
        if settings.seed is not None:
            self.generator.manual_seed(settings.seed)
        else:
            self.generator.seed()

    def choose(self, ids: list[int], logits, k: int) -> tuple[int, float, list[tuple[int, float]]]:
        """(token id, its probability, top-k (id, prob)) from the distribution the token is drawn from."""
        logits = logits.detach().to("cpu", torch.float32)
        if self.greedy:
            probs = torch.softmax(logits, -1)
            token = int(torch.argmax(logits))
        else:
            scores = self.warpers(torch.tensor([ids]), logits[None].clone())[0]
            probs = torch.softmax(scores, -1)
            token = int(torch.multinomial(probs, 1, generator=self.generator))
        top_p, top_i = torch.topk(probs, min(k, probs.numel()))
        return token, float(probs[token]), list(zip(top_i.tolist(), top_p.tolist()))


# --- text pieces

class Detokenizer:
    """Incremental, UTF-8-safe detokenization (the offsets scheme vLLM uses).

    A token that ends inside a multi-byte character yields "" until the character completes, so no
    piece ever carries a U+FFFD that the full text would not have. Decoding is from a small window
    before the new token, so leading-space rules of the tokenizer are respected.
    """

    def __init__(self, tokenizer, prompt_ids: list[int]):
        self.tok = tokenizer
        self.ids = list(prompt_ids[-6:])
        self.prefix_offset, self.read_offset = 0, len(self.ids)
        self.special_ids = frozenset(tokenizer.all_special_ids) | frozenset(
            getattr(tokenizer, "added_tokens_decoder", {}).keys())

    def add(self, token_id: int) -> str:
        self.ids.append(token_id)
        prefix = self.tok.decode(self.ids[self.prefix_offset:self.read_offset])
        full = self.tok.decode(self.ids[self.prefix_offset:])
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            return full[len(prefix):]
        return ""

    def token_text(self, token_id: int) -> str:
        """A candidate's text on its own (may be a partial character: then shown as its bytes)."""
        text = self.tok.decode([token_id])
        if "\ufffd" in text:
            raw = self.tok.convert_ids_to_tokens(token_id)
            return f"<{raw}>" if isinstance(raw, str) else f"<id {token_id}>"
        return text
