"""A tiny random-weight Llama and a byte-level BPE tokenizer, both built in-process in well under a second.

For unit tests and fast UI work (`PLAYGROUND_MODEL=tiny`): no downloads, no files. Its output is
noise, but every mechanism (chat template, KV cache, sampling, timing) is the real one.
"""
from __future__ import annotations

CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_CORPUS = [
    "The capital of France is Paris. A model reads tokens, not words.",
    "Prefill reads the whole prompt once; decoding predicts one token at a time.",
    "The KV cache grows with every generated token. Latency, cost and memory scale with tokens.",
    "Summarize the following document in three sentences, please!",
]


def build_tiny_tokenizer(vocab_size: int = 400):
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(_CORPUS * 4, vocab_size=vocab_size, min_frequency=1,
                            special_tokens=SPECIAL_TOKENS, show_progress=False)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|im_start|>",
                                  eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_tiny_model(seed: int = 0, layers: int = 2, hidden: int = 64, heads: int = 4, kv_heads: int = 2,
                     context: int = 512):
    """(model, tokenizer): a LlamaConfig with GQA (heads != kv_heads) so the KV formula is exercised."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = build_tiny_tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 2,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=context, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok
