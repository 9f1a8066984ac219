"""Environments: one interface over ALFWorld and ScienceWorld, their splits, experts and a worker pool."""
