"""Benchmarks: a registry of loaders, prompts, scorers and benchmark-specific metrics.

```python
from beacon.benchmarks import get_benchmark, list_benchmarks

bench = get_benchmark("synth")
for sample in bench.load(limit=10, seed=0):      # path=... for a local copy of a hub dataset
    text = bench.prompt(sample)
    verdict = bench.score(response, sample)      # beacon.verify.Verdict
```

Each benchmark lives in its own module and registers itself with `@register`; importing this
package imports them all. See docs/benchmarks.md for formats, sources and what is confirmed.
"""

from beacon.benchmarks import (  # noqa: F401  (imported for their @register side effect)
    ai2d,
    babyvision,
    chartqa,
    chartqapro,
    gameqa,
    hallusionbench,
    hrbench,
    infovqa,
    mathverse,
    mathvista,
    mmstar,
    synth,
    synth_demo,
    synth_keys,
    tirbench,
    treebench,
    visualprobe,
    visulogic,
    vstar,
)
from beacon.benchmarks.base import (
    Benchmark,
    UnknownBenchmarkError,
    get_benchmark,
    list_benchmarks,
    register,
)

__all__ = ["Benchmark", "UnknownBenchmarkError", "get_benchmark", "list_benchmarks", "register"]
