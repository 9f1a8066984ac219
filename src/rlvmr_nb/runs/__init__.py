"""Run folders: everything a training, SFT or evaluation run leaves on disk, and how to read it back.

One run folder (``out_dir``) holds:

* ``config.json`` — the run's settings (`write_config`);
* ``run.json`` — the id of the run the folder holds, copied into each checkpoint (`run_id`); an earlier
  run's files are moved to ``earlier-runs/`` when a new run starts from zero in the folder;
* ``.rlvmr-owner.lock`` — held by the process writing the folder (`lock`);
* ``ckpt-XXXXX/`` — checkpoints after iteration XXXXX: ``model.pt`` (weights), ``state.pt`` (optimizer and
  torch RNG, tensors only), ``rng.json`` (Python and NumPy RNG), ``config.json`` (`checkpoints`);
* ``metrics.jsonl`` / ``metrics.csv`` / ``tensorboard/`` — one row per iteration (`logs`);
* ``validation.jsonl`` / ``validation.csv`` — one row per validation during training (`logs`, `trainer_validation`);
* ``episodes.jsonl`` — every rollout, one episode per line (`records.append_episodes`);
* an SFT output folder: a saved transformers model + ``sft_config.json`` + ``sft_log.jsonl`` (`policy`).

`policy.load_policy` turns any of these (or a model spec) back into ``(model, tokenizer)``.

Import from the module that defines a name (`runs.logs.read_metrics`, `runs.policy.load_policy`): the package
itself loads nothing, so reading a run's logs or settings (figures, reports) needs neither torch nor a model.
"""
