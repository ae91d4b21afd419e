"""The tiny-shakespeare data split, the training script (a CPU smoke run) and the committed checkpoints."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "eval"))
import shakespeare  # noqa: E402

CHECKPOINTS = ROOT / "eval" / "checkpoints"
COMMITTED = sorted(p.parent.name for p in CHECKPOINTS.glob("*/config.json"))  # every committed checkpoint


def test_gdn_checkpoint_is_committed():
    assert "gdn-shakespeare" in COMMITTED  # the quickstart's and the parity tests' default


def test_split_is_by_position_at_blank_lines():
    text = shakespeare.read_text()
    parts = shakespeare.split(text)
    assert parts["train"] + parts["validation"] + parts["test"] == text
    assert parts["train"].endswith("\n\n") and parts["validation"].endswith("\n\n")
    for name, lo, hi in [("train", 0.899, 0.905), ("validation", 0.049, 0.055)]:
        assert lo < len(parts[name]) / len(text) < hi, name


def test_corpus_checksum_is_enforced(tmp_path):
    changed = tmp_path / "tinyshakespeare.txt"
    changed.write_text(shakespeare.read_text() + "x")
    with pytest.raises(ValueError, match="sha256"):
        shakespeare.read_text(changed)
    assert shakespeare.read_text(changed, sha256=None).endswith("x")


def test_unigram_perplexities_by_hand():
    # test tokens 0 0 1 1: fitted unigram p = 1/2 each -> perplexity 2; training counts {0: 3, 1: 0} over a vocabulary
    # of 2 with add-one: p(0) = 4/5, p(1) = 1/5 -> exp(-(2 ln 0.8 + 2 ln 0.2) / 4) = 1 / sqrt(0.16) = 2.5
    ppl = shakespeare.unigram_perplexities([0, 0, 0], [0, 0, 1, 1], vocab_size=2)
    assert ppl["test_fit"] == pytest.approx(2.0)
    assert ppl["train_add_one"] == pytest.approx(2.5)


def test_task_documents_are_the_committed_ones():
    """The committed task file is exactly what `build_tasks` makes from the test split (no hand edits, no drift)."""
    docs = shakespeare.build_tasks(shakespeare.split()["test"], n_docs=500)
    committed = [json.loads(line) for line in shakespeare.TASK_DOCS.read_text(encoding="utf-8").splitlines()]
    assert committed == docs
    test_lines = set(shakespeare.split()["test"].split("\n"))
    for d in docs:
        assert d["choices"][d["label"]] == d["next_line"] and len(set(d["choices"])) == 4
        assert d["next_line"] in test_lines and d["context"].endswith("\n")
        assert shakespeare.split()["test"].count(d["context"] + d["next_line"]) >= 1


def test_train_tiny_smoke(tmp_path):
    """A few CPU steps of the real script write a normal from_pretrained directory that loads offline."""
    out = tmp_path / "gdn"
    from conftest import python_script_command

    cmd = python_script_command(ROOT / "eval" / "train_tiny.py", "train", "--model", "gdn", "--smoke", "--device", "cpu",
                                "--out", out)
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    log = json.loads((out / "training_log.json").read_text())
    assert log["steps_run"] == 4 and log["architecture"] == "qwen3_5_text" and log["device"] == "cpu"
    assert math.isfinite(log["test_perplexity"]) and log["unigram_perplexity"]["test_fit"] > 1
    _check_checkpoint(out)


def _check_checkpoint(path: Path) -> transformers.PreTrainedModel | None:
    size = sum(f.stat().st_size for f in path.iterdir())
    assert size <= 10 * 10**6, f"{path} is {size / 1e6:.1f} MB"
    tok = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    text = "ROMEO:\nBut soft, what light"
    assert tok.decode(tok(text)["input_ids"]) == text  # byte-level: lossless
    model_type = json.loads((path / "config.json").read_text())["model_type"]
    if model_type not in CONFIG_MAPPING_NAMES:  # FLA's RWKV6: its layers need flash-linear-attention (a GPU)
        return None
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, local_files_only=True)
    assert len(tok) == model.config.vocab_size and tok.pad_token_id is not None
    return model


@pytest.mark.parametrize("name", COMMITTED)
def test_committed_checkpoint(name):
    """Each committed checkpoint fits in 10 MB, loads offline (RWKV6: its tokenizer and config; the model needs FLA),
    has real head sizes and records that its test perplexity is at most half the unigram perplexity of the same
    tokens (both measured by eval/train_tiny.py)."""
    path = CHECKPOINTS / name
    _check_checkpoint(path)
    cfg = json.loads((path / "config.json").read_text())
    if cfg["model_type"] == "qwen3_5_text":
        assert cfg["linear_key_head_dim"] == cfg["linear_value_head_dim"] == 128
        assert cfg["linear_num_value_heads"] != cfg["linear_num_key_heads"]
    elif cfg["model_type"] == "kimi_linear":
        assert cfg["linear_head_dim"] == 128
    else:
        assert cfg["model_type"] == "rwkv6" and cfg["hidden_size"] * cfg["expand_k"] / cfg["num_heads"] == 128
    log = json.loads((path / "training_log.json").read_text())
    assert log["test_perplexity"] <= log["unigram_perplexity"]["test_fit"] / 2, log["test_perplexity"]
    assert (path / "loss_curve.png").exists()
