"""The sampler's greedy path and top-k, against torch's own (the sampler picks them without torch's argmax/topk)."""
import numpy as np
import pytest
import torch

from playground.config import GenerationSettings
from playground.sampling import Detokenizer, Sampler, top_k_ids


@pytest.mark.parametrize("n,k", [(49152, 5), (49152, 20), (49152, 1), (1000, 10), (300, 5), (10, 10), (7, 3), (5, 0)])
def test_top_k_ids_are_torch_topks_values_largest_first(n, k):
    rng = np.random.default_rng(n + k)
    for trial in range(50):
        values = rng.standard_normal(n).astype(np.float32)
        if trial % 3 == 0:
            values = np.round(values, 1)   # many ties: which of equal values comes first may differ
        got = top_k_ids(values, k)
        want = torch.topk(torch.from_numpy(values), k).indices.tolist()
        assert len(set(got)) == len(got) == k
        assert values[got].tolist() == values[want].tolist()   # the same values, in the same (descending) order


def test_greedy_pick_is_the_first_maximum_with_softmax_probabilities():
    logits = torch.tensor([0.5, 3.0, -1.0, 3.0, 2.0])
    pick = Sampler(GenerationSettings(temperature=0.0)).choose([1, 2], logits, 3)
    probs = torch.softmax(logits, -1)
    assert pick.token == 1 and pick.sample_prob == 1.0   # argmax's tie rule: the lowest index
    assert pick.prob == pytest.approx(float(probs[1]))
    assert [i for i, _, _ in pick.top] in ([1, 3, 4], [3, 1, 4])
    assert [p for _, p, _ in pick.top] == pytest.approx([float(probs[1]), float(probs[3]), float(probs[4])])
    assert [q for i, _, q in pick.top] == [1.0 if i == 1 else 0.0 for i, _, _ in pick.top]


def test_a_sampled_pick_keeps_its_top_k_in_model_probability_order():
    logits = torch.tensor([0.1, 2.0, 1.0, -3.0])
    pick = Sampler(GenerationSettings(temperature=0.7, top_k=3, seed=5)).choose([0], logits, 4)
    assert [i for i, _, _ in pick.top] == [1, 2, 0, 3]
    assert pick.top[-1][2] == 0.0 and sum(q for _, _, q in pick.top) == pytest.approx(1.0)


class CountingTokenizer:
    all_special_ids = [0]

    def __init__(self):
        self.decoded = 0

    def decode(self, ids):
        self.decoded += 1
        return "".join(f"<{i}>" for i in ids)


def test_a_candidates_text_is_decoded_once_per_tokenizer():
    tok = CountingTokenizer()
    first, second = Detokenizer(tok, [1, 2]), Detokenizer(tok, [3])
    assert [first.token_text(7), first.token_text(7), second.token_text(7)] == ["<7>"] * 3
    assert tok.decoded == 1
    assert Detokenizer(CountingTokenizer(), []).token_text(7) == "<7>"   # another tokenizer: its own texts
