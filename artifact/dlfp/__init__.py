"""dlfp: Decode-Latency Feedback Prefill for vLLM, and the artifact that evaluates it.

Two distributions share the ``dlfp`` import package. The plug-in, ``dlfp-vllm`` (``dlfp-vllm/`` in
this repository), holds :mod:`dlfp.control` and :mod:`dlfp.vllm` and depends on vLLM alone: that
is what a deployer installs. This distribution, ``dlfp``, holds the rest and depends on the plug-in.
With both installed the two halves are one package: their files share a ``site-packages/dlfp``
folder, or, installed editable from two folders, :func:`pkgutil.extend_path` below joins them
(the plug-in's half has no ``__init__``, so alone it is a namespace package).

One subpackage per concern, listed bottom up: :data:`LAYERS` is that order, and a module imports
only from its own layer or those below it, function-local imports included (each ``__init__`` also
says what it must not import; ``artifact/tests/test_layout.py`` holds both):

* :mod:`dlfp.control`: the control laws, their parameters, signals and step log (pure, no vLLM);
* :mod:`dlfp.vllm`: the scheduler plug-ins, executors and vLLM's command line, thin glue over vLLM 0.32;
* :mod:`dlfp.sim`: the modeled accelerator (cost model, executor, calibration);
* :mod:`dlfp.harness`: one arm on an engine: workload, open-loop client, engine, telemetry;
* :mod:`dlfp.metrics`: latency metrics from a unit's client traces (below the trials: a capacity sweep
  judges each finished point by them to know where it stops);
* :mod:`dlfp.trials`: paired trials: configs, design and pre-flight, runner, run folders, provenance;
* :mod:`dlfp.analysis`: numbers and words from run folders: statistics, tables, figures;
* :mod:`dlfp.studies`: the studies beyond the paper and the claims' verdicts;
* :mod:`dlfp.book`: the notebooks in order and the book build; :mod:`dlfp.cluster`: SLURM and
  the GPU-node check; :mod:`dlfp.bench`: benchmarks.

At the top: :mod:`dlfp.cli` (``dlfp``) and :mod:`dlfp.paths`. The plug-in's two layers import
nothing of the others (``artifact/tests/test_layout.py`` checks that too).
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

__version__ = "0.1.0"

LAYERS = ("paths", "control", "vllm", "sim", "harness", "metrics", "trials", "analysis", "studies", "book", "bench",
          "cluster", "cli")
"""The package's layers, bottom up: a subpackage (or top-level module) of ``dlfp`` imports nothing
from a layer after its own."""
