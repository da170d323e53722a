"""The notebooks on a cluster: SLURM batch jobs (``dlfp cluster submit``) and the GPU-node check.

:mod:`~dlfp.cluster.plan` turns a target's parameter file into a job list (verify, paired
trials, one job per generalization model and TP size, results and book), skipping runs whose
folders are complete; :mod:`~dlfp.cluster.estimate` gives each job a time limit derived from its
configs; :mod:`~dlfp.cluster.sbatch` writes plain ``sbatch`` scripts and submits them chained
with ``--dependency=afterok``; :mod:`~dlfp.cluster.submit` is the command line. Every job runs
``dlfp pipeline`` on a subset of the notebooks, so a job executes them exactly as the pipeline does.
:mod:`~dlfp.cluster.gpucheck` is the one-command check of a GPU node before a submission.
Must not import: dlfp.bench.
"""
