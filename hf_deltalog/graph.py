"""Greedy decoding with the model's one-token forward captured once as a CUDA graph and replayed every step.

Why an explicit ``torch.cuda.CUDAGraph`` and not transformers' compile path: eager decoding in transformers is bound
by Python and kernel-launch overhead (an MoE model of 40 layers launches thousands of kernels per token), and
``generate``'s automatic ``torch.compile(mode="reduce-overhead")`` of a static cache measured no faster than eager on
an 8-layer Qwen3.5-MoE slice on an H200 (22.5 vs 22.1 ms at B = 64, 80.4 vs 72.7 ms at B = 256, in an exploratory run
of 2026-11-29 whose script and log were not kept: unverified): Inductor re-lowers the
MoE and recurrent kernels and recompiles for every batch size, minutes of compilation for a model of this size.
Capturing the eager forward keeps exactly the eager kernels (transformers' grouped-GEMM MoE, FLA's and hf_deltalog's
Triton recurrences) and removes the launch overhead; the capture takes one forward.

The loop is cache-agnostic: any transformers ``Cache`` whose ``is_compileable`` is True works — transformers'
``StaticCache`` (the baseline: its linear-attention layers copy each new state into a fixed buffer) and
``DeltaLogCache(model, static=True, max_cache_len=...)`` alike. What makes one graph valid for every step:

* static inputs: the token ``[B, 1]``, the position ``[B, 1]`` and a 2-D attention mask ``[B, max_cache_len]``
  (prompt padding, then ones: slots after the current position are excluded by causality) live in fixed buffers,
  and the step writes the next token and position into them on the device;
* the caches advance on the device (static attention layers keep their length as a device tensor, DeltaLog layers
  read their append/merge phase on the device), so nothing on the host changes from step to step;
* greedy selection, EOS bookkeeping (finished rows emit ``pad_token_id``, as ``generate`` does) and the write of the
  token into the output buffer happen inside the graph.

``capture=False`` runs the very same step function eagerly: that is how the loop is tested on a CPU against
``model.generate`` (tokens identical), and the eager baseline of the benchmark.

    out = graph_generate(model, input_ids, attention_mask=mask, max_new_tokens=128,
                         cache=DeltaLogCache(model, static=True, max_cache_len=input_ids.shape[1] + 128))
"""

from __future__ import annotations

import inspect
import numbers
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["GraphDecoder", "GraphGenerateOutput", "check_greedy_generation_config", "graph_generate", "max_cache_len_of"]


def _top2_margin(logits: torch.Tensor) -> torch.Tensor:
    """``[B]`` fp32: the largest minus the second largest logit of each row of ``logits`` ``[B, vocab]``."""
    top = logits.topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]


def _token_ids(value: Any, name: str) -> list[int]:
    """An ``eos_token_id`` as generate takes it (an int, a list of ints, a tensor of them, or None) as a list."""
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    values = [] if value is None else [value] if isinstance(value, numbers.Integral) else value
    try:
        values = list(values)
    except TypeError:
        values = [values]
    if any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in values):
        raise TypeError(f"{name} must be an int, a list of ints or a tensor of them; got {value!r}")
    return [int(v) for v in values]


def max_cache_len_of(cache: Any) -> int:
    """Tokens per row a static cache can hold: the ``max_cache_len`` of its static full-attention layers (its
    sliding-window layers hold ``min(sliding_window, max_cache_len)`` slots, and their masks are cut from the same
    2-D mask). A cache whose attention layers are all sliding-window layers: the ``max_cache_len`` it was built with
    where it keeps one (a static DeltaLogCache), else its layers' slots.

    Raises:
        ValueError: the cache is not compileable (a dynamic cache cannot be replayed as a graph), or its static
            attention layers disagree on their slots.
    """
    if not getattr(cache, "is_compileable", False):
        raise ValueError(
            f"a captured decode step needs a static cache (is_compileable=True, buffers at fixed addresses); got "
            f"{type(cache).__name__} with is_compileable={getattr(cache, 'is_compileable', None)}. Use "
            "transformers.StaticCache(config, max_cache_len) or DeltaLogCache(model, static=True, max_cache_len=...)"
        )
    static = [layer for layer in cache.layers if getattr(layer, "max_cache_len", None)]
    lengths = {layer.max_cache_len for layer in static if not getattr(layer, "is_sliding", False)}
    if not lengths and isinstance(getattr(cache, "max_cache_len", None), int):
        lengths = {cache.max_cache_len}
    if not lengths:
        lengths = {layer.max_cache_len for layer in static}
    if len(lengths) != 1:
        raise ValueError(f"expected static attention layers of one max_cache_len; found {sorted(lengths)}")
    return lengths.pop()


