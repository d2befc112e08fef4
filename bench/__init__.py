"""embedtext's benchmarks (``embedtext bench``): every suite compares paths side by side in one run,
on the same model and rows, and reports ratios (docs/benchmarks.md)."""
