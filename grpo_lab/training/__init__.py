"""The training core: the loop (`trainer`), sampling a batch (`rollout`), the composed objective
(`compose`), the per-step metrics (`step_metrics`), the injected faults (`faults`), resuming a run
(`checkpoint`) and where it runs (`devices`). The applications (`cli`, `bench`, `playground`, `plan`,
`figures`, the studies and the experiments) sit beside this package and import from it; nothing below
it does (docs/architecture.md). This file imports nothing, so `grpo_lab.training.checkpoint` loads
without the trainer."""
