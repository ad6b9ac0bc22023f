"""The engine on the real bundled SmolLM2-135M-Instruct (torch fp32, CPU)."""
import pytest

from playground.config import GenerationSettings

pytestmark = pytest.mark.integration

PROMPTS = ["What is the capital of France?", "Write a haiku about tokens.", "Count from one to five."]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_streamed_text_matches_generate(smol_engine, prompt):
    trace = smol_engine.generate(prompt, GenerationSettings(max_new_tokens=24))
    backend = smol_engine.backend
    reference = backend.generate_reference(trace.prompt_ids, 24)
    assert trace.output_ids == reference
    assert trace.text == backend.tokenizer.decode(reference, skip_special_tokens=True)


def test_streamed_pieces_join_to_the_answer(smol_engine):
    pieces = [step.text for step in smol_engine.stream("Say hello in French.", GenerationSettings(max_new_tokens=12))]
    assert len(pieces) >= 2 and "".join(pieces).replace("<|im_end|>", "").strip()


def test_seeded_sampled_run_is_reproducible(smol_engine):
    s = GenerationSettings(max_new_tokens=20, temperature=0.9, top_k=40, top_p=0.95, seed=1234)
    a = smol_engine.generate("Tell me a story about a robot.", s)
    b = smol_engine.generate("Tell me a story about a robot.", s)
    c = smol_engine.generate("Tell me a story about a robot.", s.with_(seed=99))
    assert a.output_ids == b.output_ids and a.text == b.text
    assert a.output_ids != c.output_ids


def test_chat_template_is_applied(smol_engine):
    trace = smol_engine.generate("What is the capital of France?", GenerationSettings(max_new_tokens=16))
    assert trace.prompt_text.startswith("<|im_start|>system\n")
    assert "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n" in trace.prompt_text
    tok = smol_engine.backend.tokenizer
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    assert trace.prompt_ids[0] == im_start and trace.prompt_ids.count(im_start) == 3
    assert "Paris" in trace.text and trace.stop_reason == "eos"


def test_raw_completion_mode_reads_the_prompt_as_is(smol_engine):
    trace = smol_engine.generate("The capital of France is", GenerationSettings(max_new_tokens=4, chat=False))
    assert trace.prompt_text == "The capital of France is"
    assert trace.prompt_ids == smol_engine.backend.tokenizer("The capital of France is")["input_ids"]


def test_kv_bytes_match_the_formula_on_the_real_model(smol_engine):
    trace = smol_engine.generate("Hi", GenerationSettings(max_new_tokens=5))
    assert trace.kv_shape.formula_bytes(1) == 2 * 30 * 3 * 64 * 4
    assert all(s.kv_bytes == trace.kv_shape.formula_bytes(s.seq_len) for s in trace.steps)


SEED = "Serving LLMs is not like serving web apps."


def test_raw_mode_reads_exactly_what_was_typed(smol_engine):
    """The GGUF says add_bos_token = False: no <|im_start|> before the user's text (it was 12 ids, id 1 first)."""
    _, ids = smol_engine.prompt_ids(SEED, GenerationSettings(chat=False))
    assert ids == smol_engine.backend.tokenizer(SEED, add_special_tokens=False)["input_ids"]
    assert len(ids) == 11 and ids[0] != smol_engine.backend.tokenizer.convert_tokens_to_ids("<|im_start|>")


def test_the_chat_template_opens_each_message_once(smol_engine):
    tok = smol_engine.backend.tokenizer
    start, end = (tok.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|im_end|>"))
    _, ids = smol_engine.prompt_ids(SEED, GenerationSettings())   # system, user, and the assistant's opening
    assert ids.count(start) == 3 and ids.count(end) == 2 and ids[0] == start
    _, ids = smol_engine.prompt_ids(SEED, GenerationSettings(system_prompt="Be brief."))
    assert ids.count(start) == 3
    assert tok.eos_token == "<|im_end|>" and end in smol_engine.backend.eos_token_ids


def test_the_tokens_view_and_the_engine_agree_in_raw_mode(smol_engine):
    from playground.tokens.prompt import prompt_tokens
    view = prompt_tokens(smol_engine, SEED, GenerationSettings(chat=False))
    assert "the model's ids match these chips" in view.summary and "11 tokens" in view.html
