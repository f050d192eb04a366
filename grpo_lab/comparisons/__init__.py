"""The comparisons layer: what several notebook studies share, below the studies and above the
experiments. The study bed (`bed`), the shared designs (`point_sets`), paired designs and the forest
plot (`paired`), the scheme arms (`scheme_arms`) and their sequential looks (`sequential_seeds`), the
ablation arms (`trick_arms`), the factorial screen (`screen`), the timed cost runs (`timing`), the
pilot of the long horizon (`horizon_pilot`) and the Tricks review read against the verdict table
(`tricks_review`). A study module (`grpo_lab.studies`) holds one notebook's settings, measures and
figures and imports what it shares from here, never from another study (docs/architecture.md)."""
