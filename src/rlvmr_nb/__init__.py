"""rlvmr_nb: a tested, notebook-first reimplementation of RLVMR (arXiv 2507.22844)."""

__version__ = "0.1.0"
