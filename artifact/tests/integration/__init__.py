"""Tests that start a real vLLM engine (CPU build), a SLURM cluster or the whole pipeline: marked slow."""
