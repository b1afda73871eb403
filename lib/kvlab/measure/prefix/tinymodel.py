"""The labs' tiny Llama: random weights, a locally trained tokenizer, built the same way every time.

No model can be downloaded where the book is tested, yet the labs want a real serving engine to
load a real model folder. :func:`build_tiny_llama` makes one: a Hugging Face Llama configuration
(2 layers, hidden size 128, 4 heads of 32, 2 KV heads) with weights drawn from a seeded generator, and
a byte-level BPE tokenizer trained with ``tokenizers`` on text generated from
:mod:`kvlab.measure.prefix.prompts`, with a chat template. vLLM loads the folder like any checkpoint.

What the answers say is noise (the weights are random); what the labs measure does not depend on
it: prefix caching, TTFT, counters and block accounting depend only on token ids and shapes.

Needs ``torch``, ``transformers``, ``tokenizers`` and ``safetensors`` (the engine environment,
``make engine``). Run as ``python -m kvlab.measure.prefix.tinymodel OUT_DIR``; ``make engine`` does it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from ..._validate import check_int

#: Where ``make engine`` builds the model (relative to the repository root; gitignored).
DEFAULT_DIR = Path(__file__).resolve().parents[4] / "build" / "tiny-llama"

#: Role markers of the chat template; each is one special token.
SPECIAL_TOKENS = ("<|begin|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>", "<|pad|>")

#: The chat template: role marker, newline, content, end marker; then the assistant marker.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

#: The model's shape (a Llama, small enough to start in seconds on two CPU cores).
SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 16384,
}


def training_text(seed: int = 0, documents: int = 24) -> list[str]:
    """The tokenizer's training corpus: system prompts, questions, timestamps and digits, all
    generated deterministically by :mod:`kvlab.measure.prefix.prompts`."""
    from . import prompts

    docs = [prompts.system_prompt_text(words=400, seed=seed + i) for i in range(documents)]
    docs += prompts.questions(120)
    docs += [prompts.timestamp_text(i) for i in range(200)]
    docs.append(" ".join(str(i) for i in range(1000)))
    return docs


def train_tokenizer(vocab_size: int = 2048, seed: int = 0):
    """A byte-level BPE tokenizer (``tokenizers.Tokenizer``) trained on :func:`training_text`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    vocab_size = check_int("vocab_size", vocab_size, lo=300, hi=65536)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(seed), trainer=trainer)
    return tok


def folder_digest(path: str | Path) -> str:
    """A short sha256 over every file of the model folder (names and bytes), to show that two
    builds are identical."""
    h = hashlib.sha256()
    root = Path(path)
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def build_tiny_llama(
    out_dir: str | Path = DEFAULT_DIR, seed: int = 0, vocab_size: int = 2048
) -> dict:
    """Build the tiny Llama into ``out_dir`` (weights in float32 safetensors, tokenizer, chat
    template). Returns a summary: parameters, vocabulary, digest of the folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    seed = check_int("seed", seed, lo=0)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    raw = train_tokenizer(vocab_size, seed)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token="<|begin|>",
        eos_token="<|end|>",
        pad_token="<|pad|>",
        model_max_length=SHAPE["max_position_embeddings"],
    )
    tok.chat_template = CHAT_TEMPLATE
    ids = {t: raw.token_to_id(t) for t in SPECIAL_TOKENS}
    config = LlamaConfig(
        vocab_size=raw.get_vocab_size(),
        bos_token_id=ids["<|begin|>"],
        eos_token_id=ids["<|end|>"],
        pad_token_id=ids["<|pad|>"],
        tie_word_embeddings=False,
        rope_theta=10000.0,
        **SHAPE,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    summary = {
        "params": int(sum(p.numel() for p in model.parameters())),
        "vocab_size": raw.get_vocab_size(),
        "seed": seed,
        **SHAPE,
    }
    (out / "kvlab-tiny-llama.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
    summary["digest"] = folder_digest(out)
    summary["path"] = str(out)
    return summary


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    out = Path(args[0]) if args else DEFAULT_DIR
    print(json.dumps(build_tiny_llama(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