@dataclass
class GraphGenerateOutput:
    """``sequences``: ``[B, T + n]`` int64 (prompt then generated tokens, as ``generate`` returns them);
    ``step_ms``: wall time of each decode step after the first token (ms; CUDA events on a GPU, so prefill is
    excluded); ``captured``: whether the steps replayed a CUDA graph."""

    sequences: torch.Tensor
    step_ms: list[float] = field(default_factory=list)
    captured: bool = False


class GraphDecoder:
    """Static buffers and one decode step for ``model`` on ``cache``; the step is captured as a CUDA graph.

    Usage: :meth:`prefill` once per prompt batch, then :meth:`step` per token (the first ``warmup_steps`` steps run
    eagerly on a side stream — they are real decode steps — the next one captures the graph, every later one
    replays it); :meth:`sequences` returns what was generated. The cache must be static (``is_compileable``).

    Args:
        model: a transformers causal LM (its forward takes ``cache=``, ``position_ids=``, ``logits_to_keep=``).
        cache: the static cache to decode into (transformers' ``StaticCache`` or a static ``DeltaLogCache``).
        capture: ``True`` captures a CUDA graph (needs CUDA), ``False`` runs the same step eagerly, ``"auto"``
            captures when the model is on a CUDA device and the cache has no sliding-window attention layer (which
            cannot be captured; see Raises).
        warmup_steps: eager steps before the capture (compile Triton kernels, initialise cuBLAS workspaces); at
            least 1 when the step is captured (a smaller value is raised to 1).
        eos_token_id: int or list of ints; rows that produced one emit ``pad_token_id`` from then on.
        pad_token_id: required with ``eos_token_id``.
        record_margins: also keep, for every row and generated token, the gap between its largest and second largest
            logit (fp32 ``margins`` ``[B, max_new_tokens]``, same index as ``tokens``; one ``topk`` per step inside
            the graph). Where two caches' tokens part, a small gap there shows a near-tie rather than an error.

    Raises:
        ValueError: a ``capture`` other than True, False or ``"auto"``, a dynamic cache, ``capture=True`` without CUDA, with the model on several devices or on a cache
            with sliding-window attention layers (transformers' ``StaticSlidingWindowLayer`` keeps its length on the
            host, so a replayed step would keep the captured step's mask), EOS without a pad token.
        TypeError: ``model`` that is not a ``torch.nn.Module``; a ``warmup_steps`` that is not an int ≥ 0; a
            ``record_margins`` that is not a bool; an ``eos_token_id`` that is not an int, a list of ints or a tensor
            of them; a ``pad_token_id`` that is not an int (or a one-element tensor).
    """

    def __init__(self, model, cache, *, capture: bool | str = "auto", warmup_steps: int = 2,
                 eos_token_id: int | list[int] | None = None, pad_token_id: int | None = None,
                 record_margins: bool = False):
        if not (isinstance(capture, bool) or (isinstance(capture, str) and capture == "auto")):
            raise ValueError(f"capture must be True, False or 'auto'; got {capture!r}")
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a transformers causal LM (a torch.nn.Module); got {type(model).__name__}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, numbers.Integral) or warmup_steps < 0:
            raise TypeError(f"warmup_steps must be an int ≥ 0 (a numpy integer too); got {warmup_steps!r}")
        if not isinstance(record_margins, bool):
            raise TypeError(f"record_margins must be True or False; got {record_margins!r}")
        self.model, self.cache = model, cache
        self.record_margins = record_margins
        self.max_cache_len = max_cache_len_of(cache)
        devices = {p.device for p in model.parameters()}
        device = next(model.parameters()).device
        sliding = [i for i, layer in enumerate(cache.layers) if getattr(layer, "is_sliding", False)]
        if capture == "auto":
            capture = device.type == "cuda" and not sliding
        if capture and sliding:
            # transformers' StaticSlidingWindowLayer keeps its length as a host int: it sets the query offset of the
            # sliding-window mask and picks the update (write a slot / roll the slots), and a replay never advances it
            raise ValueError(
                f"capture=True replays one recorded step, but layers {sliding} of this cache are transformers' static "
                "sliding-window attention layers, which keep their length on the host: a replayed step would keep "
                "the mask (and, once the window fills, the update) of the captured one. Decode such a model with "
                "capture=False here, or with model.generate")
        if capture and len(devices) > 1:
            raise ValueError(
                f"capture=True records one device's work in one CUDA graph, but this model's parameters are on "
                f"{len(devices)} devices ({', '.join(sorted(map(str, devices)))}; e.g. device_map='auto' over "
                "several GPUs). Decode such a model with capture=False here or with model.generate "
                "(DeltaLogCache places each layer's buffers on that layer's device)")
        if capture and device.type != "cuda":
            raise ValueError(f"capture=True needs the model on a CUDA device; it is on {device}. Use capture=False")
        self.capture_graph = bool(capture)
        self.warmup_steps = max(int(warmup_steps), 1) if self.capture_graph else 0
        self.device = device
        eos = _token_ids(eos_token_id, "eos_token_id")
        if eos and pad_token_id is None:
            raise ValueError("eos_token_id needs a pad_token_id (finished rows emit it, as generate does)")
        if pad_token_id is not None:
            if isinstance(pad_token_id, torch.Tensor) and pad_token_id.numel() == 1:
                pad_token_id = pad_token_id.item()
            if isinstance(pad_token_id, bool) or not isinstance(pad_token_id, numbers.Integral):
                raise TypeError(f"pad_token_id must be an int (or None without eos_token_id); got {pad_token_id!r}")
            pad_token_id = int(pad_token_id)
        self.eos = torch.tensor(eos, dtype=torch.long, device=device) if eos else None
        self.pad_token_id = pad_token_id
        self.graph: torch.cuda.CUDAGraph | None = None
        self._eager_steps = 0
        self._prompt: torch.Tensor | None = None
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = "logits_to_keep" in params

    # ------------------------------------------------------------------ prefill
    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
                max_new_tokens: int, prefill_chunk: int | None = None) -> torch.Tensor:
        """Run the prompt ``[B, T]`` (left padding marked by ``attention_mask`` ``[B, T]``) through the model into the
        cache and pick the first token. Positions follow ``generate`` (``cumsum(mask) − 1``). ``prefill_chunk``
        feeds the prompt in chunks of that many tokens (less activation memory; the recurrent layers then continue
        their state across chunks). Returns the first generated token ``[B]``.

        Raises:
            ValueError: ``max_new_tokens`` below 1, ``prefill_chunk`` below 1, an empty prompt, the cache already
                holds tokens (call ``cache.reset()`` first: prefill fills it from empty) or is inconsistent (a
                forward stopped part-way filled some of its layers), the cache holds fewer than
                ``T + max_new_tokens`` slots, ``attention_mask`` has another shape than ``input_ids``, the prompt
                holds a vision-language model's image or video placeholder tokens (the loop feeds token ids only: no
                pixels), or a graph was captured for another batch size or fewer new tokens. All before the model
                runs: the cache stays empty.
            TypeError: ``max_new_tokens`` is not an int (a bool or a float is not; a numpy integer is),
                ``prefill_chunk`` neither None nor an int, ``input_ids`` or ``attention_mask`` not a tensor (a list or a
                numpy array: convert it with ``torch.as_tensor``), ``input_ids`` not of an integer dtype (any integer
                dtype is taken as int64).
            ValueError also: ``attention_mask`` holding other values than 0 and 1. A row that ends in padding (right
            padding) gets a UserWarning, as ``generate`` gives.
        """
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral):
            raise TypeError(f"max_new_tokens must be an int of at least 1; got {max_new_tokens!r}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int of at least 1; got {max_new_tokens!r}")
        max_new_tokens = int(max_new_tokens)  # a numpy integer too, as generate and the cache take it
        if prefill_chunk is not None and (isinstance(prefill_chunk, bool)
                                          or not isinstance(prefill_chunk, numbers.Integral)):
            raise TypeError(f"prefill_chunk must be None or an int of at least 1; got {prefill_chunk!r}")
        if prefill_chunk is not None and prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be None or an int of at least 1; got {prefill_chunk!r}")
        prefill_chunk = None if prefill_chunk is None else int(prefill_chunk)  # numpy int8 + int8 would wrap
        if not isinstance(input_ids, torch.Tensor) or (attention_mask is not None
                                                       and not isinstance(attention_mask, torch.Tensor)):
            raise TypeError(f"input_ids and attention_mask must be torch tensors; got "
                            f"{type(input_ids).__name__} and {type(attention_mask).__name__}")
        if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
            raise TypeError(f"input_ids must hold integer token ids (int64, as a tokenizer returns them); got "
                            f"{input_ids.dtype}")
        if input_ids.dim() != 2 or input_ids.shape[1] == 0:
            raise ValueError(f"input_ids must be [B, T] with T ≥ 1; got shape {tuple(input_ids.shape)}")
        _refuse_media_placeholders(self.model, input_ids)
        if attention_mask is not None and tuple(attention_mask.shape) != tuple(input_ids.shape):
            raise ValueError(f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)} (one entry per "
                             f"prompt token, 0 for left padding); got {tuple(attention_mask.shape)}")
        if attention_mask is not None:
            _check_left_padding(attention_mask)
        held = int(self.cache.get_seq_length())  # one host read per prompt batch, never per step
        check = getattr(self.cache, "_check_consistent", None)
        if check is not None:  # a DeltaLogCache: its linear-attention layers must agree with that count (an
            check(held)        # interrupted prefill fills the first layers only, and the count reads attention ones)
        if held:
            raise ValueError(f"the cache already holds {held} tokens per row, and prefill fills it from empty: call "
                             "cache.reset() before the next prompt batch (or build a new cache)")
        B, T = input_ids.shape
        if T + max_new_tokens > self.max_cache_len:
            raise ValueError(f"the cache holds {self.max_cache_len} tokens per row; the prompt ({T}) and "
                             f"max_new_tokens ({max_new_tokens}) need {T + max_new_tokens}")
        if self.graph is not None and B != self.tokens.shape[0]:
            raise ValueError(f"this decoder's graph was captured for {self.tokens.shape[0]} rows; got {B}")
        if self.graph is not None and self.tokens.shape[1] < max_new_tokens:
            raise ValueError(f"the captured graph writes at most {self.tokens.shape[1]} tokens per row; "
                             f"got max_new_tokens={max_new_tokens}")
        dev = self.device
        input_ids = input_ids.to(dev, torch.long)  # the embedding takes int64 / int32 only
        mask = torch.ones(B, T, dtype=torch.long, device=dev) if attention_mask is None else attention_mask.to(dev)
        position_ids = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
        chunk = T if prefill_chunk is None else prefill_chunk
        for start in range(0, T, chunk):
            end = min(T, start + chunk)
            kw = {self._cache_kw: self.cache}
            if self._keep_kw:
                kw["logits_to_keep"] = 1
            out = self.model(input_ids=input_ids[:, start:end], attention_mask=mask[:, :end],
                             position_ids=position_ids[:, start:end], use_cache=True, **kw)
        logits = out.logits[:, -1, :].float()
        first = logits.argmax(-1)

        # Static buffers (allocated once per batch size; a captured graph keeps pointing at them).
        if self.graph is None or not hasattr(self, "tokens"):  # (a captured graph's limits are checked above)
            self.tokens = torch.zeros(B, max_new_tokens, dtype=torch.long, device=dev)
            self.input_buf = torch.zeros(B, 1, dtype=torch.long, device=dev)
            self.pos_buf = torch.zeros(B, 1, dtype=torch.long, device=dev)
            self.mask_buf = torch.ones(B, self.max_cache_len, dtype=torch.long, device=dev)
            self.unfinished = torch.ones(B, dtype=torch.bool, device=dev)
            self.step_idx = torch.zeros(1, dtype=torch.long, device=dev)
            if self.record_margins:
                self.margins = torch.zeros(B, max_new_tokens, dtype=torch.float32, device=dev)
        self.unfinished.fill_(True)
        first = self._finish_rows(first)
        self.tokens.zero_()
        self.tokens[:, 0] = first
        if self.record_margins:
            self.margins.zero_()
            self.margins[:, 0] = _top2_margin(logits)
        self.step_idx.fill_(1)
        self.input_buf.copy_(first[:, None])
        self.pos_buf.copy_(position_ids[:, -1:] + 1)
        self.mask_buf.fill_(1)
        self.mask_buf[:, :T].copy_(mask)
        # a copy: the caller may reuse its prompt buffer before reading sequences() (.to() above does not copy ids
        # already on the device); int64, as the generated tokens
        self._prompt = input_ids.to(dtype=torch.long, copy=True)
        self._max_new = max_new_tokens
        self._steps = 1  # tokens generated (the first one by the prefill)
        return first

    def _finish_rows(self, nxt: torch.Tensor) -> torch.Tensor:
        """``generate``'s EOS rule on the device: finished rows emit the pad token; rows that emit EOS finish."""
        if self.eos is None:
            return nxt
        nxt = torch.where(self.unfinished, nxt, torch.full_like(nxt, self.pad_token_id))
        self.unfinished &= ~torch.isin(nxt, self.eos)
        return nxt

    # ------------------------------------------------------------------ decode
    def _step_body(self) -> None:
        """One decode step on the static buffers (what the graph captures). No host reads, no host state changes."""
        kw = {self._cache_kw: self.cache}
        out = self.model(input_ids=self.input_buf, attention_mask=self.mask_buf, position_ids=self.pos_buf,
                         use_cache=True, **kw)
        logits = out.logits[:, -1, :].float()
        nxt = self._finish_rows(logits.argmax(-1))
        self.tokens.index_copy_(1, self.step_idx, nxt[:, None])
        if self.record_margins:
            self.margins.index_copy_(1, self.step_idx, _top2_margin(logits)[:, None])
        self.step_idx.add_(1)
        self.input_buf.copy_(nxt[:, None])
        self.pos_buf.add_(1)

    @torch.no_grad()
    def step(self) -> None:
        """Decode one token for every row (eager warm-up, capture, or replay; never synchronises with the host).

        Raises:
            ValueError: before :meth:`prefill`, or past the ``max_new_tokens`` given to it.
        """
        if self._prompt is None:
            raise ValueError("call prefill() before step()")
        if self._steps >= self._max_new:
            raise ValueError(f"all {self._max_new} tokens of this prefill were generated; prefill again")
        self._steps += 1
        if not self.capture_graph:
            self._step_body()
            return
        if self.graph is None and self._eager_steps < self.warmup_steps:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                self._step_body()
            torch.cuda.current_stream(self.device).wait_stream(side)
            self._eager_steps += 1
            return
        if self.graph is None:
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self._step_body()  # recorded, not run
        self.graph.replay()

    @property
    def captured(self) -> bool:
        """Whether the decode step has been captured as a CUDA graph (later steps replay it)."""
        return self.graph is not None

    def all_finished(self) -> bool:
        """Whether every row has produced an EOS (a host read: call it between steps, not inside one)."""
        return self.eos is not None and not bool(self.unfinished.any())

    def sequences(self, steps: int) -> torch.Tensor:
        """Prompt plus the first ``steps`` generated tokens: ``[B, T + steps]``.

        Raises:
            ValueError: before :meth:`prefill`, or ``steps`` outside ``[0, tokens generated so far]``.
            TypeError: ``steps`` is not an int (a numpy integer is)."""
        if self._prompt is None:
            raise ValueError("call prefill() before sequences()")
        if isinstance(steps, bool) or not isinstance(steps, numbers.Integral):
            raise TypeError(f"steps must be an int in [0, {self._steps}] (the tokens generated so far); got {steps!r}")
        steps = int(steps)
        if not 0 <= steps <= self._steps:
            raise ValueError(f"steps must be an int in [0, {self._steps}] (the tokens generated so far); got {steps!r}")
        return torch.cat([self._prompt, self.tokens[:, :steps]], dim=1)


