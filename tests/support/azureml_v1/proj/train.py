# A training script written for Azure ML SDK v1, as its tutorials wrote them: it is run by
# the tests unchanged, under torchrun, mpirun and Horovod, on the local, ssh and Slurm targets.
import argparse
import os

import torch
import torch.distributed as dist
from azureml.core.run import Run

parser = argparse.ArgumentParser()
parser.add_argument("--data-dir", type=str, required=True)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--learning-rate", type=float, default=0.1)
parser.add_argument("--horovod", action="store_true")
args = parser.parse_args()

run = Run.get_context()

if args.horovod:
    import horovod.torch as hvd

    hvd.init()
    rank, world = hvd.rank(), hvd.size()
else:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group()
    rank = dist.get_rank() if world > 1 else 0

with open(os.path.join(args.data_dir, "numbers.txt")) as f:
    numbers = [float(line) for line in f if line.strip()]

weight = torch.zeros(1)
for epoch in range(args.epochs):
    loss = sum((n - weight.item()) ** 2 for n in numbers) / len(numbers)
    grad = torch.tensor([sum(-2 * (n - weight.item()) for n in numbers) / len(numbers)])
    if args.horovod:
        grad = hvd.allreduce(grad, op=hvd.Average)
    elif world > 1:
        dist.all_reduce(grad)
        grad /= world
    weight -= args.learning_rate * grad
    run.log("loss", loss)
    run.log("accuracy", 1.0 / (1.0 + loss))

run.log_list("numbers", numbers)
run.log_row("epoch_summary", epochs=args.epochs, final_loss=loss)
run.tag("world_size", str(world))
run.set_tags({"script": "train.py"})
print(f"run {run.id} of experiment {run.experiment.name}, rank {rank} of {world}")
print("input datasets:", sorted(run.input_datasets))

if rank == 0:
    os.makedirs("outputs", exist_ok=True)
    torch.save({"weight": weight}, os.path.join("outputs", "model.pt"))
    os.makedirs("logs", exist_ok=True)
    with open(os.path.join("logs", "notes.txt"), "w") as f:
        f.write(f"final loss {loss}\n")
    with open("summary.txt", "w") as f:
        f.write(f"weight {weight.item()}\n")
    run.upload_file("outputs/summary.txt", "summary.txt")
    run.upload_file("extra/summary-copy.txt", "summary.txt")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        plt.plot(numbers)
        run.log_image("numbers", plot=plt)
    except ImportError:
        pass
run.complete()
