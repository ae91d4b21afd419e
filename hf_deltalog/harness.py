"""An lm-evaluation-harness model (a subclass of lm-eval's `HFLM`) that runs every request through a cache.

`CachedHFLM(pretrained, cache="deltalog" | "default", ...)` differs from `HFLM` in two places:

- generation (`generate_until`): each `generate` call gets a fresh `DeltaLogCache(model)` (`cache="deltalog"`) or
  no cache argument at all, so transformers builds its default cache (`cache="default"`, the baseline). For
  flash-linear-attention's own models (`fla.models`: RWKV6, GatedDeltaNet, KDA) the baseline is a fresh FLA `Cache`
  handed to the model through `hf_deltalog.fla_cache.fla_generate_handover` (FLA 0.6.0's default generate drops its
  cache after the prompt under transformers 5.24, so "no cache argument" would not be a cached baseline there);
  `DeltaLogCache(model)` builds an `FLADeltaLogCache` for them;
- log-likelihood (`loglikelihood`, `loglikelihood_rolling`, multiple choice): a request `(context, continuation)` is
  scored by cached decoding instead of one full forward: `generate` prefills the context, then the continuation is
  fed one token at a time through the same kind of fresh cache (a logits processor forces each next token), and the
  log-probabilities come from the decode-step logits (log-softmax in fp64). So the cache, not a full forward,
  produces every score, and the two settings of `cache` differ in nothing else.

Requests are batched as lm-eval batches them (sorted by length, `batch_size` rows, contexts left-padded with an
attention mask). With `record_generations=True` each generated row is recorded (context ids, generated ids and the
top-2 token ids and logits of every step) in `generation_records`, which `eval/lm_eval_parity.py` uses to explain
generations that differ between the two caches.

Registered with lm-eval as model `hf-cached` (`--model hf-cached --model_args pretrained=DIR,cache=deltalog`, after
`import hf_deltalog.harness`; from the command line `python -m hf_deltalog.lm_eval_cli`, which is lm-eval's CLI with
the model registered: see :mod:`hf_deltalog.lm_eval_cli`). Needs `lm_eval` (tested: 0.4.13).
"""

from __future__ import annotations

import contextlib
import math
import numbers
from typing import Any

import torch
import torch.nn.functional as F
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM
from lm_eval.models.utils import Collator
from tqdm import tqdm
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.generation.utils import GenerateBeamDecoderOnlyOutput

from hf_deltalog.cache import BACKENDS, DeltaLogCache, _check_merge_interval
from hf_deltalog.interpreter import interpreting
from hf_deltalog.patches.fla import fla_family_of

CACHES = ("deltalog", "default")


class ForceTokens(LogitsProcessor):
    """Teacher forcing inside `generate`: at decode step `s` every row's scores become -inf except at
    `tokens[row, s]`, so greedy search feeds exactly `tokens` through the cache.

    `tokens`: `[B, S]` int64 on the model's device; `prompt_width`: the (padded) prompt length, to read `s` off the
    length of `input_ids`. The raw logits (`output_logits=True`) are not affected.
    """

    def __init__(self, tokens: torch.Tensor, prompt_width: int):
        self.tokens = tokens
        self.prompt_width = prompt_width

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        step = input_ids.shape[1] - self.prompt_width
        forced = torch.full_like(scores, -math.inf)
        return forced.scatter_(1, self.tokens[:, step:step + 1], 0.0)


def _check_batch_size(value: Any) -> int:
    """``value`` (HFLM's ``batch_size``: an int, or a string of one as lm-eval's command line passes it) as an int of
    at least 1. HFLM takes 0 or a negative size and then scores every request in one batch; "auto" varies the
    batches, which the two caches must share."""
    text = str(value).strip()
    if text.startswith("auto"):
        raise ValueError("CachedHFLM needs a fixed integer batch_size (the two caches must see the same batches); got "
                         f"{value!r}")
    signed = text[1:] if text[:1] in "+-" else text
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, str)) \
            or not (signed.isascii() and signed.isdigit()) \
            or int(text) < 1:
        raise ValueError(f"CachedHFLM needs a fixed integer batch_size of at least 1; got {value!r}")
    return int(text)


