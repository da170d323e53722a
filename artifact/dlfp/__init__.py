"""dlfp: Decode-Latency Feedback Prefill for vLLM, and the artifact that evaluates it.

Pure logic (``controller``, ``params``, ``signals``) never imports vLLM; the plug-in
lives in :mod:`dlfp.vllm`.
"""

__version__ = "0.1.0"