# Config attributes naming the placeholder ids a vision-language (or audio) model replaces by encoder features
_MEDIA_TOKEN_ATTRS = ("image_token_id", "video_token_id", "image_token_index", "video_token_index", "audio_token_id")


def _refuse_media_placeholders(model, input_ids: torch.Tensor) -> None:
    """Raise ValueError when ``input_ids`` hold a placeholder id of ``model.config`` for image, video or audio
    features: the loop feeds token ids only (no ``pixel_values``), so it would decode the placeholders as plain
    tokens, not what ``generate`` with the images decodes."""
    config = getattr(model, "config", None)
    ids = {name: getattr(config, name) for name in _MEDIA_TOKEN_ATTRS
           if isinstance(getattr(config, name, None), int) and not isinstance(getattr(config, name), bool)}
    found = [f"{name}={value}" for name, value in ids.items() if bool((input_ids == value).any())]
    if found:
        raise ValueError(
            f"the prompt holds media placeholder tokens ({', '.join(found)}), but graph_generate / GraphDecoder "
            "take token ids only and cannot pass pixel_values, image_grid_thw or the like: the images would be "
            "decoded as plain tokens. Use model.generate(...) with the media inputs for this prompt (with "
            "DeltaLogCache(model) as the cache)")


def _caller_stacklevel() -> int:
    """``stacklevel`` for a warning raised by the function that calls this: the first frame outside this file and
    torch's ``no_grad`` wrappers (the user's call of ``prefill`` or ``graph_generate``)."""
    level, frame = 1, sys._getframe(1)
    wrapper = os.path.join("torch", "utils", "_contextlib.py")
    while frame is not None and (frame.f_code.co_filename == __file__ or frame.f_code.co_filename.endswith(wrapper)):
        frame, level = frame.f_back, level + 1
    return level


