"""Analysis of runs: it only reads run logs (statistics, diagnostics, effects, plots, claims' decision
rule) and never trains, samples or loads a model; the studies that make runs are in grpo_lab.studies
(tests/analysis/test_layout.py enforces it)."""
