"""Tests of dlfp.sim."""