def check_arguments(cache: str = "deltalog", merge_interval: Any = None, deltalog_backend: str = "auto",
                    record_generations: Any = False, *, backend: Any = None, device: Any = None, batch_size: Any = 1,
                    dtype: Any = None) -> dict[str, Any]:
    """:class:`CachedHFLM`'s own arguments, and the `HFLM` ones it restricts, checked before any model loads (its
    constructor calls this first; ``python -m hf_deltalog.lm_eval_cli`` calls it on the command line's values before
    lm-eval starts). Values may come as lm-eval's command line passes them: strings, and numbers parsed from them
    (``merge_interval=-1`` arrives as the float ``-1.0``, ``+8`` as ``8.0``).

    Returns:
        ``{"merge_interval": int | None, "record_generations": bool, "batch_size": int}``, normalised.

    Raises:
        ValueError: an unknown ``cache`` or ``deltalog_backend`` (or a DeltaLog backend passed as HFLM's
            ``backend``), ``merge_interval`` or ``deltalog_backend`` given with ``cache="default"``,
            ``deltalog_backend="triton"`` for a ``device`` not on CUDA or on a machine without CUDA (without
            ``TRITON_INTERPRET=1``), a ``merge_interval`` outside [1, 1024], a ``record_generations`` that is not
            true/false, a ``batch_size`` that is not an integer of at least 1 (``"auto"`` included: parity needs
            fixed batches), a ``dtype`` string that names no torch dtype.
        TypeError: a ``merge_interval`` that is not an integer (or a string of one, or an integral float).
    """
    if backend in BACKENDS:
        raise ValueError(
            f"backend={backend!r} is lm-eval HFLM's own argument (the model kind: 'default', 'causal' or 'seq2seq'); "
            "DeltaLogCache's backend is deltalog_backend=auto|torch|triton"
        )
    if cache not in CACHES:
        raise ValueError(f"cache must be one of {CACHES}, got {cache!r}")
    if deltalog_backend not in BACKENDS:
        raise ValueError(f"deltalog_backend must be one of {BACKENDS}; got {deltalog_backend!r}")
    record = str(record_generations).strip().lower()
    if record not in ("1", "true", "yes", "0", "false", "no"):
        raise ValueError(f"record_generations must be true or false; got {record_generations!r}")
    if isinstance(merge_interval, str):  # lm-eval's model_args arrive as strings ("8")
        text = merge_interval.strip()
        signed = text[1:] if text[:1] in "+-" else text
        merge_interval = None if text in ("", "None") else int(text) if signed.isascii() and signed.isdigit() \
            else text
    elif isinstance(merge_interval, float) and merge_interval.is_integer():
        merge_interval = int(merge_interval)  # lm-eval's command line parses "-1" and "+8" as floats
    # as DeltaLogCache checks it (TypeError / ValueError naming what is accepted)
    merge_interval = _check_merge_interval(merge_interval, None)
    if cache == "default" and (merge_interval is not None or deltalog_backend != "auto"):
        given = ", ".join(f"{k}={v!r}" for k, v in (("merge_interval", merge_interval),
                                                    ("deltalog_backend", deltalog_backend))
                          if v not in (None, "auto"))
        raise ValueError(f"{given} configures DeltaLogCache, but cache='default' runs transformers' default "
                         "cache and would ignore it; use cache=deltalog, or leave it out")
    if deltalog_backend == "triton" and not interpreting() and (
            not torch.cuda.is_available() or (device is not None and not str(device).startswith("cuda"))):
        raise ValueError(  # the model's own device is checked again after it loads
            f"deltalog_backend='triton' needs a CUDA device (device={device!r}, torch.cuda.is_available() is "
            f"{torch.cuda.is_available()}) or TRITON_INTERPRET=1; use deltalog_backend=torch or auto on the CPU")
    if isinstance(dtype, str) and dtype != "auto" and not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise ValueError(f"dtype must be 'auto' or a torch dtype name (float32, bfloat16, float16, ...); got {dtype!r}")
    return dict(merge_interval=merge_interval, record_generations=record in ("1", "true", "yes"),
                batch_size=_check_batch_size(batch_size))


