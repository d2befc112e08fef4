"""embedtext's benchmarks (``embedtext bench``; ``python -m embedtext.bench.<name>``).

Every suite compares paths side by side in one run, on the same model and rows, and reports
ratios: the machines are noisy, so only comparisons within a run mean anything.
"""
