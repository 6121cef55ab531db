"""One rank of test_fsdp2.py: the drafter sharded with FSDP2 (`fully_shard` per `DFlashDecoderLayer`, then
the root, as `trainer/configs/accelerate/fsdp.yaml` wraps it) on CPU over gloo; prints whether its
gradients equal the unsharded drafter's on the mean loss of both ranks' sequences."""

from __future__ import annotations

import json

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from lm.model import Target
from tests.trainer.dflash.tiny import tiny_drafter, tiny_loss, tiny_target
from trainer.dflash.model import DFlashDraftModel


def loss_of(model: torch.nn.Module, layer_ids: list[int], target: Target, seed: int) -> torch.Tensor:
    ids = torch.randint(1, 200, (40,), generator=torch.Generator().manual_seed(seed))
    mask = torch.tensor([0] * 15 + [1] * 25)
    taps = target.tap(ids[None], layer_ids)
    return tiny_loss(model, target, taps, ids, mask, torch.tensor([16, 22, 30])).loss


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    target = tiny_target()
    ref: DFlashDraftModel = tiny_drafter(target, block_size=4)
    model: DFlashDraftModel = tiny_drafter(target, block_size=4)  # same seed: the same weights
    layer_ids = model.target_layer_ids
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    loss_of(model, layer_ids, target, seed=rank).backward()  # each rank its own sequence
    grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}  # type: ignore[union-attr]
    ((loss_of(ref, layer_ids, target, 0) + loss_of(ref, layer_ids, target, 1)) / 2).backward()
    same = all(torch.allclose(grads[n], p.grad, atol=1e-6) for n, p in ref.named_parameters())  # type: ignore[arg-type]
    if rank == 0:
        kinds = sorted({type(p).__name__ for p in model.parameters()})
        print(json.dumps({"same_gradients": same, "parameter_types": kinds, "world": dist.get_world_size()}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
