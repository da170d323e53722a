"""Tests of dlfp.analysis."""
