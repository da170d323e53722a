"""Tests of dlfp.cluster."""
