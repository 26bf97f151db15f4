"""Run by tests/test_training.py under `torchrun --nproc-per-node=2`: a few DDP updates on the CPU
with gloo, then each rank saves its weights so the test can compare them."""

import sys
from pathlib import Path

import torch
from toy_seq2seq import ToyModel, toy_batches

from transformer_lib import training


def main(out: Path) -> None:
    torch.distributed.init_process_group("gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    torch.manual_seed(rank)  # deliberately different initial weights: DDP must broadcast rank 0's
    model = ToyModel()
    if rank == 0:
        torch.save(model.state_dict(), out / "initial.pt")

    def shard(epoch):  # each rank takes its own part of every epoch
        return toy_batches(epoch)[rank::world] or toy_batches(epoch)[:1]

    config = training.TrainingConfig(max_steps=6, warmup_steps=2, log_every=2, checkpoint_every=3)
    training.train(
        model, shard, config, out / "run", options=training.RunOptions(device="cpu", progress=False)
    )
    torch.save(model.state_dict(), out / f"rank{rank}.pt")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
