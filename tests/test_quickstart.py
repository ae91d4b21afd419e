"""The README's first command: examples/quickstart.py runs on the bundled checkpoint, both caches give the same tokens,
and the decode times it prints are positive.

The quickstart reads the decode time within one generate call (a streamer's timestamps from the first generated token
to the last), after an untimed warm-up call. It used to subtract a separately timed one-token generate from a full one,
which printed negative times when the one-token call carried the first call's setup or a loaded CPU's noise."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch
import transformers
from conftest import python_script_command

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"


def test_quickstart_runs_and_reports_positive_decode_times():
    # FLA hidden as in this process (conftest): the README's quickstart environment has no FLA
    run = subprocess.run(python_script_command(SCRIPT, "--new-tokens", "12", "--device", "cpu"), capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert "token agreement: 100.0% (identical)" in out, out
    # what the layers ran, read from the cache after generate (on the CPU the PyTorch backend logs at M = 8)
    assert "DeltaLog layers ran M = 8\n" in out, out
    times = re.search(r"decode ms per output token, median \(range\) of 3 runs: default cache (\S+) \(\S+\), "
                      r"DeltaLogCache (\S+) \(\S+\)", out)
    assert times is not None, out
    assert all(float(t) > 0 for t in times.groups()), times.group(0)


def test_quickstart_refuses_bad_options_and_fla_checkpoints():
    """--new-tokens 1 divided by zero; an FLA checkpoint failed in transformers' Auto classes (found by the fourteenth
    review). Both now exit with argparse's message."""
    ckpt = SCRIPT.parents[1] / "eval" / "checkpoints" / "rwkv6-shakespeare"
    for args, message in ((["--new-tokens", "1"], "--new-tokens must be at least 2"),
                          (["--model", str(ckpt)], "is a flash-linear-attention checkpoint"),
                          (["--merge-interval", "0"], "--merge-interval must be an integer in [1, 1024]"),
                          # a traceback from transformers ("Repo id must be in the form ...": 53rd review)
                          (["--model", "/nonexistent/ckpt"], "--model /nonexistent/ckpt: no such checkpoint folder"),
                          # argparse's Path dropped the ./, and the name went to the hub (56th review)
                          (["--model", "./nosuch/ckpt"], "--model ./nosuch/ckpt: no such checkpoint folder"),
                          # a tokenizer traceback after the imports (a breaker's find, 2026-12-04)
                          (["--model", str(SCRIPT.parent)], "a folder without config.json, not a checkpoint folder")):
        run = subprocess.run(python_script_command(SCRIPT, *args, "--device", "cpu"), capture_output=True, text=True,
                             timeout=600)
        assert run.returncode == 2 and message in run.stderr, run.stderr[-2000:]


def test_quickstart_decode_time_is_read_within_one_call(monkeypatch):
    """The decode time was (a full generate − a separately timed one-token generate) / (new tokens − 1): on a loaded
    CPU the one-token call could take longer than the full one and the quickstart printed negative times (31st
    review). It is now read within one call, from the first generated token to the last (a streamer's timestamps):
    a slow one-token call no longer enters it, and it cannot be negative. A fake clock makes the check exact: each
    reading advances it by 10 ms, and a one-token generate call by 1,000 s (the wall clock made this test fail once
    when a loaded CI machine took 570 ms per tiny-model token, above its old 500 ms sanity bound)."""
    import importlib.util
    import types

    from utils import prompt_ids, tiny_model

    spec = importlib.util.spec_from_file_location("quickstart", SCRIPT)
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)
    clock = types.SimpleNamespace(now=0.0)

    def perf_counter():
        clock.now += 0.010
        return clock.now

    monkeypatch.setattr(quickstart, "time", types.SimpleNamespace(perf_counter=perf_counter))
    model = tiny_model("qwen3_5")
    generate = type(model).generate

    def slow_one_token_calls(self, *args, **kwargs):
        if kwargs.get("max_new_tokens") == 1:
            clock.now += 1000.0
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(type(model), "generate", slow_one_token_calls)
    inputs = {"input_ids": prompt_ids(2, 5), "attention_mask": torch.ones(2, 5, dtype=torch.long)}
    out, times = quickstart.timed_generate(model, inputs, None, new_tokens=4, repeats=2)
    assert out.shape == (2, 9)
    assert times == [pytest.approx(10.0), pytest.approx(10.0)]  # ms per token: three 10 ms readings apart


def _quickstart_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("quickstart", SCRIPT)
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)
    return quickstart


def test_quickstart_refuses_broken_configs_unsupported_models_and_unusable_devices(tmp_path, monkeypatch, capsys):
    """A breaker's finds (2026-12-04, second stop): a config.json that is not JSON, or JSON but not an object, ended in
    a JSONDecodeError / AttributeError traceback; a transformers model DeltaLogCache does not serve (gpt2) was refused
    only after the default cache's warm-up and timed runs; a hub id missing from the local cache gave an OSError
    traceback; --device mps (on a machine without it) and meta gave torch's errors after the model loaded; --repeats 0
    was reported as a --new-tokens problem. Each now exits with argparse's message before any generate call."""
    quickstart = _quickstart_module()
    calls = []
    monkeypatch.setattr(quickstart, "timed_generate", lambda *args: calls.append(args))
    bundled = SCRIPT.parents[1] / "eval" / "checkpoints" / "gdn-shakespeare"
    for name, text in (("not_json", "{not json"), ("a_list", '["a"]')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(text)
    gpt2 = tmp_path / "gpt2"
    transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=320)) \
        .save_pretrained(gpt2)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        (gpt2 / file).write_text((bundled / file).read_text())
    cases = [(["--model", str(tmp_path / "not_json")], "config.json: not a readable JSON file"),
             (["--model", str(tmp_path / "a_list")], "config.json: a JSON list, where a checkpoint's config is a JSON"),
             (["--model", str(gpt2)], "DeltaLogCache does not support 'gpt2' models"),
             (["--model", "nosuch-org/nosuch-model-hf-deltalog"], "cannot be loaded offline"),
             (["--device", "meta"], "--device meta: the meta device holds shapes without data"),
             (["--repeats", "0"], "--repeats must be at least 1; got 0")]
    if not torch.backends.mps.is_available():
        cases.append((["--device", "mps"], "--device mps: no mps device here"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for args, message in cases:
        monkeypatch.setattr("sys.argv", ["quickstart.py", *args])
        with pytest.raises(SystemExit) as exit_:
            quickstart.main()
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and message in err, (args, err[-2000:])
    assert calls == []
