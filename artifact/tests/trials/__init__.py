"""Tests of dlfp.trials."""
