"""Readers of run logs: statistics and plots. Nothing here imports the trainer."""
