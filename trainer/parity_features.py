"""Two checks of the parity gate that need no serving engine: is the export the drafter that was trained, and
would the engine comparison see a feature fault at all?

(c) Fidelity. The export is read the way a server reads it (its own config: taps, block, mask token, RoPE)
    and run beside the drafter as trained (RUN/drafter, its own config), each on the target features its
    config names, over every block of the target's greedy continuations of the gate's prompts. The two
    configs must declare the same taps, block and mask token, and the slot states may differ by the
    export's bf16 rounding only (0.1–0.2 % measured). A tap planted in the export shows here even on a
    drafter whose acceptance does not depend on it.
(d) Sensitivity. The comparison of acceptance lengths (b) sees a fault only if the fault moves acceptance by
    more than its own threshold. So the export is run once more with every position given another
    position's features (the worst a wrong RoPE, mask or tap can do): if that costs less than (b)'s
    `mal_gap` of its teacher-forced acceptance length, the drafter does not read its context, a fault
    there would pass (b) unseen, and (b) is inconclusive (`--prove-export` then proves the path with a
    throwaway overfit on the gate's prompts, which does read it). A drafter that does read it is also run
    on its taps one layer early and one late: if either accepts more than its own by over `mal_gap` (and
    on more blocks than chance allows), its weights were trained on the neighbour's taps, whatever its
    configs say — it fails. (On SmolLM2 a
    neighbouring layer's features are close: an overfit drafter moves by 1–2 % there, so a one-layer
    shift planted in both configs is a fault too small for any acceptance check to see, (b) included.)

Teacher-forced acceptance: each block drafted from the true prefix, accepted up to its first wrong slot —
DFlash's own verification, on the target's greedy text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from lm import Target
from trainer.dflash import helpers as H
from trainer.dflash.kinds import load_drafter
from trainer.dflash.model import CONFIG_NAME, DFlashDraftModel, Slots
from trainer.dflash.objective import block_hidden, tokens_before
from trainer.drafting import frozen_weight
from trainer.evaluate import Prompt
from trainer.parity_probe import greedy, layer_features, prefix_cache

FIDELITY_TOL = 0.05  # relative distance of the export's slot states from the trained ones (bf16: 0.001–0.002)


def late(layer_ids: list[int], num_layers: int) -> list[int]:
    """Every tap one layer late (the last layer's one early: there is no later one)."""
    return [k + 1 if k + 1 < num_layers else k - 1 for k in layer_ids]


def early(layer_ids: list[int], num_layers: int) -> list[int]:
    """Every tap one layer early (layer 0's one late)."""
    return [k - 1 if k > 0 else min(1, num_layers - 1) for k in layer_ids]


def gate_layers(tap_lists: list[list[int]], num_layers: int) -> list[int]:
    """Every layer the gate taps: each drafter's taps, a layer either side of them, and the last (the
    target's own logits, check (a)) — declared to the gate's prefix cache before its first prefill, so
    one prefill of each prompt serves every check."""
    taps = {num_layers - 1}
    for own in tap_lists:
        taps |= {*own, *early(own, num_layers), *late(own, num_layers)}
    return sorted(taps)


def _slots(
    drafter: DFlashDraftModel,
    feats: dict[int, torch.Tensor],
    ids: torch.Tensor,
    mask: torch.Tensor,
    embed: torch.Tensor,
    head: torch.Tensor,
    taps: list[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(slot states [A, S, H], accepted slots per block [A]) of `drafter` on one sequence, every block anchored
    at a generated token, fed the features of `taps` (default its own)."""
    layers = taps or list(drafter.target_layer_ids)
    x = torch.cat([feats[k] for k in layers], dim=-1)[None]
    anchors = H.anchor_candidates(mask).nonzero().flatten()
    shift = int(drafter.query_shift)
    hidden, labels, valid = block_hidden(
        drafter, x, ids, mask, anchors, embed, drafter.block_size, drafter.mask_token_id, False, None, shift
    )
    a, s = labels.shape
    prev = tokens_before(ids, anchors, s, shift).flatten()
    _, pred = drafter.slot_terms(Slots(hidden.reshape(a * s, -1), prev, labels.flatten()), head, 0.0)
    hit = (pred.reshape(a, s) == labels) & valid
    hit = hit[:, 1:] if not shift else hit  # DFlash's slot 0 is the anchor itself, never drafted
    accepted = hit.long().cumprod(1).sum(1)
    return hidden.reshape(a, s, -1), accepted


@torch.no_grad()
def feature_checks(
    run: Path, target: Target, prompts: list[Prompt], max_tokens: int, mal_gap: float
) -> dict[str, Any]:
    """(c) and (d) over `prompts`' greedy continuations (RUN/drafter against RUN/export)."""
    if not (run / "drafter" / CONFIG_NAME).exists() or not (run / "export" / CONFIG_NAME).exists():
        return {"ok": True, "skipped": f"needs {run / 'drafter'} and {run / 'export'}"}
    trained = load_drafter(run / "drafter").float().eval()
    served = load_drafter(run / "export").float().eval()
    taps = list(served.target_layer_ids)
    moved = {"early": early(taps, target.num_layers), "late": late(taps, target.num_layers)}
    layers = gate_layers([list(trained.target_layer_ids), taps], target.num_layers)
    prefix_cache(target, layers)  # each prompt's greedy continuation and features from one prefill
    embed = frozen_weight(target.embed_tokens).detach().float()
    head = frozen_weight(target.lm_head).detach().float()
    dist = norm = 0.0
    acc: dict[str, list[torch.Tensor]] = {k: [] for k in ("trained", "export", "scrambled", "early", "late")}
    for p in prompts:
        completion = greedy(target, p.ids, max_tokens)
        ids = torch.tensor(p.ids + completion)
        mask = torch.tensor([0] * len(p.ids) + [1] * len(completion))
        feats = layer_features(target, p.ids + completion, layers)
        h_trained, a = _slots(trained, feats, ids, mask, embed, head)
        acc["trained"].append(a)
        h_served, a = _slots(served, feats, ids, mask, embed, head)
        acc["export"].append(a)
        # every position given another position's features: what a wrong RoPE, mask or tap amounts to at worst
        scrambled = {k: v.roll(v.shape[0] // 2, dims=0) for k, v in feats.items()}
        acc["scrambled"].append(_slots(served, scrambled, ids, mask, embed, head)[1])
        for name, shifted in moved.items():
            acc[name].append(_slots(served, feats, ids, mask, embed, head, shifted)[1])
        same = h_served.shape == h_trained.shape  # else another block size: as far apart as can be
        dist += float((h_served - h_trained).norm() if same else h_trained.norm()) ** 2
        norm += float(h_trained.norm()) ** 2
    tau = {k: 1 + float(torch.cat(v).float().mean()) for k, v in acc.items()}
    distance = (dist / norm) ** 0.5 if norm else 0.0
    declared = {
        key: [_as_list(getattr(trained, attr)), _as_list(getattr(served, attr))]
        for key, attr in (
            ("taps", "target_layer_ids"),
            ("block_size", "block_size"),
            ("mask", "mask_token_id"),
        )
    }
    differs = {key: pair for key, pair in declared.items() if pair[0] != pair[1]}
    change = {k: (tau[k] - tau["export"]) / tau["export"] for k in ("scrambled", *moved)}
    # a drafter that accepts more on its neighbour's taps than on its own was trained on the neighbour's
    better = [k for k in moved if change[k] > mal_gap and _more_often(acc[k], acc["export"])]
    sensitive = -change["scrambled"] > mal_gap or bool(better)  # it reads its context: a fault shows
    faithful = distance <= FIDELITY_TOL and not differs
    return {
        "ok": faithful and not better,
        "fidelity": {
            "ok": faithful,
            "relative_distance": round(distance, 4),
            "threshold": FIDELITY_TOL,
            "declared_differently": differs,
            "teacher_forced_acceptance": {k: round(tau[k], 4) for k in ("trained", "export")},
            "blocks": int(sum(len(v) for v in acc["trained"])),
        },
        "sensitivity": {
            "taps": taps,
            "moved_taps": moved,
            "teacher_forced_acceptance": {k: round(tau[k], 4) for k in ("export", "scrambled", *moved)},
            "relative_change": {k: round(c, 4) for k, c in change.items()},
            "threshold": mal_gap,
            "sensitive": sensitive,
            "better_elsewhere": better,
        },
    }


def _more_often(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """`a` accepts more than `b` on the same blocks beyond chance (a sign test at 95 %): a weak drafter's
    few accepted tokens move its mean by percents either way."""
    d = torch.cat(a).long() - torch.cat(b).long()
    more, fewer = int((d > 0).sum()), int((d < 0).sum())
    return more - fewer > 1.96 * (more + fewer) ** 0.5


def _as_list(v: Any) -> Any:
    return list(v) if isinstance(v, list | tuple) else v
