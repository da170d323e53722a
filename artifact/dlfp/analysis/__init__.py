"""From run folders to numbers and words: metrics, paired statistics, tables, labels, figures.

Owns: reading verified traces and everything computed from them (nothing cached). Must not
import: dlfp.harness.arm, dlfp.studies.plans, dlfp.cluster, dlfp.book, dlfp.bench.
"""
