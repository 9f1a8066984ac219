"""One PPO update on a fixed global batch with the trainer's placement (`sharding.place_models`), single-process
or under torchrun (gloo), then a checkpoint: the trainer's code path for ``sharding="fsdp"``.

argv: checkpoint folder, sharding ('ddp' | 'fsdp'), number of samples (default 18), micro-batch size (default 2),
gradient checkpointing ('1' | '0', default '0'), further `UpdateConfig` settings as JSON (default '{}'; e.g. the
bf16 compute copy and token-budget micro-batches: the old log-probs then come from the bf16 copy and are not compared).
The old and reference log-probs go through the trainer's `update.ppo.with_old_and_ref_logprobs` (under FSDP: every rank
scores its share in lockstep, then all gather); the script checks that they equal the unsharded model's. The
reference is then moved 0.05 nats off so the KL term has a gradient. Rank 0 also writes ``before.pt`` (the initial
weights) and ``rollout.pt`` (the rollout generator's weights after its refresh from the updated policy)."""

import json
import os
import random
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from rlvmr_nb.update import distributed as dist  # noqa: E402
from rlvmr_nb.update.loss_terms import LossConfig  # noqa: E402
from rlvmr_nb.rollout.generation.hf import HFGenerator  # noqa: E402
from rlvmr_nb.models import load_model  # noqa: E402
from rlvmr_nb.runs.checkpoints import save_checkpoint  # noqa: E402
from rlvmr_nb.update.sharding import place_models  # noqa: E402
from rlvmr_nb.update.logprobs import response_logprobs  # noqa: E402
from rlvmr_nb.update.ppo import ppo_update, with_old_and_ref_logprobs  # noqa: E402
from rlvmr_nb.train_config import TrainConfig  # noqa: E402
from trainer_helpers import random_samples  # noqa: E402

torch.set_num_threads(1)
out, sharding = sys.argv[1], sys.argv[2]
n_samples = int(sys.argv[3]) if len(sys.argv) > 3 else 18
micro = int(sys.argv[4]) if len(sys.argv) > 4 else 2
checkpointing = len(sys.argv) > 5 and sys.argv[5] == "1"
levers = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
rank, world = dist.rank_world("gloo")
# float64: the ranks sum gradients in another order than one process does, and AdamW turns a last-bit difference of a
# near-zero, cancelling gradient into a step of up to `lr`; in float32 that left 1.3e-5 between the two (measured with
# other kernels), in float64 ~1e-13
model, tok = load_model("tiny-random:llama", seed=0, dtype=torch.float64)
samples = random_samples(n_samples, seed=0)
cfg = TrainConfig.from_dict(dict(lr=1e-3, mini_batch_size=8, micro_batch_size=micro, bf16_autocast=False, device="cpu",
                  sharding=sharding, out_dir=out, loss=LossConfig(entropy_coef=0.001), gradient_checkpointing=checkpointing, **levers))
unsharded_logp = response_logprobs(model, samples, tok.pad_token_id, cfg.update, 1.0)
before = {k: v.clone() for k, v in model.state_dict().items()}
# as the trainer places it: under FSDP every rank builds its shards from rank 0's model (gradient checkpointing on)
models = place_models(model if rank == 0 or sharding != "fsdp" else None, torch.device("cpu"), world, cfg.placement,
                      cfg.update, reference=True, rank=rank)
model = models.policy
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.update.lr)
plan = dist.plan_update(samples, cfg.update, cfg.loss.aggregation, random.Random(0), rank, world)  # as the trainer
used = dist.samples_used(plan)
samples = with_old_and_ref_logprobs(models, samples, used, tok.pad_token_id, cfg.update, 1.0,
                                    reference=bool(cfg.loss.kl_coef), rank=rank, world=world)
for i in used:
    if cfg.update.precision == "fp32-master":  # bf16 compute scores the old log-probs in bf16 itself
        torch.testing.assert_close(samples[i].old_logprobs, unsharded_logp[i], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(samples[i].ref_logprobs, unsharded_logp[i], rtol=1e-10, atol=1e-10)
    samples[i].ref_logprobs = samples[i].ref_logprobs - 0.05
model.train()
ppo_update(models.logprob_model, opt, samples, plan, tok.pad_token_id, cfg.loss, cfg.update, 1.0, world_size=world,
           compute=models.compute)
save_checkpoint(out, 0, model, opt, cfg.to_dict() | {"model": "tiny-random:llama"}, write=rank == 0)
generator = HFGenerator(model, tok)  # the trainer's rollout sampler (FSDP: a gathered copy), refreshed as each iteration
generator.update_weights(model)
if rank == 0:
    torch.save(before, os.path.join(out, "before.pt"))
    torch.save(generator.model.state_dict(), os.path.join(out, "rollout.pt"))
if world > 1:
    dist.barrier(world)  # rank 1 leaving while rank 0 still writes sometimes aborted it in gloo's teardown
    torch.distributed.destroy_process_group()
# Under load gloo's threads still abort a rank now and then while the interpreter tears down (std::terminate,
# SIGABRT) after all work is done; everything the test checks is written above, so leave without destructors.
sys.stdout.flush()
os._exit(0)
