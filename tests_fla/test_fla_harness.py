"""lm-eval's cached-decoding wrapper (hf_deltalog.harness.CachedHFLM) on FLA's own models: both caches score like a
full forward. The baseline ("default") must be FLA's own cache handed to the model: FLA 0.6.0's default generate
drops its cache after the prompt under transformers 5.24 (tests_fla/test_fla_generate.py), which this would catch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from helpers import _CLASSES, family_config

pytest.importorskip("lm_eval", reason="lm_eval is part of the dev extra (pip install -e '.[dev,fla]')")
from lm_eval.models.huggingface import HFLM  # noqa: E402

from hf_deltalog.harness import CachedHFLM  # noqa: E402
from hf_deltalog.interpreter import fused_recurrent_under_interpreter  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
TOKENIZER = Path(__file__).resolve().parents[1] / "eval" / "checkpoints" / "gdn-shakespeare"


@pytest.mark.parametrize("cache", ["default", "deltalog"])
@pytest.mark.parametrize("family", ["rwkv6", "gated_deltanet"])
def test_cached_scoring_matches_full_forward(family, cache):
    tok = transformers.AutoTokenizer.from_pretrained(TOKENIZER, local_files_only=True)
    config = family_config(family, layers=2)
    config.vocab_size, config.pad_token_id = len(tok), tok.pad_token_id
    config.bos_token_id, config.eos_token_id = tok.bos_token_id, tok.eos_token_id
    torch.manual_seed(0)
    model = _CLASSES[family](config).eval()
    with torch.no_grad():  # livelier decays than FLA's init, so that the carried state matters
        for module in model.modules():
            if hasattr(module, "A_log"):
                module.A_log.copy_(torch.empty_like(module.A_log).uniform_(-3.0, 0.5))
            if hasattr(module, "bonus"):
                module.bonus.normal_(0.0, 0.5)
    fused_recurrent_under_interpreter(model)
    # merge_interval configures DeltaLogCache only (refused with the default cache, which would ignore it)
    lm = CachedHFLM(pretrained=model, tokenizer=tok, batch_size=3, cache=cache,
                    merge_interval=2 if cache == "deltalog" else None)
    assert lm.is_fla_model
    texts = [("ROMEO:\nBut soft, what light", " through yonder window breaks?"),
             ("JULIET:\nO Romeo, Romeo!", " wherefore art thou Romeo?\nDeny thy father"),
             ("First Citizen:\nBefore we proceed", " any further, hear me speak."),
             ("MENENIUS:\nWhat work's, my countrymen,", " in hand? where go you")]
    requests = [((c, k), lm.tok_encode(c), lm.tok_encode(k)) for c, k in texts]
    ours = lm._loglikelihood_tokens(requests, disable_tqdm=True)
    full = HFLM._loglikelihood_tokens(lm, requests, disable_tqdm=True)  # upstream: one forward, no cache
    assert [g for _, g in ours] == [g for _, g in full]
    torch.testing.assert_close(torch.tensor([s for s, _ in ours]), torch.tensor([s for s, _ in full]),
                               rtol=1e-5, atol=1e-4)
    if cache == "deltalog":
        assert lm.cache_plan() and all(p["merge_interval"] == 2 for p in lm.cache_plan().values())
