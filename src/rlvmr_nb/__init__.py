"""rlvmr_nb: a tested, notebook-first reimplementation of RLVMR (arXiv 2507.22844).

The sub-packages are the method's stages, in the order data flows: `envs` → `rollout` → `scoring` → `update` →
`runs`, then `trainer` / `evaluate`, the `cli` and the notebooks (README, 'What is where')."""

__version__ = "0.1.0"
