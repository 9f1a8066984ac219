"""One PPO update on a fixed global batch, single-process or under torchrun (gloo): params written by rank 0."""

import os
import random
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from rlvmr_nb.loss import LossConfig  # noqa: E402
from rlvmr_nb.models import load_model  # noqa: E402
from trainer_helpers import random_samples  # noqa: E402
from rlvmr_nb.trainer import ResponseScorer, TrainConfig, _dist_rank_world, fill_logprobs, ppo_update  # noqa: E402

torch.set_num_threads(1)
rank, world = _dist_rank_world()
model, tok = load_model("tiny-random:llama", seed=0)
samples = random_samples(16, seed=0)
cfg = TrainConfig(lr=1e-3, mini_batch_size=8, micro_batch_size=2, bf16_autocast=False, loss=LossConfig(entropy_coef=0.001))
fill_logprobs(model, samples, "old_logprobs", tok.pad_token_id, cfg)
ref = {k: v.clone() for k, v in model.state_dict().items()}
for s in samples:  # a reference policy slightly off the current one, so the KL term has a gradient
    s.ref_logprobs = s.old_logprobs - 0.05
before = {k: v.clone() for k, v in model.state_dict().items()}
scorer = ResponseScorer(model, autocast=False)
train_model = torch.nn.parallel.DistributedDataParallel(scorer) if world > 1 else scorer
opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
model.train()
ppo_update(train_model, opt, samples, tok.pad_token_id, cfg, random.Random(0), rank, world)
if rank == 0:
    torch.save({"before": before, "after": {k: v.detach().clone() for k, v in model.state_dict().items()}}, sys.argv[1])
if world > 1:
    torch.distributed.destroy_process_group()
