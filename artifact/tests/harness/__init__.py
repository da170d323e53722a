"""Tests of dlfp.harness."""
