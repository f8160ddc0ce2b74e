# A v1-style script that takes the node's address and rank from its arguments, as v1 jobs
# wrote them ($AZ_BATCHAI_JOB_MASTER_NODE_IP, ${AZUREML_CR_NODE_RANK}), and chooses its own
# backend in init_process_group, as v1 scripts did.
import argparse

import torch
import torch.distributed as dist
from azureml.core.run import Run

parser = argparse.ArgumentParser()
parser.add_argument("--master", required=True)
parser.add_argument("--node-rank", type=int, required=True)
parser.add_argument("--note", default="")
args = parser.parse_args()

dist.init_process_group("gloo")
total = torch.ones(1)
dist.all_reduce(total)
run = Run.get_context()
run.log("world", total.item())
print(f"master {args.master} node {args.node_rank} rank {dist.get_rank()} note {args.note}")
dist.destroy_process_group()
