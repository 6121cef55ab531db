"""Speculative decoding of the in-process target with a DFlash drafter, as a decoding strategy.

It plugs into ``lm.engine.Engine`` (which owns stop tokens and ``max_tokens``), so the
evaluation, the lossless check and ``serve-target --draft`` all run exactly the same code.

One step: the block is [last accepted token, mask x (B-1)] at positions start..start+B-1; the drafter,
attending to the target's features of every position before ``start``, proposes B-1 tokens in one pass;
the target verifies the whole block in one forward. Greedy: the longest prefix of proposals equal to the
target's own argmax is accepted, plus the target's token after it (the bonus) — the output is the
target's greedy decode token for token. Sampling: standard speculative rejection sampling against the
drafter's distribution, which preserves the target's sampling distribution.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

from lm.engine import Engine, Sampler, SpecDecodeStats
from lm.model import Target
from lm.prefix import PrefixCache, prefill
from trainer.dflash.dflash2 import DFlash2DraftModel
from trainer.dflash.dspark import DSparkDraftModel
from trainer.dflash.kinds import load_drafter
from trainer.dflash.model import DFlashDraftModel, DraftCache


def _weight(module: torch.nn.Module) -> torch.Tensor:
    w = module.weight
    assert isinstance(w, torch.Tensor)
    return w


class DFlashSpeculative:
    """A ``DecodingStrategy``: yields the prefill's first token, then 1 + accepted drafts per verify."""

    name = "dflash"

    def __init__(
        self,
        drafter: DFlashDraftModel,
        block_size: int | None = None,
        prefill_chunk: int = 512,
        prefix: PrefixCache | None = None,
        scramble: bool = False,
    ) -> None:
        self.prefix = prefix  # prompts prefilled before (the plain decode of the same prompt) are not again
        # The context check (`trainer eval`): the drafter given other positions' features, the target
        # verifying as ever (still lossless). A drafter that accepts as much this way ignores its context.
        self.scramble = scramble
        self._pool: torch.Tensor | None = None  # the prompt's features, rolled half their length
        self._next = 0
        self.drafter = drafter.eval()
        self.block_size = int(block_size or drafter.block_size)
        if self.block_size < 2:
            raise ValueError("block_size must be at least 2")
        self.prefill_chunk = prefill_chunk
        self.spec_stats: SpecDecodeStats | None = SpecDecodeStats()
        self._prepare()

    def _prepare(self) -> None:
        """What the kind's drafter needs to serve ``self.block_size`` (DFlash: nothing)."""

    def _block_hidden(
        self, target: Target, last: int, ctx: torch.Tensor, start: int, cache: DraftCache, rows: int
    ) -> torch.Tensor:
        """The drafter's hidden states [rows, H] of the block [last, mask x (rows-1)] at position ``start``,
        attending to ``ctx``, the target's features of the positions before it."""
        dev = ctx.device
        block = torch.full((1, rows), self.drafter.mask_token_id, dtype=torch.long, device=dev)
        block[0, 0] = last
        positions = torch.arange(start - ctx.shape[1], start + rows, device=dev)[None]
        dtype = self.drafter.fc.weight.dtype  # the drafter may run in another precision than the target
        noise = F.embedding(block, _weight(target.embed_tokens)).to(dtype)
        return self.drafter(noise, ctx.to(dtype), positions, None, cache)[0]

    def _seen(self, ctx: torch.Tensor, prompt: bool) -> torch.Tensor:
        """The features the drafter is given for new context positions: the target's own, or scrambled
        (the prompt's rolled by half its length; each later position one of those, in turn)."""
        if not self.scramble:
            return ctx
        if prompt or self._pool is None:
            self._pool, self._next = ctx.roll(ctx.shape[1] // 2, dims=1), 0
            return self._pool
        idx = (self._next + torch.arange(ctx.shape[1], device=ctx.device)) % self._pool.shape[1]
        self._next += ctx.shape[1]
        return self._pool[:, idx]

    def _draft(
        self, target: Target, last: int, ctx: torch.Tensor, start: int, cache: DraftCache
    ) -> torch.Tensor:
        """Drafter logits [B-1, V] for the slots after ``last`` (at position ``start``)."""
        hidden = self._block_hidden(target, last, ctx, start, cache, self.block_size)
        head = _weight(target.lm_head)
        return F.linear(hidden[1:].to(head.dtype), head).float()

    def _propose(
        self, target: Target, last: int, ctx: torch.Tensor, start: int, cache: DraftCache, sampler: Sampler
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The B-1 drafted tokens, and (sampling) the drafter's probabilities they were drawn from."""
        dlogits = self._draft(target, last, ctx, start, cache)
        if sampler.greedy:
            return dlogits.argmax(-1), None
        qprobs = sampler.probs(dlogits)
        return torch.multinomial(qprobs, 1, generator=sampler.generator)[:, 0], qprobs

    @torch.no_grad()
    def steps(
        self, target: Target, prompt_ids: list[int], sampler: Sampler, max_new_tokens: int
    ) -> Iterator[list[int]]:
        stats = self.spec_stats
        assert stats is not None
        b = self.block_size
        layer_ids = self.drafter.target_layer_ids
        dcache = DraftCache()
        dev = _weight(target.embed_tokens).device
        if self.drafter.fc.weight.device != dev:
            self.drafter.to(dev)
        pre = yield from prefill(target, prompt_ids, layer_ids, self.prefill_chunk, self.prefix)
        cache, ctx = pre.cache, pre.taps  # taps of positions 0..p-1
        assert ctx is not None
        ctx = self._seen(ctx, prompt=True)
        last = int(sampler.sample(pre.logits))
        yield [last]
        start = len(prompt_ids)  # position of `last`: accepted, not yet seen by the target
        produced = 1
        limit = target.max_position_embeddings
        while produced < max_new_tokens and start + b <= limit:
            draft, qprobs = self._propose(target, last, ctx, start, dcache, sampler)
            block = torch.cat([torch.tensor([last]), draft.cpu()])[None].to(dev)
            out = target.forward(block, cache, layer_ids=layer_ids)
            assert out.taps is not None
            tlogits = out.logits[0].float()  # [B, V]: the target's next-token logits after each slot
            if sampler.greedy:
                post = tlogits.argmax(-1).cpu()
                acc = int(torch.cumprod((draft.cpu() == post[:-1]).to(torch.int64), 0).sum())
                bonus = int(post[acc])
            else:
                assert qprobs is not None
                acc, bonus = _rejection(
                    draft.cpu(), sampler.probs(tlogits).cpu(), qprobs.cpu(), sampler.generator
                )
            stats.record(b - 1, acc)
            new = [*draft[:acc].tolist(), bonus]
            produced += len(new)
            yield new
            # the target has now seen slots 0..acc (anchor + accepted drafts); the bonus is the next anchor
            Target.crop_cache(cache, start + acc + 1)
            ctx = self._seen(out.taps[:, : acc + 1], prompt=False)
            start += acc + 1
            last = bonus


class DSparkSpeculative(DFlashSpeculative):
    """DSpark drafting: one pass of the B-1 query slots [last, mask...] (slot k predicts the token after
    it), then slot by slot the Markov bias of the token drafted before it corrects the slot's logits,
    as vLLM's DSpark proposer does. Verification is DFlash's."""

    name = "dspark"
    drafter: DSparkDraftModel

    def _propose(
        self, target: Target, last: int, ctx: torch.Tensor, start: int, cache: DraftCache, sampler: Sampler
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        n = self.block_size - 1
        hidden = self._block_hidden(target, last, ctx, start, cache, n)
        head = _weight(target.lm_head)
        prev = torch.tensor([last], device=ctx.device)
        draft, probs = [], []
        for k in range(n):
            logits, _ = self.drafter.slot_logits(hidden[k : k + 1], prev, head)
            if sampler.greedy:
                tok = logits[0].argmax()
            else:
                probs.append(sampler.probs(logits)[0])
                tok = torch.multinomial(probs[-1], 1, generator=sampler.generator)[0]
            draft.append(tok)
            prev = tok.view(1)
        return torch.stack(draft), (torch.stack(probs) if probs else None)


class DFlash2Speculative(DFlashSpeculative):
    """DFlash2 drafting, as vLLM's candidate walk does it: one pass of the block, each slot's top-k
    candidates under the LM head, then slot by slot the candidate the selector scores best after the
    token chosen before it (the anchor for the first). Sampling draws from the softmax of the K scores
    (zero elsewhere), the distribution the rejection then checks. Verification is DFlash's."""

    name = "dflash2"
    drafter: DFlash2DraftModel

    def _prepare(self) -> None:
        self.drafter.set_block(self.block_size)  # its convolution restarts every block, as vLLM's does

    def _propose(
        self, target: Target, last: int, ctx: torch.Tensor, start: int, cache: DraftCache, sampler: Sampler
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        b = self.block_size
        dev = ctx.device
        hidden = self._block_hidden(target, last, ctx, start, cache, b)[1:]
        head = _weight(target.lm_head)
        ids, unary = self.drafter.candidates(hidden, head)
        prev = torch.tensor([last], device=dev)
        draft, probs = [], []
        for k in range(b - 1):
            scores = self.drafter.scores(hidden[k : k + 1], prev, ids[k : k + 1], unary[k : k + 1])[0]
            if sampler.greedy:
                pick = scores.argmax()
            else:
                full = torch.full((head.shape[0],), float("-inf"), device=dev).index_put_((ids[k],), scores)
                probs.append(sampler.probs(full[None])[0])
                tok = torch.multinomial(probs[-1], 1, generator=sampler.generator)[0]
                pick = (ids[k] == tok).nonzero()[0, 0]
            prev = ids[k, pick].view(1)
            draft.append(prev[0])
        return torch.stack(draft), (torch.stack(probs) if probs else None)


def _rejection(
    draft: torch.Tensor, p: torch.Tensor, q: torch.Tensor, generator: torch.Generator | None
) -> tuple[int, int]:
    """Speculative sampling: accept draft k with probability min(1, p_k(x)/q_k(x)); on the first rejection
    sample from normalise(max(0, p_k - q_k)); when all pass, sample the bonus from p after the last slot.
    ``draft`` [B-1], ``p`` [B, V] target probabilities after each slot, ``q`` [B-1, V] drafter's."""
    n = draft.numel()
    u = torch.rand(n, generator=generator)
    for k in range(n):
        x = int(draft[k])
        px, qx = float(p[k, x]), float(q[k, x])
        if qx > 0 and u[k] * qx <= px:
            continue
        residual = (p[k] - q[k]).clamp_min(0)
        total = float(residual.sum())
        dist = residual / total if total > 0 else p[k]
        return k, int(torch.multinomial(dist, 1, generator=generator))
    return n, int(torch.multinomial(p[n], 1, generator=generator))


def check_compatible(drafter: DFlashDraftModel, target: Target) -> None:
    """Refuse a drafter trained for another target (its widths, taps, vocabulary or RoPE would not fit)."""
    cfg = drafter.config
    problems = []
    if cfg.hidden_size != target.hidden_size:
        problems.append(f"hidden size {cfg.hidden_size} != target's {target.hidden_size}")
    if int(cfg.num_target_layers) != target.num_layers:
        problems.append(
            f"trained on a {cfg.num_target_layers}-layer target, this one has {target.num_layers}"
        )
    if max(drafter.target_layer_ids) >= target.num_layers:
        problems.append(f"taps {drafter.target_layer_ids} past the target's {target.num_layers} layers")
    rows = _weight(target.embed_tokens).shape[0]
    if not 0 <= drafter.mask_token_id < rows:
        problems.append(f"mask token {drafter.mask_token_id} outside the target's {rows} embeddings")
    theirs = dict(getattr(target.model.config, "rope_parameters", None) or {})
    mine = dict(cfg.rope_parameters or {})
    for key in sorted(set(theirs) | set(mine)):
        if theirs.get(key) != mine.get(key) and key in theirs:  # theta, the scaling type and its factors
            name = "theta" if key == "rope_theta" else key
            problems.append(f"RoPE {name} {mine.get(key)} != target's {theirs.get(key)}")
    if problems:
        raise ValueError(f"drafter does not fit target {target.name}: " + "; ".join(problems))


STRATEGIES: dict[type[DFlashDraftModel], type[DFlashSpeculative]] = {
    DFlashDraftModel: DFlashSpeculative,
    DFlash2DraftModel: DFlash2Speculative,
    DSparkDraftModel: DSparkSpeculative,
}


def speculative(
    drafter: DFlashDraftModel,
    block_size: int | None = None,
    prefix: PrefixCache | None = None,
    scramble: bool = False,
) -> DFlashSpeculative:
    """The decoding strategy of the drafter's kind (``scramble``: given other positions' features)."""
    return STRATEGIES[type(drafter)](drafter, block_size=block_size, prefix=prefix, scramble=scramble)


def engine_factory(  # type: ignore[no-untyped-def]
    draft_dir: str | Path, block_size: int | None = None, prefix_tokens: int = 0
):
    """For ``lm.standin.server.serve(engine_factory=...)``: the target's engine, drafting with DFlash;
    with `prefix_tokens`, prompts are prefilled through a prefix cache of that many positions."""

    def make(target: Target) -> Engine:
        drafter = load_drafter(draft_dir)
        check_compatible(drafter, target)
        prefix = PrefixCache(max_tokens=prefix_tokens) if prefix_tokens else None
        return Engine(target, speculative(drafter, block_size=block_size, prefix=prefix))

    return make
