"""The playground headlessly: its widgets steer a real Trainer on the tiny model, the button trains."""

import math

import pytest

from grpo_lab import profiles
from grpo_lab.playground import KL_COEF_KEY, PLAYGROUND_STEPS, Playground, changes_by_step, controls, embedded
from grpo_lab.training.trainer import LIVE_FIELDS, Trainer


@pytest.fixture
def lab(tiny_config) -> Playground:
    return Playground(Trainer(tiny_config(steps=20, eval_every=100)), steps_per_click=2)


def test_every_control_is_a_live_field(tiny_config):
    assert set(controls(tiny_config())) <= set(LIVE_FIELDS)


def test_moving_the_kl_slider_changes_the_next_step(lab):
    first = lab.train(1)[0]
    lab.controls["kl_coef"].value = 0.5  # what the browser does when the slider moves
    assert lab.trainer.config.kl_coef == 0.5
    row = lab.train(1)[0]
    assert first[KL_COEF_KEY] != 0.5
    assert row[KL_COEF_KEY] == 0.5
    assert float(lab.coef_in_use.value) == 0.5
    assert changes_by_step(lab.trainer.events) == {1: {"kl_coef": (first[KL_COEF_KEY], 0.5)}}


def test_dropdowns_and_sliders_reach_the_trainer(lab):
    lab.controls["kl_estimator"].value = "k1"
    lab.controls["group_size"].value = 2
    lab.controls["eps_high"].value = 0.28
    lab.train(1)
    config = lab.trainer.config
    assert (config.kl_estimator, config.group_size, config.eps_high) == ("k1", 2, 0.28)
    assert config.batch_size == config.prompts_per_step * 2


def test_clicking_trains_the_steps_per_click_and_redraws(lab):
    lab.steps_per_click.value = 3
    before = lab.plot.value
    lab.button.click()
    assert [row["step"] for row in lab.history] == [0, 1, 2]
    assert lab.plot.value != before
    assert lab.status.value.startswith("step 2 ")
    lab.button.click()
    assert len(lab.history) == 6
    assert not lab.button.disabled


def test_an_invalid_combination_is_shown_and_nothing_changes(tiny_config):
    lab = Playground(Trainer(tiny_config(steps=20, micro_batch_size=16)))  # batch 4 x 4 = 16
    lab.controls["group_size"].value = 2  # a batch of 8 is smaller than the micro-batch
    assert "micro_batch_size" in lab.status.value
    assert lab.trainer.config.group_size == 4
    lab.button.click()  # the button shows the error again instead of training
    assert "micro_batch_size" in lab.status.value
    assert lab.history == []
    with pytest.raises(ValueError, match="micro_batch_size"):
        lab.train(1)
    lab.controls["group_size"].value = 4  # back to a valid combination: training resumes
    assert len(lab.train(1)) == 1


def test_set_moves_several_controls_at_once(lab):
    changes = lab.set(kl_coef=0.1, eps_low=0.1)
    assert changes == {"kl_coef": (0.04, 0.1), "eps_low": (0.2, 0.1)}
    assert len(lab.trainer.events) == 1
    assert lab.controls["kl_coef"].value == 0.1


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"steps": 5}, "no control for"),
        ({"kl_coef": 0.0}, "outside the control's range"),
        ({"kl_coef": 50.0}, "outside the control's range"),
        ({"eps_low": 2.0}, "outside the control's range"),
        ({"kl_placement": "logits"}, "not a choice"),
    ],
)
def test_set_refuses_what_a_control_cannot_show(lab, values, message):
    with pytest.raises(ValueError, match=message):
        lab.set(**values)
    assert lab.trainer.events == []


def test_the_run_stops_at_its_step_budget(tiny_config):
    lab = Playground(Trainer(tiny_config(steps=3)))
    assert len(lab.train(5)) == 3
    assert lab.train(1) == []
    lab.button.click()
    assert "all 3 steps of this run are taken" in lab.status.value


def test_embedded_starts_from_the_preset_with_room_for_many_clicks(embedded_arith_path):
    lab = embedded(profiles.profile("smoke"), preset="dapo", seed=3, steps_per_click=4, num_iterations=2)
    config = lab.trainer.config
    assert (config.preset, config.seed, config.num_iterations, config.model) == ("dapo", 3, 2, "embedded")
    assert config.steps == PLAYGROUND_STEPS and config.val_size == profiles.profile("smoke").val_size
    assert lab.steps_per_click.value == 4
    assert lab.controls["eps_high"].value == config.eps_high


def test_a_run_without_kl_starts_unchanged_and_the_slider_switches_it_on(tiny_config):
    lab = Playground(Trainer(tiny_config(steps=20, kl_coef=0.0, kl_placement="off")))
    assert lab.controls["kl_coef"].value > 0  # a log slider has no 0: it sits at its lowest notch
    assert lab.pending == {} and lab.coef_in_use.value == "0"
    lab.train(1)
    assert lab.trainer.events == [] and lab.trainer.config.kl_coef == 0.0
    lab.controls["kl_placement"].value = "loss"
    assert lab.trainer.config.kl_coef == 0.0  # the untouched slider is no change
    lab.controls["kl_coef"].value = 0.1
    row = lab.train(1)[0]
    assert row[KL_COEF_KEY] == 0.1 and "kl" in row


def test_changes_by_step_merges_and_drops_changes_undone_before_a_step():
    events = [
        {"step": 2, "event": "reconfigure", "changes": {"kl_coef": [0.04, 0.1]}},
        {"step": 2, "event": "reconfigure", "changes": {"kl_coef": [0.1, 0.2], "eps_low": [0.2, 0.1]}},
        {"step": 5, "event": "reconfigure", "changes": {"eps_low": [0.1, 0.3]}},
        {"step": 5, "event": "reconfigure", "changes": {"eps_low": [0.3, 0.1]}},
    ]
    assert changes_by_step(events) == {2: {"kl_coef": (0.04, 0.2), "eps_low": (0.2, 0.1)}}


def test_the_plot_marks_changes_and_keeps_a_missing_metric_as_a_gap(lab):
    lab.train(2)
    lab.set(kl_placement="off")
    lab.train(2)
    kl_panel = lab.axes[1]
    xs, ys = kl_panel.lines[0].get_data()
    assert list(xs) == [0, 1, 2, 3]
    assert all(math.isnan(y) for y in ys[2:]) and not any(math.isnan(y) for y in ys[:2])
    assert [line.get_xdata()[0] for line in kl_panel.lines[1:]] == [1.5]
    assert "kl_placement loss → off" in lab.figure.legends[0].texts[0].get_text()
