"""Tests of dlfp.studies."""
