"""Analysis of runs: statistics, diagnostics and plots over run logs (stats, diagnostics, plots,
effects), and the studies of the notebooks (claims, cost, sensitivity, kl_study, horizon, ...),
which train what they need through grpo_lab.experiments."""
