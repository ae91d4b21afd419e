"""Tiny-shakespeare data for the trained tiny checkpoints and the local lm-eval tasks.

- `split()`: the fixed train / validation / test split by position (90 / 5 / 5 % of the characters, each cut moved
  forward to the next blank line).
- `train_tokenizer()`: a byte-level BPE tokenizer (`tokenizers`) trained on the training split only.
- `unigram_perplexities()`: the perplexity of unigram models of the same tokens, the baseline a checkpoint must beat.
- `build_tasks()`: the documents of the local lm-eval tasks (next-line generation and four-way next-line choice) from
  the test split, written to `eval/tasks/shakespeare/shakespeare_test.jsonl`.

    python eval/shakespeare.py build-tasks [--docs 500]     # rewrite the task documents (deterministic)
    python eval/shakespeare.py stats                        # split sizes
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
from collections import Counter
from pathlib import Path

from cli_types import positive_int

HERE = Path(__file__).resolve().parent
TEXT = HERE / "data" / "tinyshakespeare.txt"
TEXT_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TASK_DOCS = HERE / "tasks" / "shakespeare" / "shakespeare_test.jsonl"
EOS, PAD = "<|endoftext|>", "<|pad|>"
FRACTIONS = (0.90, 0.95)  # train = [0, 0.90), validation = [0.90, 0.95), test = [0.95, 1.0) of the characters


def read_text(path: Path = TEXT, sha256: str | None = TEXT_SHA256) -> str:
    """The corpus, checked against `sha256` unless it is None (a different file would silently change every split).

    Raises:
        ValueError: the file's digest is not `sha256`.
    """
    data = Path(path).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if sha256 is not None and digest != sha256:
        raise ValueError(f"{path}: sha256 {digest}, expected {sha256} (see eval/data/README.md)")
    return data.decode("utf-8")


def split(text: str | None = None) -> dict[str, str]:
    """{"train", "validation", "test"}: consecutive pieces of the corpus, cut at the first blank line at or after
    90 % and 95 % of the characters."""
    text = read_text() if text is None else text
    cuts = []
    for fraction in FRACTIONS:
        at = text.find("\n\n", int(fraction * len(text)))
        if at < 0:
            raise ValueError("no blank line after the split point")
        cuts.append(at + 2)
    return dict(train=text[:cuts[0]], validation=text[cuts[0]:cuts[1]], test=text[cuts[1]:])


def train_tokenizer(train_text: str, vocab_size: int = 2048):
    """A byte-level BPE tokenizer with `vocab_size` entries (256 bytes, merges, `<|endoftext|>` = bos = eos and
    `<|pad|>`), trained on `train_text` only; returned as a `transformers.PreTrainedTokenizerFast` (left padding)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, PAD], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_text.splitlines(keepends=True), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS, pad_token=PAD,
                                   padding_side="left", model_max_length=2048)


def unigram_perplexities(train_ids: list[int], test_ids: list[int], vocab_size: int) -> dict[str, float]:
    """Perplexity of the test tokens under two unigram models of the same tokenization.

    `train_add_one`: token frequencies of the training split with add-one smoothing over the vocabulary (a held-out
    estimate, like the trained model's). `test_fit`: the frequencies of the test tokens themselves, the lowest
    perplexity any unigram model reaches on them (exp of their entropy); the acceptance check uses this one.
    """
    train, test = Counter(train_ids), Counter(test_ids)
    n_train, n_test = len(train_ids), len(test_ids)
    nll_add_one = -sum(c * math.log((train[t] + 1) / (n_train + vocab_size)) for t, c in test.items()) / n_test
    nll_fit = -sum(c * math.log(c / n_test) for c in test.values()) / n_test
    return dict(train_add_one=math.exp(nll_add_one), test_fit=math.exp(nll_fit))


def build_tasks(test_text: str, n_docs: int = 500, seed: int = 1234, max_context_chars: int = 300) -> list[dict]:
    """Documents for the two local lm-eval tasks, from the test split.

    Each document is a non-empty line of the test split (`next_line`, without its newline) and the whole lines before
    it, at most `max_context_chars` characters and at least one line (`context`, ending in a newline). `choices`
    holds `next_line` and three other distinct non-empty lines of the test split in a shuffled order, `label` the
    index of `next_line`. Documents are a seeded sample of all such lines, in corpus order.
    """
    lines = test_text.split("\n")
    rng = random.Random(seed)
    candidates = []
    for i in range(1, len(lines)):
        if not lines[i].strip():
            continue
        start, size = i, 0
        while start > 0 and size + len(lines[start - 1]) + 1 <= max_context_chars:
            start -= 1
            size += len(lines[start]) + 1
        if start < i:
            candidates.append((start, i))
    if n_docs > len(candidates):
        raise ValueError(f"asked for {n_docs} documents, the test split has {len(candidates)} candidate lines")
    pool = sorted({line for line in lines if line.strip()})
    docs = []
    for k, (start, i) in enumerate(sorted(rng.sample(candidates, n_docs))):
        target = lines[i]
        distractors = rng.sample([line for line in pool if line != target], 3)
        choices = [target] + distractors
        rng.shuffle(choices)
        docs.append(dict(id=k, line=i, context="\n".join(lines[start:i]) + "\n", next_line=target, choices=choices,
                         label=choices.index(target)))
    return docs


def write_jsonl(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build-tasks", help="write the local task documents from the test split")
    b.add_argument("--docs", type=positive_int, default=500, help="documents to write (default 500, the committed set)")
    b.add_argument("--out", type=Path, default=TASK_DOCS)
    sub.add_parser("stats", help="print the split sizes")
    args = parser.parse_args()
    parts = split()
    if args.command == "stats":
        for name, part in parts.items():
            print(f"{name:10} {len(part):9,d} characters {part.count(chr(10)):7,d} lines")
    else:
        docs = build_tasks(parts["test"], args.docs)
        write_jsonl(docs, args.out)
        print(f"wrote {len(docs)} documents to {args.out}")


if __name__ == "__main__":
    main()
