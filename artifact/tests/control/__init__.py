"""Tests of dlfp.control."""
