"""Tests of dlfp.bench."""
