"""dlfp-vllm's tests: tests/<subpackage>/ mirrors src/dlfp/<subpackage>/. They need vLLM 0.32 and this
distribution only (never the artifact), so they run in a clean environment (`make plugin-check`)."""