@register_model("hf-cached")
class CachedHFLM(HFLM):
    """lm-eval's `HFLM` with every request decoded through a fresh cache per `generate` call (see the module doc).

    Args beyond `HFLM`'s:
        cache: "deltalog" (a new `DeltaLogCache(model, merge_interval, backend)` per call) or "default"
            (transformers' default cache for the model; the baseline).
        merge_interval, deltalog_backend: passed to `DeltaLogCache` (`merge_interval=None`: its default). Refused
            with `cache="default"`, which would ignore them; a caller that switches `cache` after construction (as
            `eval/lm_eval_parity.py` does) constructs with `cache="deltalog"`.
        record_generations: keep `generation_records` (see the module doc).

    Raises:
        ValueError: before the model loads, what :func:`check_arguments` refuses (an unknown `cache` or
            `deltalog_backend`, DeltaLog options with `cache="default"`, a `merge_interval` outside [1, 1024], a
            `batch_size` that is not an integer of at least 1, an unknown `dtype`, ...); after it loads, a seq2seq
            model, `deltalog_backend="triton"` for a model not on CUDA (without `TRITON_INTERPRET=1`), and with
            `cache="deltalog"` a model `DeltaLogCache` does not serve (its own message: unsupported `model_type`,
            no linear-attention layer), before any request runs.
        TypeError: a `merge_interval` that is not an integer (or a string of one, or an integral float, as
            lm-eval's command line passes them).
    """

    def __init__(self, pretrained: Any, cache: str = "deltalog", merge_interval: int | str | None = None,
                 deltalog_backend: str = "auto", record_generations: bool | str = False, **kwargs):
        checked = check_arguments(cache, merge_interval, deltalog_backend, record_generations,
                                  backend=kwargs.get("backend"), device=kwargs.get("device"),
                                  batch_size=kwargs.get("batch_size", 1), dtype=kwargs.get("dtype"))
        merge_interval, record = checked["merge_interval"], checked["record_generations"]
        kwargs["batch_size"] = checked["batch_size"]
        super().__init__(pretrained=pretrained, **kwargs)
        if self.backend != "causal":
            raise ValueError(f"CachedHFLM supports decoder-only (causal) models; got backend {self.backend!r}")
        self.cache = cache
        self.merge_interval = merge_interval
        if deltalog_backend == "triton" and self.model.device.type != "cuda" and not interpreting():
            raise ValueError(
                f"deltalog_backend='triton' needs the model on a CUDA device (it is on {self.model.device}) or "
                "TRITON_INTERPRET=1; use deltalog_backend=torch or auto on the CPU"
            )
        self.deltalog_backend = deltalog_backend
        self.record_generations = record
        self.generation_records: list[dict] = []
        self.last_cache: DeltaLogCache | None = None
        self.is_fla_model = fla_family_of(self.model) is not None
        if cache == "deltalog":  # a model DeltaLogCache does not serve is refused here, not at its first request
            DeltaLogCache(self.model, merge_interval=merge_interval, backend=deltalog_backend)

    @property
    def cache(self) -> str:
        """The cache every request decodes through: ``"deltalog"`` or ``"default"``."""
        return self._cache_kind

    @cache.setter
    def cache(self, value: str) -> None:
        if value not in CACHES:
            raise ValueError(f"cache must be one of {CACHES}, got {value!r}")
        self._cache_kind = value

    def new_cache(self):
        """A fresh cache for one `generate` call: a `DeltaLogCache` (an `FLADeltaLogCache` for FLA's models); for
        `cache="default"` None (transformers builds its default), or a fresh FLA `Cache` for FLA's models."""
        if self.cache == "default":
            if self.is_fla_model:
                from fla.models.utils import Cache as FLACache

                return FLACache()
            return None
        self.last_cache = DeltaLogCache(self.model, merge_interval=self.merge_interval, backend=self.deltalog_backend)
        return self.last_cache

    def cache_plan(self) -> dict[int, dict]:
        """How the DeltaLog layers of the last cache decoded: {layer: {backend, merge_interval, dense_fla}}
        (empty before the first DeltaLog call). `dense_fla`: the layer ran FLA's dense kernel (M = 1 on a GPU)."""
        cache = self.last_cache
        if cache is None:
            return {}
        return {layer.layer_idx: dict(backend=layer.backend, merge_interval=layer.merge_interval,
                                      dense_fla=bool(layer.dense_fla if hasattr(layer, "dense_fla")
                                                     else layer.dense_kernel is not None))
                for layer in cache.deltalog_layers}

    def _fresh_cache(self):
        """`(generate kwargs, context)` for one `generate` call: the fresh cache of `new_cache` as `cache=` (nothing for
        transformers' default), and the context to call `generate` in: `fla_generate_handover` for an FLA baseline
        cache, else a no-op (a DeltaLog cache adapts the call itself, through hf_deltalog's generate patch)."""
        cache = self.new_cache()
        if cache is None:
            return {}, contextlib.nullcontext()
        if self.is_fla_model and self.cache == "default":
            from hf_deltalog.fla_cache import fla_generate_handover

            return {"cache": cache}, fla_generate_handover(self.model, cache)
        return {"cache": cache}, contextlib.nullcontext()

    # generate_until ---------------------------------------------------------------------------------------------
    def _model_generate(self, context, max_length: int, stop: list[str], **generation_kwargs) -> torch.Tensor:
        """HFLM's generation call (its stopping criteria, sampling arguments and autocast) with a fresh cache."""
        cache_kwargs, handover = self._fresh_cache()
        with handover:
            out = super()._model_generate(context, max_length, stop, return_dict_in_generate=True,
                                          output_logits=self.record_generations, **cache_kwargs, **generation_kwargs)
        if self.record_generations:
            self._record(context, generation_kwargs.get("attention_mask"), out)
        return out.sequences

    def _record(self, context: torch.Tensor, mask: torch.Tensor | None, out) -> None:
        """One record per context: its ids without padding, the first sequence generated for it, and the top-2 logits
        of that sequence's steps. ``generate`` returns ``n`` sequences per context (``num_return_sequences``) and, under
        beam search, logits per beam (``num_beams`` rows per context, not aligned with the returned sequences): there
        only step 0, which every beam of a context shares, is recorded."""
        width, contexts = context.shape[1], context.shape[0]
        logits = torch.stack(out.logits, dim=1)  # [rows, steps, vocab] fp32, as generate returns them
        top = logits.topk(2, dim=-1)
        values, ids = top.values.cpu().tolist(), top.indices.cpu().tolist()
        generated = out.sequences[:, width:].cpu().tolist()
        per_sequence, per_logits = len(generated) // contexts, len(ids) // contexts
        beam = isinstance(out, GenerateBeamDecoderOnlyOutput)
        for row in range(contexts):
            keep = context[row] if mask is None else context[row][mask[row].bool()]
            i = row * per_logits
            steps = 1 if beam else None  # beam search: step 0 only
            self.generation_records.append(dict(context=keep.cpu().tolist(), tokens=generated[row * per_sequence],
                                                top2_ids=ids[i][:steps], top2_logits=values[i][:steps]))

    # loglikelihood ----------------------------------------------------------------------------------------------
    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs: int | None = None):
        """Scores `(request, context_ids, continuation_ids)` by cached decoding; returns `[(logprob, is_greedy)]` in
        request order. Truncation as in HFLM: the last `max_length + 1` tokens of context + continuation are kept."""
        def _collate(req):
            toks = req[1] + req[2]
            return -len(toks), tuple(toks)

        batch_size = override_bs if override_bs is not None else int(self.batch_size)
        reorder = Collator(requests, sort_fn=_collate)
        results = []
        bar = tqdm(total=len(requests), disable=disable_tqdm or self.rank != 0,
                   desc=f"loglikelihood by cached decoding ({self.cache} cache)")
        for chunk in reorder.get_batched(n=batch_size):
            for (request, _, _), answer in zip(chunk, self._score_batch([(c, k) for _, c, k in chunk])):
                results.append(answer)
                if request is not None:
                    self.cache_hook.add_partial("loglikelihood", request, answer)
                bar.update(1)
        bar.close()
        return reorder.get_original(results)

    def _score_batch(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.eot_token_id
        prompts, conts = [], []
        for context, continuation in pairs:
            if not context or not continuation:
                raise ValueError("a log-likelihood request needs a non-empty context and continuation")
            if len(continuation) > self.max_length:
                raise ValueError(f"continuation of {len(continuation)} tokens exceeds max_length {self.max_length}")
            whole = (context + continuation)[-(self.max_length + 1):]
            prompts.append(whole[:len(whole) - len(continuation)])
            conts.append(continuation)
        width, steps = max(map(len, prompts)), max(map(len, conts))
        dev = self.device
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=dev)
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=dev)
        forced = torch.tensor([c + [pad] * (steps - len(c)) for c in conts], device=dev)
        kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=steps, min_new_tokens=0,
                      do_sample=False, num_beams=1, eos_token_id=None, pad_token_id=pad, use_cache=True,
                      logits_processor=LogitsProcessorList([ForceTokens(forced, width)]),
                      return_dict_in_generate=True, output_logits=True)
        with torch.autocast(device_type=self.device.type, dtype=self.mixed_precision_dtype,
                            enabled=self.mixed_precision_dtype is not None):
            cache_kwargs, handover = self._fresh_cache()
            with handover:
                out = self.model.generate(**kwargs, **cache_kwargs)
        fed = out.sequences[:, width:]
        if fed.shape[1] != steps or not torch.equal(fed, forced):
            raise RuntimeError("generate did not feed the continuation tokens as forced (stopped early?)")
        # [B, steps, vocab]; log-softmax and sums in fp64, so that the scores add no rounding of their own to the
        # logits' (a 1-ulp difference of an fp32 sum near -100 would already be 7.6e-6)
        logits = torch.stack(out.logits, dim=1).double()
        logp = F.log_softmax(logits, dim=-1).gather(-1, forced[..., None])[..., 0]
        greedy = logits.argmax(-1) == forced
        answers = []
        for row, c in enumerate(conts):
            answers.append((float(logp[row, :len(c)].sum()), bool(greedy[row, :len(c)].all())))
        return answers
