"""One PPO update on a fixed global batch, single-process or under torchrun (gloo): params written by rank 0.

argv: output path, number of samples (default 16), micro-batch size (default 2). With 18 samples, mini-batch 8
and micro-batch 2 the last mini-batch has one micro-batch, which two ranks cannot share evenly: the case that
used to hang DDP (ranks making different numbers of backward calls)."""

import os
import random
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from rlvmr_nb.update import distributed as dist  # noqa: E402
from rlvmr_nb.update.loss_terms import LossConfig  # noqa: E402
from rlvmr_nb.models import load_model  # noqa: E402
from rlvmr_nb.update.logprobs import ResponseLogprobModel, response_logprobs  # noqa: E402
from rlvmr_nb.update.ppo import ppo_update  # noqa: E402
from rlvmr_nb.train_config import TrainConfig  # noqa: E402
from trainer_helpers import random_samples  # noqa: E402

torch.set_num_threads(1)
out = sys.argv[1]
n_samples = int(sys.argv[2]) if len(sys.argv) > 2 else 16
micro = int(sys.argv[3]) if len(sys.argv) > 3 else 2
rank, world = dist.rank_world()
# float64, as tests/fsdp_update_script.py says why: ranks sum gradients in another order
model, tok = load_model("tiny-random:llama", seed=0, dtype=torch.float64)
samples = random_samples(n_samples, seed=0)
cfg = TrainConfig.from_dict(dict(lr=1e-3, mini_batch_size=8, micro_batch_size=micro, bf16_autocast=False,
                  loss=LossConfig(entropy_coef=0.001)))
for s, logp in zip(samples, response_logprobs(model, samples, tok.pad_token_id, cfg.update, 1.0)):
    s.old_logprobs = logp
    s.ref_logprobs = logp - 0.05  # a reference policy slightly off the current one, so the KL term has a gradient
before = {k: v.clone() for k, v in model.state_dict().items()}
logprob_model = ResponseLogprobModel(model, autocast=False)
train_model = torch.nn.parallel.DistributedDataParallel(logprob_model) if world > 1 else logprob_model
opt = torch.optim.AdamW(model.parameters(), lr=cfg.update.lr)
model.train()
plan = dist.schedule_update(len(samples), cfg.update.mini_batch_size, cfg.update.micro_batch_size, cfg.update.ppo_epochs,
                            random.Random(0), rank, world)
ppo_update(train_model, opt, samples, plan, tok.pad_token_id, cfg.loss, cfg.update, 1.0, world_size=world)
if rank == 0:
    torch.save({"before": before, "after": {k: v.detach().clone() for k, v in model.state_dict().items()}}, out)
if world > 1:
    torch.distributed.destroy_process_group()
