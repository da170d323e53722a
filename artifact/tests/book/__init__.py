"""Tests of dlfp.book."""
