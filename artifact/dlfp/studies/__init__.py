"""The studies beyond the paper's two arms and their verdicts: plans, frontier, boundary, claims.

Owns: which runs each study makes (baselines, sensitivity, explanations, the modeled
generalization ladder) and how they are judged. Must not import: dlfp.cluster, dlfp.book,
dlfp.bench.
"""
