"""Batch runs of the notebooks from the command line (`command`: ``rlvmr-nb figures``, ``rlvmr-nb notebook``)."""