def _check_left_padding(attention_mask: torch.Tensor) -> None:
    """At prefill (one host read per prompt batch): raise ``ValueError`` unless ``attention_mask`` holds only 0 and 1,
    and warn, as ``generate`` does, when a row ends in padding (decoder-only models need left padding)."""
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError(f"attention_mask must hold 0 (padding) and 1 (prompt token) only; got the values "
                         f"{attention_mask.unique().tolist()[:8]}")
    if bool((attention_mask[:, -1] == 0).any()):
        warnings.warn("a row of attention_mask ends in padding: decoder-only models decode after the last prompt "
                      "position, so pad on the left (tokenizer padding_side='left'), as generate warns too",
                      UserWarning, stacklevel=_caller_stacklevel())


@torch.no_grad()
def graph_generate(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *, cache,
                   max_new_tokens: int, eos_token_id: int | list[int] | None = "config",
                   pad_token_id: int | None = "config", capture: bool | str = "auto", warmup_steps: int = 2,
                   prefill_chunk: int | None = None, time_steps: bool = False) -> GraphGenerateOutput:
    """Greedy decoding like ``model.generate(input_ids, attention_mask=..., do_sample=False, cache=cache)``, with the
    one-token forward replayed as a CUDA graph.

    Args:
        model: a transformers causal LM on one device.
        input_ids: ``[B, T]`` int64 prompt (left padding with ``attention_mask``).
        attention_mask: ``[B, T]`` 0/1, or None (no padding).
        cache: a static cache with at least ``T + max_new_tokens`` slots (``StaticCache`` or
            ``DeltaLogCache(model, static=True, max_cache_len=...)``); it is filled from empty.
        max_new_tokens: tokens to generate per row (fewer when every row produced an EOS).
        eos_token_id, pad_token_id: as ``generate``; ``"config"`` takes them from ``model.generation_config``
            (``pad`` falls back to the first EOS id, as ``generate`` does); None disables EOS stopping.
        capture: ``True`` / ``False`` / ``"auto"`` (CUDA graph when the model is on CUDA and the cache has no
            sliding-window attention layer).
        warmup_steps: eager decode steps before the capture.
        prefill_chunk: feed the prompt in chunks of this many tokens (None: one forward).
        time_steps: record the wall time of every decode step (CUDA events on a GPU; no host synchronisation
            until the end).

    Returns:
        :class:`GraphGenerateOutput`.

    Raises:
        ValueError: ``model.generation_config`` sets an option that ``generate(do_sample=False)`` would apply and this
            loop does not (:func:`check_greedy_generation_config`); see also :class:`GraphDecoder` and
            :meth:`GraphDecoder.prefill`.
        TypeError: ``model`` that is not a ``torch.nn.Module``, a ``time_steps`` that is not a bool; see also
            :class:`GraphDecoder` and :meth:`GraphDecoder.prefill` (wrong argument types).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a transformers causal LM (a torch.nn.Module); got {type(model).__name__}")
    if not isinstance(time_steps, bool):
        raise TypeError(f"time_steps must be True or False; got {time_steps!r}")
    config = model.generation_config
    if isinstance(eos_token_id, str) and eos_token_id == "config":
        eos_token_id = config.eos_token_id
    eos = _token_ids(eos_token_id, "eos_token_id")
    check_greedy_generation_config(config, prompt_length=input_ids.shape[-1] if hasattr(input_ids, "shape") else None,
                                   eos=bool(eos))
    if isinstance(pad_token_id, str) and pad_token_id == "config":
        pad_token_id = config.pad_token_id
        if pad_token_id is None and eos:
            pad_token_id = eos[0]
    dec = GraphDecoder(model, cache, capture=capture, warmup_steps=warmup_steps, eos_token_id=eos or None,
                       pad_token_id=pad_token_id)
    dec.prefill(input_ids, attention_mask, max_new_tokens=max_new_tokens, prefill_chunk=prefill_chunk)
    steps = 1
    timer = StepTimer(dec.device) if time_steps else None
    if timer:
        timer.start()
    while steps < max_new_tokens and not dec.all_finished():
        dec.step()
        steps += 1
        if timer:
            timer.lap()
    return GraphGenerateOutput(sequences=dec.sequences(steps), step_ms=timer.laps_ms() if timer else [],
                               captured=dec.captured)


# generate options that change greedy tokens (logits processors, stopping criteria, search strategies), each with the
# values that leave them off; graph_generate applies none of them
_GREEDY_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "repetition_penalty": (1.0,), "encoder_repetition_penalty": (1.0,), "no_repeat_ngram_size": (0,),
    "encoder_no_repeat_ngram_size": (0,), "bad_words_ids": (), "min_length": (0,), "min_new_tokens": (0,),
    "sequence_bias": (), "suppress_tokens": (), "begin_suppress_tokens": (), "forced_bos_token_id": (),
    "forced_eos_token_id": (), "exponential_decay_length_penalty": (), "guidance_scale": (1.0,),
    "watermarking_config": (), "stop_strings": (), "max_time": (), "num_beams": (1,), "num_beam_groups": (1,),
    "diversity_penalty": (0.0,), "force_words_ids": (), "constraints": (), "dola_layers": (), "token_healing": (False,),
    "prompt_lookup_num_tokens": (),
}


def check_greedy_generation_config(config: Any, prompt_length: int | None = None, eos: bool = True) -> None:
    """Raise ValueError when ``config`` (a model's ``generation_config``) sets an option that
    ``model.generate(..., do_sample=False)`` would apply and :func:`graph_generate` does not: a logits processor
    (``repetition_penalty``, ``no_repeat_ngram_size``, ``min_new_tokens``, ``bad_words_ids``, ``suppress_tokens``, ...),
    a stopping criterion (``stop_strings``, ``max_time``) or another search (``num_beams`` > 1, ...). The loop takes
    the argmax of the raw logits, so with any of these its tokens would silently differ from ``generate``'s. Sampling
    options (``do_sample``, ``temperature``, ``top_k``, ...) are not checked: the loop is greedy by definition, as
    ``generate(do_sample=False)`` is.

    Options that cannot act on this call pass: ``min_length`` up to ``prompt_length`` (the ids' length, padding
    included: transformers' ``MinLengthLogitsProcessor`` acts only on shorter ids), ``forced_bos_token_id`` after a
    prompt longer than one token (``ForcedBOSTokenLogitsProcessor`` acts only on one), and ``min_length`` /
    ``min_new_tokens`` when the call decodes without EOS ids (``eos`` False: generate builds neither processor)."""
    if config is None:
        return
    active = []
    for name, neutral in _GREEDY_NEUTRAL.items():
        value = getattr(config, name, None)
        if value is None or value in neutral or (isinstance(value, (list, tuple, dict, set)) and not value):
            continue
        if name in ("min_length", "min_new_tokens") and not eos:
            continue
        if prompt_length is not None and (
                (name == "min_length" and isinstance(value, int) and value <= prompt_length)
                or (name == "forced_bos_token_id" and prompt_length > 1)):
            continue
        active.append(f"{name}={value!r}")
    if active:
        raise ValueError(
            f"graph_generate decodes greedily from the raw logits, but model.generation_config sets {', '.join(active)}, "
            "which model.generate would apply: its tokens would differ silently. Unset them on the model's "
            "generation_config (e.g. model.generation_config.repetition_penalty = None) or use model.generate"
        )


class StepTimer:
    """Per-step wall times without host synchronisation: CUDA events on a GPU, ``perf_counter`` on a CPU."""

    def __init__(self, device: torch.device):
        self.cuda = torch.device(device).type == "cuda"
        self.marks: list[Any] = []

    def _mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def start(self) -> None:
        self.marks = [self._mark()]

    def lap(self) -> None:
        self.marks.append(self._mark())

    def laps_ms(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        return [1e3 * (b - a) for a, b in zip(self.marks, self.marks[1:])]
