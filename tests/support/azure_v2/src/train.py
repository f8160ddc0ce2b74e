# A training script written as Azure ML SDK v2's examples write theirs: argparse for the
# job's inputs, torch.distributed from the variables the launcher sets, the model saved to
# the folder of an output, its metric logged with MLflow.
import argparse
import os

import mlflow
import torch
import torch.distributed as dist


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=str, help="folder of numbers.txt")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--learning_rate", type=float, default=0.1)
    parser.add_argument("--model_dir", type=str, default="./outputs")
    return parser.parse_args()


def main(args):
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    rank = int(os.environ.get("RANK", "0"))
    with open(os.path.join(args.data, "numbers.txt")) as f:
        numbers = torch.tensor([float(line) for line in f if line.strip()])
    weight = torch.zeros(1, requires_grad=True)
    for epoch in range(args.epochs):
        loss = ((numbers * weight - numbers) ** 2).mean()
        loss.backward()
        grad = weight.grad.clone()
        if world > 1:
            dist.all_reduce(grad)
            grad /= world
        with torch.no_grad():
            weight -= args.learning_rate * grad
        weight.grad.zero_()
        mlflow.log_metric("loss", loss.item(), step=epoch)
        print(f"rank {rank} of {world} epoch {epoch} loss {loss.item():.4f}")
    if rank == 0:
        os.makedirs(args.model_dir, exist_ok=True)
        torch.save({"weight": weight.detach()}, os.path.join(args.model_dir, "model.pt"))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(parse_args())
