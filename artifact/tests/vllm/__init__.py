"""Tests of dlfp.vllm."""
